"""Reads never crash on foreign data (issue 17, "Isolation"): names and definitions written
by another language — bytes that are not UTF-8, a 100 KB name, control and bidi characters,
JSON nested 100,000 deep — are shown escaped and clipped by `status`, `list`, `get` and the
invocation's warnings; `export` writes every schedule it can and names the others; no input
ends in a traceback. Foreign data is written with raw Redis commands, as another language
writes it, and checked in Redis itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml

from kiqbeat.core.limits import MAX_DEFINITION_FILE_BYTES, MAX_REASON_CHARS, MAX_SHOWN_CHARS
from kiqbeat.redis import keys
from tests.support.cli import Kiqbeat

GOOD = {"class": "DigestWorker", "cron": "0 9 * * *"}
NOT_UTF8 = b"bad\xff\xfename"
FOREIGN_NAMES = [
    NOT_UTF8,
    b"\x1b[2J\x1b[31mred\x1b]0;window title\x07",
    "invoice\u202egnp.exe".encode(),
    b"one\nset aside: forged line",
    b"x" * 100_000,
]
# A line that holds a name and a reason, each bounded, and a little text around them.
MAX_LINE = MAX_SHOWN_CHARS + MAX_REASON_CHARS + 200


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    """A client that sends and returns bytes as they are, as another language's would."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def plant(raw: redis.Redis, name: bytes, definition: bytes | None = None) -> None:
    """Write a schedule as docs/store.md's plain-Redis protocol says: definition + "plan me"."""
    data = json.dumps(GOOD).encode() if definition is None else definition
    raw.hset(keys.definitions(""), name, data)
    raw.zadd(keys.due(""), {name: 0})


def as_arg(name: bytes) -> str:
    """A name as the command line gives it to Python (bytes not UTF-8: surrogateescape)."""
    return name.decode(errors="surrogateescape")


def assert_safe(text: str) -> None:
    """Every line shows as itself (nothing to forge a line, colour or title) and is bounded."""
    assert "Traceback" not in text
    for line in text.splitlines():
        assert line.isprintable(), line[:300]
        assert len(line) <= MAX_LINE, line[:300]


def test_status_list_and_get_show_foreign_names_escaped_and_clipped(
    kiqbeat: Kiqbeat, raw: redis.Redis
) -> None:
    plant(raw, b"good", json.dumps(GOOD).encode())
    for name in FOREIGN_NAMES:
        plant(raw, name)
    ran = kiqbeat("run-once")
    assert ran.code == 0, ran.err
    warned = [line for line in ran.err.splitlines() if line.startswith("kiqbeat: warning: ")]
    assert len(warned) == len(FOREIGN_NAMES)
    assert_safe(ran.err)
    # The invocation set them aside by name, writing back the very bytes it read.
    assert set(raw.hkeys(keys.rejected(""))) == set(FOREIGN_NAMES)

    status = kiqbeat("status")
    assert status.code == 0, status.err
    assert_safe(status.out + status.err)
    assert "'bad\\udcff\\udcfename'" in status.out
    assert "'\\x1b[2J\\x1b[31mred\\x1b]0;window title\\x07'" in status.out
    assert "'invoice\\u202egnp.exe'" in status.out
    assert "'one\\nset aside: forged line'" in status.out
    assert not any(line.startswith("set aside: forged") for line in status.out.splitlines())

    listed = kiqbeat("schedules", "list")
    assert listed.code == 0, listed.err
    assert_safe(listed.out + listed.err)
    assert len(listed.out.splitlines()) == len(FOREIGN_NAMES) + 2  # + good + "(end ...)"

    for name in FOREIGN_NAMES:
        got = kiqbeat("schedules", "get", as_arg(name))
        assert got.code == 0, got.err
        assert_safe(got.out + got.err)
        assert "set aside:" in got.out


def test_json_output_of_foreign_names_is_valid_and_lossless(
    kiqbeat: Kiqbeat, raw: redis.Redis
) -> None:
    for name in FOREIGN_NAMES[:4]:
        plant(raw, name)
    assert kiqbeat("run-once").code == 0
    status = kiqbeat("status", "--json")
    assert status.code == 0, status.err
    assert status.out.replace("\n", "").isprintable()
    aside = json.loads(status.out)["set_aside"]
    # A UTF-8 name is itself; one that is not carries its bytes in hex beside its escaped form.
    recovered = {bytes.fromhex(e["name_hex"]) if "name_hex" in e else e["name"].encode()
                 for e in aside}
    assert recovered == set(FOREIGN_NAMES[:4])
    (foreign,) = [e for e in aside if "name_hex" in e]
    assert foreign["name"] == "bad\\udcff\\udcfename"

    listed = kiqbeat("schedules", "list", "--json")
    rows = json.loads(listed.out)["schedules"]
    assert {bytes.fromhex(r["name_hex"]) if "name_hex" in r else r["name"].encode()
            for r in rows} == set(FOREIGN_NAMES[:4])
    got = kiqbeat("schedules", "get", as_arg(NOT_UTF8), "--json")
    assert got.code == 0 and json.loads(got.out)["name_hex"] == NOT_UTF8.hex()


def test_a_schedule_whose_name_is_not_utf8_can_be_removed_by_that_name(
    kiqbeat: Kiqbeat, raw: redis.Redis
) -> None:
    plant(raw, NOT_UTF8)
    plant(raw, b"good")
    ran = kiqbeat("schedules", "remove", as_arg(NOT_UTF8))
    assert ran.code == 0, ran.err
    assert_safe(ran.out)
    assert raw.hkeys(keys.definitions("")) == [b"good"]
    assert raw.zrange(keys.due(""), 0, -1) == [b"good"]


@pytest.fixture
def ordered_hash(raw: redis.Redis) -> Iterator[None]:
    """Small hashes kept as listpacks, which HSCAN reads in insertion order: the bad
    schedules then come first and in the middle, as planted."""
    old = raw.config_get("hash-max-listpack-*")
    raw.config_set("hash-max-listpack-value", 1_000_000)
    raw.config_set("hash-max-listpack-entries", 1000)
    yield
    for key, value in old.items():
        raw.config_set(key, value)


@pytest.mark.usefixtures("ordered_hash")
@pytest.mark.parametrize("form", ["--jsonl", "--json", "yaml"])
def test_export_writes_every_schedule_it_can_and_names_the_others_after(
    kiqbeat: Kiqbeat, raw: redis.Redis, form: str, tmp_path: Path
) -> None:
    good = {f"good-{i}": {**GOOD, "args": [i, "résumé"]} for i in range(8)}
    names = list(good)
    plant(raw, NOT_UTF8)  # first
    for name in names[:3]:
        plant(raw, name.encode(), json.dumps(good[name]).encode())
    plant(raw, b"not-json", b"{cron: nope")  # in the middle
    plant(raw, b"deep", b"[" * 40_000 + b"]" * 40_000)
    # Exportable (JSON and YAML escape them), though import refuses the first name.
    for name in ("escape\x1b[31m", "résumé-日本"):
        plant(raw, name.encode(), json.dumps(GOOD).encode())
        names.append(name)
        good[name] = GOOD
    for name in names[3:8]:
        plant(raw, name.encode(), json.dumps(good[name]).encode())
    over = {**GOOD, "args": ["y" * 70_000]}
    plant(raw, b"over-limit", json.dumps(over).encode())
    plant(raw, b"not-an-object", b"[1, 2]")
    assert raw.object("encoding", keys.definitions("")) == b"listpack"
    assert raw.hkeys(keys.definitions(""))[0] == NOT_UTF8

    ran = kiqbeat("schedules", "export", *([form] if form != "yaml" else []))
    assert ran.code == 1
    assert_safe(ran.err)
    if form == "--jsonl":
        exported = {e["name"]: e["definition"] for e in map(json.loads, ran.out.splitlines())}
        assert len(ran.out.splitlines()) == len(good)
    elif form == "--json":
        exported = json.loads(ran.out)["schedules"]
    else:
        exported = yaml.safe_load(ran.out)["schedules"]
    assert exported == good
    reasons = ran.err.splitlines()
    for name, why in (("'bad\\udcff\\udcfename'", "not UTF-8"), ("not-json", "not JSON"),
                      ("deep", "over the limit"), ("over-limit", "over the limit"),
                      ("not-an-object", "not a JSON object")):
        assert any(line.startswith(f"kiqbeat: not exported: {name}: ") and why in line
                   for line in reasons), (name, reasons)
    assert reasons[-1] == "kiqbeat: 5 schedule(s) not exported; every other one was"

    if form == "--jsonl":  # what was exported imports as it was
        backup = tmp_path / "backup.jsonl"
        backup.write_text(ran.out)
        raw.flushdb()
        imported = kiqbeat("schedules", "import", str(backup))
        assert imported.code == 1
        assert "invalid: schedule name 'escape\\x1b[31m' holds the character U+001B" in imported.out
        stored = {k.decode(): json.loads(v)
                  for k, v in raw.hgetall(keys.definitions("")).items()}
        assert stored == {n: d for n, d in good.items() if n != "escape\x1b[31m"}


def test_import_stopped_by_maxmemory_says_how_far_it_got_and_the_store_is_consistent(
    kiqbeat: Kiqbeat, raw: redis.Redis, tmp_path: Path
) -> None:
    lines = tmp_path / "many.jsonl"
    with lines.open("w") as out:
        for i in range(3000):
            definition = {**GOOD, "args": [i, "p" * 400]}
            out.write(json.dumps({"name": f"s{i:04d}", "definition": definition}) + "\n")
    policy = raw.config_get("maxmemory-policy")["maxmemory-policy"]
    raw.config_set("maxmemory-policy", "noeviction")
    raw.config_set("maxmemory", int(raw.info("memory")["used_memory"]) + 400_000)
    try:
        ran = kiqbeat("schedules", "import", str(lines))
    finally:
        raw.config_set("maxmemory", 0)
        raw.config_set("maxmemory-policy", policy)
    assert ran.code == 1
    assert_safe(ran.err)
    written = raw.hlen(keys.definitions(""))
    assert 0 < written < 3000
    # Each call is atomic: every definition written has its index entry, and the written
    # ones are exactly the first `written` lines.
    assert raw.zcard(keys.due("")) == written
    assert not raw.hexists(keys.definitions(""), f"s{written:04d}")
    assert raw.hexists(keys.definitions(""), f"s{written - 1:04d}")
    assert "command not allowed when used memory > 'maxmemory'" in ran.err
    assert f"{written:,} definition(s) written before it" in ran.err
    assert f"the first not written is 's{written:04d}'" in ran.err
    assert "the store is consistent" in ran.err


def test_a_definition_nested_100000_deep_is_set_aside_and_read_without_a_traceback(
    kiqbeat: Kiqbeat, raw: redis.Redis
) -> None:
    deep = b'{"cron": "* * * * *", "class": "W", "args": ' + b"[" * 100_000 + b"]" * 100_000
    plant(raw, b"deep", deep + b"}")
    plant(raw, b"good")
    ran = kiqbeat("run-once")
    assert ran.code == 0, ran.err
    assert "schedule 'deep' set aside" in ran.err
    for args in (("status",), ("status", "deep"), ("schedules", "list"),
                 ("schedules", "get", "deep"), ("status", "--json")):
        shown = kiqbeat(*args)
        assert shown.code == 0, (args, shown.err)
        assert_safe(shown.out + shown.err)
    assert raw.hexists(keys.rejected(""), "deep")


@pytest.mark.parametrize("document", [
    "[" * 100_000 + "]" * 100_000,
    '{"a": ' * 100_000 + "1" + "}" * 100_000,
    "a:\n" + "".join("  " * i + "- \n" for i in range(1, 3000)),
])
def test_a_definition_file_nested_too_deep_is_refused_with_a_message(
    kiqbeat: Kiqbeat, raw: redis.Redis, tmp_path: Path, document: str
) -> None:
    path = tmp_path / "definition.json"
    path.write_text(document)
    ran = kiqbeat("schedules", "add", "deep", "--file", str(path))
    assert ran.code == 1
    assert ran.err.startswith("kiqbeat: ") and "Traceback" not in ran.err
    assert "nest" in ran.err
    assert raw.hlen(keys.definitions("")) == 0


def test_a_huge_definition_file_is_refused_with_a_message(
    kiqbeat: Kiqbeat, raw: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "huge.json"
    path.write_bytes(b'{"args": ["' + b"z" * (33 * 1024 * 1024) + b'"]}')
    ran = kiqbeat("schedules", "put", "huge", "--file", str(path))
    assert ran.code == 1
    assert f"over {MAX_DEFINITION_FILE_BYTES:,} bytes" in ran.err and len(ran.err) < 1000
    assert raw.hlen(keys.definitions("")) == 0


# ---------------------------------------------------------------------------- the process


def command(redis_url: str, *args: str, **popen: object) -> subprocess.Popen[bytes]:
    """The real `kiqbeat` command in its own process, on the test's Redis."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIQBEAT_")}
    env["KIQBEAT_REDIS_URL"] = redis_url
    exe = str(Path(sys.executable).with_name("kiqbeat"))
    return subprocess.Popen([exe, *args], env=env, stderr=subprocess.PIPE,
                            **popen)  # type: ignore[call-overload]


def test_output_to_a_closed_pipe_ends_quietly(redis_url: str, raw: redis.Redis) -> None:
    pipe = raw.pipeline(transaction=False)
    for i in range(3000):  # about 300 KB of lines: more than a pipe holds
        plant(pipe, f"schedule-{i:05d}".encode())  # type: ignore[arg-type]
    pipe.execute()
    proc = command(redis_url, "schedules", "list", "--count", "5000", stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()  # as `| head -1`: one line, then the reader goes away
    proc.stdout.close()
    code = proc.wait(timeout=60)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert first.startswith(b"schedule-")
    assert err == ""
    assert code == 141


def test_ctrl_c_ends_a_command_quietly(redis_url: str, raw: redis.Redis) -> None:
    before = len(raw.client_list())
    # An import from stdin waits on its input once it has reached Redis.
    proc = command(redis_url, "schedules", "import", "-", "--jsonl", stdin=subprocess.PIPE,
                   stdout=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while len(raw.client_list()) == before:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.decode() == "kiqbeat: interrupted\n"


def test_a_sharded_store_sets_aside_a_name_that_is_not_utf8_in_its_shard(
    kiqbeat: Kiqbeat, raw: redis.Redis
) -> None:
    assert kiqbeat("schedules", "reindex", "--shard", "0/2").code == 0
    # Its shard, as another language computes it: CRC-32 of the name's bytes.
    shard = zlib.crc32(NOT_UTF8) % 2
    raw.hset(keys.definitions(""), NOT_UTF8, json.dumps(GOOD))
    raw.zadd(keys.due("", (shard, 2)), {NOT_UTF8: 0})
    for index in (0, 1):
        ran = kiqbeat("run-once", "--shard", f"{index}/2")
        assert ran.code == 0, ran.err
        assert_safe(ran.err)
    assert raw.hkeys(keys.rejected("")) == [NOT_UTF8]
    raw.zadd(keys.due("", (shard, 2)), {NOT_UTF8: 0})  # "plan me" again, then 3 shards
    moved = kiqbeat("schedules", "reindex", "--shard", "0/3")
    assert moved.code == 0, moved.err
    assert raw.zscore(keys.due("", (zlib.crc32(NOT_UTF8) % 3, 3)), NOT_UTF8) is not None
