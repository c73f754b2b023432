"""One schedule's oversized definition never stops the others (DESIGN §2 "Confined").

A definition over MAX_DEFINITION_BYTES is set aside without being transferred (its length
is asked in Redis first), a due batch carries at most MAX_BATCH_DEFINITION_BYTES, and so an
invocation's memory is bounded whatever the store holds. The central test runs a real
`kiqbeat run-once` process under a pod's memory limit (a cgroup v1 group of 128 MiB, as the
Kubernetes manifests set) against a real Redis holding hostile definitions beside a control
schedule; the independent proofs are the control's distinct jids in its queue, the reasons
in the rejected hash, and the bytes Redis sent (INFO stats), far below the hostile sizes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from kiqbeat.core.limits import (
    MAX_BATCH_DEFINITION_BYTES,
    MAX_DEFINITION_BYTES,
    MAX_DEFINITION_FILE_BYTES,
)
from kiqbeat.core.plan import Entry, plan_due, to_ms
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.demo.server import RedisServer
from kiqbeat.document.validate import read_definition
from kiqbeat.engine import Engine
from kiqbeat.errors import ConfigError
from kiqbeat.redis.connection import connect
from kiqbeat.redis.definitions import definition_sha
from kiqbeat.redis.side import RedisSide
from kiqbeat.store import Store
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import cron_jids, push_plan, pushed_jobs
from tests.support.marks import marked_names

CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
POD_LIMIT_BYTES = 128 * 1024 * 1024  # infra/ manifests: resources.limits.memory 128Mi
STORE_ONLY = Config(schedules=())
SCHEDULES, DUE, REJECTED = "kiqbeat:schedules", "kiqbeat:due", "kiqbeat:rejected"
GARBAGE_BYTES = 40 * 1024 * 1024  # 41,943,040: the non-JSON value
HUGE_BYTES = 30 * 1024 * 1024  # the valid definition with a huge description
LONG_NAME = "n" * 2000  # from another language: longer than names may be (1000)
CONTROL = {"cron": "* * * * *", "class": "ControlWorker"}


@contextmanager
def memory_group(limit_bytes: int) -> Iterator[Path]:
    """A cgroup v1 memory group limited to `limit_bytes` (no swap), removed afterwards."""
    group = CGROUP_ROOT / f"kiqbeat-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cgroup v1 memory groups are not writable here ({CGROUP_ROOT}: {exc})")
    try:
        (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
        swap = group / "memory.memsw.limit_in_bytes"
        if swap.exists():
            swap.write_text(str(limit_bytes))
        yield group
    finally:
        group.rmdir()


def run_limited(group: Path, *args: str, redis_url: str) -> subprocess.CompletedProcess[str]:
    """`kiqbeat ARGS...` as a new process inside `group` (this worktree's kiqbeat)."""
    env = {k: v for k, v in os.environ.items()
           if (not k.startswith("KIQBEAT_") or k == "KIQBEAT_TEST_CLOCK") and k != "REDIS_URL"}
    env["KIQBEAT_REDIS_URL"] = redis_url
    command = " ".join(["exec", sys.executable, "-m", "kiqbeat", *args])
    return subprocess.run(["bash", "-c", f"echo $$ > {group}/cgroup.procs; {command}"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def info_stat(client: redis.Redis, field: str) -> int:
    """One number of INFO stats."""
    return int(client.info("stats")[field])


def hostile_store(client: redis.Redis) -> dict[str, int]:
    """Definitions over the limit, written with plain commands, each due: name -> size."""
    huge = json.dumps({**CONTROL, "class": "HugeWorker", "description": "d" * HUGE_BYTES})
    values = {"garbage": b"\xff not JSON " * (GARBAGE_BYTES // 11) + b"x" * (GARBAGE_BYTES % 11),
              "huge": huge.encode(), LONG_NAME: b"[" * (MAX_DEFINITION_BYTES + 1)}
    for name, value in values.items():
        client.hset(SCHEDULES, name, value)
        client.zadd(DUE, {name: 0})
    return {name: len(value) for name, value in values.items()}


def test_an_invocation_under_a_pods_memory_limit_sets_oversized_definitions_aside_unread(
    redis_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """A 40 MB non-JSON value, a 30 MB valid definition and an over-limit one under a
    2,000-character name, beside a minutely control: `kiqbeat run-once` under 128 MiB exits
    0, pushes the control's ticks, sets the three aside by their size (the name clipped in
    messages), and Redis sends far fewer bytes than any of them."""
    client = connect(redis_url)
    Store(client).put("control", CONTROL)
    t0 = minute_floor(redis_now(client)) - timedelta(minutes=3) + timedelta(seconds=5)
    Engine(client=client).run(STORE_ONLY, now=t0)  # the control is first seen at t0
    sizes = hostile_store(client)
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 10_000)
    client.slowlog_reset()
    sent_before = info_stat(client, "total_net_output_bytes")
    before = redis_now(client)
    with memory_group(POD_LIMIT_BYTES) as group:
        done = run_limited(group, "run-once", redis_url=redis_url)
        peak_bytes = int((group / "memory.max_usage_in_bytes").read_text())
    after = redis_now(client)
    sent_bytes = info_stat(client, "total_net_output_bytes") - sent_before
    slowest = max(client.slowlog_get(10_000), key=lambda e: e["duration"])
    client.config_set("slowlog-log-slower-than", 10_000)
    with capsys.disabled():
        print(f"\nrun-once under {POD_LIMIT_BYTES >> 20} MiB beside {sum(sizes.values()):,} "
              f"bytes of hostile definitions: peak {peak_bytes / 2**20:.1f} MiB (cgroup), "
              f"Redis sent {sent_bytes:,} bytes, slowest call {slowest['duration']} µs "
              f"({slowest['command'][:40]!r})")

    assert done.returncode == 0, done.stderr[-2000:]
    control = [job["jid"] for job in pushed_jobs(client) if job["class"] == "ControlWorker"]
    assert len(control) == len(set(control))
    assert set(cron_jids("control", CONTROL["cron"], t0, before)) <= set(control)
    assert set(control) <= set(cron_jids("control", CONTROL["cron"], t0, after))
    assert not [j for j in pushed_jobs(client) if j["class"] == "HugeWorker"]
    for name, size in sizes.items():
        why = client.hget(REJECTED, name)
        assert why is not None, f"{name[:20]} was not set aside"
        assert f"{size:,} bytes, over the limit of {MAX_DEFINITION_BYTES:,} bytes" in why.decode()
        assert client.zscore(DUE, name) is None
    output = done.stdout + done.stderr
    assert LONG_NAME not in output and LONG_NAME not in client.hget(REJECTED, LONG_NAME).decode()
    assert "n" * 50 in output, "the long name is named, clipped"
    assert sent_bytes < 1024 * 1024 < min(sizes.values()) * 16
    client.close()


def test_a_huge_definition_file_is_refused_under_a_pods_memory_limit_before_it_is_parsed(
    redis_url: str, tmp_path: Path,
) -> None:
    """`kiqbeat schedules add --file` with the issue's 30 MB description, under 128 MiB:
    refused naming the file and the limit, exit 1, nothing written (it used to parse the
    whole file first and peak at 153 MB: OOM-killed, exit 137)."""
    client = connect(redis_url)
    path = tmp_path / "big.json"
    path.write_text(json.dumps({**CONTROL, "description": "d" * HUGE_BYTES}))
    with memory_group(POD_LIMIT_BYTES) as group:
        done = run_limited(group, "schedules", "add", "big", "--file", str(path),
                           redis_url=redis_url)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert str(path) in done.stderr and f"over {MAX_DEFINITION_FILE_BYTES:,} bytes" in done.stderr
    assert f"{MAX_DEFINITION_BYTES:,} bytes" in done.stderr and len(done.stderr) < 1000
    assert not client.exists(SCHEDULES)
    client.close()


def test_a_batch_cut_short_by_its_definitions_bytes_does_not_end_the_invocation(
    redis_url: str,
) -> None:
    """Due definitions carrying more than MAX_BATCH_DEFINITION_BYTES are read over several
    round trips, and all of them are planned in the same invocation."""
    client = connect(redis_url)
    description = "d" * (MAX_DEFINITION_BYTES - 200)
    count = MAX_BATCH_DEFINITION_BYTES // len(description) * 2 + 1  # two cuts at least
    store = Store(client)
    for i in range(count):
        store.put(f"s{i}", {**CONTROL, "class": f"W{i}", "description": description})
    t0 = minute_floor(redis_now(client)) - timedelta(minutes=3) + timedelta(seconds=5)
    first = Engine(client=client).run(STORE_ONLY, now=t0)
    assert first.new_schedules == count
    now = t0 + timedelta(minutes=2)
    report = Engine(client=client).run(STORE_ONLY, now=now)
    jids = [job["jid"] for job in pushed_jobs(client)]
    assert len(jids) == len(set(jids)) == count * 2
    assert report.round_trips >= 3, "the due reads were cut short by bytes"
    client.close()


@pytest.fixture
def fresh_redis() -> Iterator[redis.Redis]:
    """A new redis-server of its own: its peak memory counts only this test's work."""
    with RedisServer() as server:
        client = connect(server.url)
        yield client
        client.close()


def peak_rise(client: redis.Redis, action: Any) -> int:
    """How far Redis's peak memory rose while `action()` ran, in bytes."""
    before = int(client.info("memory")["used_memory_peak"])
    action()
    return int(client.info("memory")["used_memory_peak"]) - before


def test_scripts_never_read_a_definition_swapped_for_an_oversized_one(
    fresh_redis: redis.Redis,
) -> None:
    """Between an invocation's read and its push, or over a stored value a writer
    replaces, a definition swapped for a 40 MB one is treated as changed (or replaced)
    without being read: Redis's peak memory does not rise by it; a manual run refuses it
    by its size."""
    client = fresh_redis
    store = Store(client)
    store.put("x", CONTROL)
    t0 = minute_floor(redis_now(client)) - timedelta(minutes=3) + timedelta(seconds=5)
    Engine(client=client).run(STORE_ONLY, now=t0)
    now = t0 + timedelta(minutes=2)
    batch = RedisSide(client).read_due(None, upto_ms=to_ms(now)).entries
    assert [d.name for d in batch] == ["x"] and isinstance(batch[0].definition, bytes)
    entries = [Entry(read_definition("x", batch[0].definition), batch[0].mark_ms,
                     definition_sha(batch[0].definition))]
    plan = plan_due(entries, now, 3600.0)
    client.hset(SCHEDULES, "x", b"y" * GARBAGE_BYTES)  # swapped between read and push
    report = Report(now=now)
    rise = peak_rise(client, lambda: push_plan(
        client, plan, STORE_ONLY, report, time.monotonic() + 30))
    assert (report.stale, report.pushed) == (1, 0)
    assert rise < GARBAGE_BYTES // 4, f"push.lua read the swapped definition ({rise:,} B)"

    with pytest.raises(ConfigError, match="over the limit of 65,536 bytes"):
        store.trigger("x")  # the operator's read asks the length first
    rise = peak_rise(client, lambda: store.put("x", CONTROL))  # a writer fixes it
    assert rise < GARBAGE_BYTES // 4, f"write.lua read the replaced definition ({rise:,} B)"
    assert json.loads(client.hget(SCHEDULES, "x") or b"") == CONTROL


def test_store_writers_refuse_a_definition_over_the_limit_and_readers_report_one_unread(
    redis_url: str,
) -> None:
    """`Store` add/put/update/import refuse a definition over the limit, naming it; a
    stored one (written by another language) is reported by get, status, missed,
    backfill and trigger as set aside for its size, without being read."""
    client = connect(redis_url)
    store = Store(client)
    big = {**CONTROL, "description": "d" * MAX_DEFINITION_BYTES}
    for write in (store.add, store.put):
        with pytest.raises(ConfigError, match="over the limit of 65,536 bytes"):
            write("big", big)
    store.put("big", CONTROL)
    with pytest.raises(ConfigError, match="over the limit of 65,536 bytes"):
        store.update("big", big)
    result = store.import_definitions([("other", big), ("fine", CONTROL)])
    assert [name for name, _ in result.invalid] == ["other"] and result.written == 1
    assert json.loads(client.hget(SCHEDULES, "big") or b"") == CONTROL
    assert not client.hexists(SCHEDULES, "other")

    client.hset(SCHEDULES, "big", b"y" * GARBAGE_BYTES)  # from another language
    sent_before = info_stat(client, "total_net_output_bytes")
    row = store.get("big")
    assert row is not None and row.oversized_bytes == GARBAGE_BYTES and row.definition is None
    assert row.set_aside and f"{GARBAGE_BYTES:,} bytes, over the limit" in row.set_aside
    assert {r.name for r in store.status(["big", "fine"]).schedules} == {"big", "fine"}
    client.hset("kiqbeat:missed", "big", "0 60000 window")
    assert store.backfill(["big"]).skipped[0][1].startswith(f"its definition is {GARBAGE_BYTES:,}")
    assert store.pause("big") is True  # a record of its own: the definition is not read
    assert info_stat(client, "total_net_output_bytes") - sent_before < 1024 * 1024
    assert store.remove("big") is True  # anyone may remove it: it belongs to no one
    client.close()


def test_an_invocation_planning_many_definitions_at_the_limit_stays_under_a_pods_memory(
    redis_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """1,500 valid definitions of almost 64 KiB each (98 MB), all due: `kiqbeat run-once`
    under 128 MiB plans every one (a batch, and the engine's cache of parsed definitions,
    are bounded in bytes) and exits 0."""
    client = connect(redis_url)
    count = 1500
    definition = json.dumps({**CONTROL, "description": "d" * (MAX_DEFINITION_BYTES - 100)})
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        pipe.hset(SCHEDULES, f"s{i}", definition)
        pipe.zadd(DUE, {f"s{i}": 0})
    pipe.execute()
    with memory_group(POD_LIMIT_BYTES) as group:
        done = run_limited(group, "run-once", redis_url=redis_url)
        peak_bytes = int((group / "memory.max_usage_in_bytes").read_text())
    with capsys.disabled():
        print(f"\nrun-once under {POD_LIMIT_BYTES >> 20} MiB planning {count:,} definitions of "
              f"{len(definition):,} bytes: peak {peak_bytes / 2**20:.1f} MiB (cgroup)")
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(marked_names(client)) == count  # every one planned (first seen)
    assert client.hlen(REJECTED) == 0
    client.close()
