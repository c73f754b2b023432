"""`kiqbeat schedules ...`: the real command against a real Redis, read back from Redis itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from kiqbeat.entrypoints.schedules import _json_value, _plain_line
from kiqbeat.errors import ConfigError
from tests.support.cli import Kiqbeat, run_on_a_terminal
from tests.support.clock import advance_clock, redis_now
from tests.support.marks import stored_mark

ROOT = Path(__file__).resolve().parents[2]
DIGEST = {"cron": "0 9 * * *", "tz": "Asia/Kolkata", "class": "DigestWorker", "args": [42]}


def definitions(client: redis.Redis, namespace: str = "") -> dict[str, Any]:
    """The store's definitions, straight from its hash."""
    return {name: json.loads(data)
            for name, data in client.hgetall(f"{namespace}kiqbeat:schedules").items()}


def many(count: int) -> dict[str, dict[str, Any]]:
    """`count` distinct definitions using most fields a definition may hold."""
    zones = ("UTC", "Asia/Kolkata", "Europe/Paris", "America/New_York")
    out: dict[str, dict[str, Any]] = {}
    for i in range(count):
        if i % 5 == 0:
            definition: dict[str, Any] = {"every": f"{i % 50 + 1}m", "class": "PollWorker"}
        else:
            definition = {"cron": f"{i % 60} {i % 24} * * {i % 7}", "class": "ReportWorker",
                          "tz": zones[i % 4], "args": [i, f"customer-{i}", {"n": i}]}
        if i % 3 == 0:
            definition["queue"] = f"q{i % 4}"
        if i % 11 == 0:
            definition["enabled"] = False
        if i % 13 == 0:
            definition["catch_up"] = "latest"
        out[f"tenant:{i}:report"] = definition
    return out


def export_of(kiqbeat: Kiqbeat) -> dict[str, Any]:
    done = kiqbeat("schedules", "export", "--jsonl")
    assert done.code == 0, done.err
    rows = [json.loads(line) for line in done.out.splitlines()]
    assert len(rows) == len({r["name"] for r in rows})  # each schedule once
    return {r["name"]: r["definition"] for r in rows}


# ---------------------------------------------------------------------------- one at a time


def test_an_added_schedule_is_stored_and_shown_by_get_and_status(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    added = kiqbeat("schedules", "add", "digest:42", "--json-definition", json.dumps(DIGEST))
    assert added.code == 0, added.err
    assert definitions(redis_client) == {"digest:42": DIGEST}
    assert redis_client.zscore("kiqbeat:due", "digest:42") == 0  # "plan me"
    got = kiqbeat("schedules", "get", "digest:42", "--json").json()
    assert (got["definition"], got["source"], got["enabled"]) == (DIGEST, "", True)
    assert got["next_tick"].endswith("03:30:00+00:00")  # 09:00 in Kolkata
    status = kiqbeat("status", "--json").json()
    assert [row["name"] for row in status["schedules"]] == ["digest:42"]
    again = kiqbeat("schedules", "add", "digest:42", "--json-definition", json.dumps(DIGEST))
    assert again.code == 1 and "'digest:42' exists; update or put it instead" in again.err


def test_put_and_update_from_a_yaml_file(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "digest.yaml"
    path.write_text("cron: '0 9 * * *'\ntz: Asia/Kolkata\nclass: DigestWorker\nargs: [42]\n")
    missing = kiqbeat("schedules", "update", "digest", "--file", str(path))
    assert missing.code == 1 and "no schedule 'digest' in the store" in missing.err
    assert kiqbeat("schedules", "put", "digest", "--file", str(path), "--json").json()[
        "changed"] is True
    assert kiqbeat("schedules", "put", "digest", "--file", str(path), "--json").json()[
        "changed"] is False
    path.write_text("cron: '0 10 * * *'\nclass: DigestWorker\n")
    assert kiqbeat("schedules", "update", "digest", "--file", str(path)).code == 0
    assert definitions(redis_client) == {"digest": {"cron": "0 10 * * *", "class": "DigestWorker"}}


def test_a_put_says_whether_it_added_the_schedule_or_replaced_one_as_the_api_answers_201_or_200(
    kiqbeat: Kiqbeat,
) -> None:
    """One dispatch: the CLI's put, the Lambda's and the console's read the owner once and
    say the same thing (a typo in a name adds a schedule: the answer shows it)."""
    def put(definition: dict[str, object], *flags: str) -> Any:
        return kiqbeat("schedules", "put", "digest", "--json-definition",
                       json.dumps(definition), *flags)

    added, replaced, same = put(DIGEST), put({**DIGEST, "args": [7]}), put(
        {**DIGEST, "args": [7]}, "--json")
    assert added.out == "added 'digest'; the next invocation plans it\n"
    assert replaced.out == "replaced 'digest'; the next invocation plans it\n"
    assert same.json() == {"name": "digest", "action": "put", "changed": False,
                           "created": False}
    assert put(DIGEST, "--json").json()["created"] is False
    assert kiqbeat("schedules", "remove", "digest").code == 0
    assert put(DIGEST, "--json").json() == {"name": "digest", "action": "put",
                                            "changed": True, "created": True}


def test_a_bad_cron_is_refused_with_the_message_and_exit_code_a_document_gets(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path
) -> None:
    bad = {"cron": "61 9 * * *", "class": "DigestWorker", "queue": "default"}
    path = tmp_path / "schedule.yaml"
    path.write_text(yaml.safe_dump({"schedules": {"digest": bad}}))
    validated = kiqbeat("validate", str(path))
    added = kiqbeat("schedules", "add", "digest", "--json-definition", json.dumps(bad))
    assert added.code == validated.code != 0
    problem = validated.err.removeprefix(f"kiqbeat: {path}: ")
    assert problem != validated.err and "minute field '61'" in problem
    assert added.err == f"kiqbeat: {problem}"
    assert definitions(redis_client) == {}  # nothing written
    not_json = kiqbeat("schedules", "add", "digest", "--json-definition", "{cron: '* * * * *'}")
    assert not_json.code == 1
    assert "--json-definition: invalid JSON at line 1, column 2" in not_json.err


def test_a_definition_over_the_size_limit_is_refused_up_front_naming_the_limit(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """`add/put --file` and `import` refuse a definition whose stored form is over 64 KiB
    (an invocation would set it aside unread), saying so; nothing of it is written."""
    big = {**DIGEST, "description": "d" * 70_000}
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(big))
    for action in ("add", "put"):
        done = kiqbeat("schedules", action, "big", "--file", str(path))
        assert done.code == 1, done.err
        assert "schedule 'big': its definition is 70,0" in done.err
        assert "over the limit of 65,536 bytes" in done.err
    lines = tmp_path / "table.jsonl"
    lines.write_text(json.dumps({"name": "big", "definition": big}) + "\n"
                     + json.dumps({"name": "small", "definition": DIGEST}) + "\n")
    imported = kiqbeat("schedules", "import", str(lines), "--json")
    assert imported.code == 1
    assert [i["name"] for i in imported.json()["invalid"]] == ["big"]
    assert "over the limit of 65,536 bytes" in imported.json()["invalid"][0]["why"]
    document = tmp_path / "schedules.yaml"
    document.write_text(yaml.safe_dump({"schedules": {"big": big, "small": DIGEST}}))
    refused = kiqbeat("schedules", "import", str(document))
    assert refused.code == 1 and "over the limit of 65,536 bytes" in refused.err
    assert list(definitions(redis_client)) == ["small"]


def test_pause_and_resume_leave_the_definition_alone(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    kiqbeat("schedules", "add", "digest", "--json-definition", json.dumps(DIGEST))
    paused = kiqbeat("schedules", "pause", "digest", "--json").json()
    assert paused == {"name": "digest", "action": "pause", "changed": True}
    assert definitions(redis_client)["digest"] == DIGEST
    assert kiqbeat("schedules", "get", "digest", "--json").json()["enabled"] is False
    assert "'digest' was paused already" in kiqbeat("schedules", "pause", "digest").out
    assert kiqbeat("schedules", "resume", "digest").code == 0
    assert definitions(redis_client)["digest"] == DIGEST
    assert kiqbeat("schedules", "get", "digest", "--json").json()["enabled"] is True
    unknown = kiqbeat("schedules", "pause", "nothing")
    assert unknown.code == 1 and "no schedule 'nothing' in the store" in unknown.err


def test_skip_adds_pending_skips_to_a_stored_schedule_and_refuses_a_bad_count(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    kiqbeat("schedules", "add", "digest", "--json-definition", json.dumps(DIGEST))
    skipped = kiqbeat("schedules", "skip", "digest", "--count", "3", "--json").json()
    assert skipped == {"name": "digest", "action": "skip", "changed": True, "pending": 3}
    assert "next 4 tick(s) will be skipped" in kiqbeat("schedules", "skip", "digest").out
    assert redis_client.hget("kiqbeat:skips", "digest") == "4"
    zero = kiqbeat("schedules", "skip", "digest", "--count", "0")
    assert zero.code == 1 and "--count" in zero.err and "Traceback" not in zero.err
    unknown = kiqbeat("schedules", "skip", "nothing")
    assert unknown.code == 1 and "no schedule 'nothing' in the store" in unknown.err
    assert redis_client.hget("kiqbeat:skips", "nothing") is None
    kiqbeat("schedules", "remove", "digest")
    assert redis_client.hget("kiqbeat:skips", "digest") is None


def test_remove_forgets_the_watermark_and_first_seen(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    kiqbeat("schedules", "add", "pulse", "--json-definition",
            json.dumps({"cron": "* * * * *", "class": "PulseWorker"}))
    assert kiqbeat("run-once").code == 0
    assert redis_client.hexists("kiqbeat:schedules", "pulse")
    assert stored_mark(redis_client, "pulse") is not None
    removed = kiqbeat("schedules", "remove", "pulse")
    assert removed.code == 0 and "removed 'pulse'" in removed.out
    assert not redis_client.hexists("kiqbeat:schedules", "pulse")
    assert stored_mark(redis_client, "pulse") is None
    assert redis_client.zscore("kiqbeat:due", "pulse") is None
    again = kiqbeat("schedules", "remove", "pulse", "--json")
    assert again.code == 0 and again.json()["changed"] is False
    assert kiqbeat("schedules", "get", "pulse").code == 1


def test_a_documents_schedule_may_be_paused_but_not_changed_or_removed(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "schedule.yaml"
    path.write_text("schedules:\n  nightly: {cron: '0 2 * * *', class: NightlyWorker}\n")
    assert kiqbeat("run-once", "--config", str(path)).code == 0  # applies the document
    changed = kiqbeat("schedules", "put", "nightly", "--json-definition", json.dumps(DIGEST))
    assert changed.code == 1 and f"'nightly' belongs to {path}" in changed.err
    assert kiqbeat("schedules", "remove", "nightly").code == 1
    assert kiqbeat("schedules", "pause", "nightly").code == 0
    assert kiqbeat("schedules", "get", "nightly", "--json").json()["enabled"] is False
    assert redis_client.hexists("kiqbeat:paused", "nightly")
    assert kiqbeat("schedules", "get", "nightly", "--json").json()["source"] == str(path)


def test_list_pages_through_every_schedule(kiqbeat: Kiqbeat, tmp_path: Path) -> None:
    path = tmp_path / "some.jsonl"
    path.write_text("".join(json.dumps({"name": n, "definition": d}) + "\n"
                            for n, d in many(250).items()))
    assert kiqbeat("schedules", "import", str(path)).code == 0
    seen: list[str] = []
    cursor = "0"
    while True:
        page = kiqbeat("schedules", "list", "--cursor", cursor, "--count", "40", "--json").json()
        seen += [row["name"] for row in page["schedules"]]
        if page["cursor"] == 0:
            break
        cursor = str(page["cursor"])
    assert sorted(set(seen)) == sorted(many(250))


def test_every_command_writes_under_the_namespace_it_is_given(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    done = kiqbeat("schedules", "add", "digest", "--namespace", "exq:",
                   "--json-definition", json.dumps(DIGEST))
    assert done.code == 0, done.err
    assert definitions(redis_client, "exq:") == {"digest": DIGEST}
    assert definitions(redis_client) == {}
    assert kiqbeat("schedules", "get", "digest").code == 1
    assert kiqbeat("schedules", "get", "digest", "--namespace", "exq:").code == 0
    assert kiqbeat("schedules", "export").out == "schedules: {}\ntime_zone: UTC\n"  # empty
    assert json.loads(kiqbeat("schedules", "export", "--json").out) == {"schedules": {},
                                                                       "time_zone": "UTC"}


def test_a_sharded_store_indexes_each_name_in_its_shard(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    for name in ("a", "b", "c", "d", "e"):
        done = kiqbeat("schedules", "add", name, "--shard", "0/4",
                       "--json-definition", json.dumps(DIGEST))
        assert done.code == 0, done.err
        assert redis_client.zscore(f"kiqbeat:due:{zlib.crc32(name.encode()) % 4}/4", name) == 0
    assert not redis_client.exists("kiqbeat:due")


# ---------------------------------------------------------------------------- invocations


def test_run_once_pushes_the_schedules_the_command_added(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    kiqbeat("schedules", "add", "tick", "--json-definition",
            json.dumps({"cron": "* * * * *", "class": "TickWorker", "args": [7]}))
    started = redis_now(redis_client) - timedelta(minutes=10)
    first = kiqbeat("run-once", "--now", started.isoformat(), "--json")
    assert first.code == 0, first.err
    assert first.json()["new_schedules"] == 1 and first.json()["pushed"] == 0
    second = kiqbeat("run-once", "--json")
    assert second.code == 0, second.err
    now = datetime.fromisoformat(second.json()["now"])
    # Every minute in (started, now], counted from the two instants, not from the report.
    ticks = int(now.timestamp() // 60) - int(started.timestamp() // 60)
    jobs = [json.loads(raw) for raw in redis_client.lrange("queue:default", 0, -1)]
    assert len({j["jid"] for j in jobs}) == len(jobs) == ticks >= 10
    assert {j["class"] for j in jobs} == {"TickWorker"}
    assert all(j["args"] == [7] for j in jobs)


# ---------------------------------------------------------------------------- in bulk


def test_five_thousand_json_lines_import_then_export_unchanged(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path
) -> None:
    table = many(5000)
    path = tmp_path / "schedules.jsonl"
    path.write_text("".join(json.dumps({"name": n, "definition": d}) + "\n"
                            for n, d in table.items()))
    done = kiqbeat("schedules", "import", str(path), "--json")
    assert done.code == 0, done.err
    assert done.json() == {"file": str(path), "written": 5000, "unchanged": 0, "kept": 0,
                           "invalid": [], "refused": []}
    assert definitions(redis_client) == table
    assert redis_client.zcard("kiqbeat:due") == 5000
    assert export_of(kiqbeat) == table
    again = kiqbeat("schedules", "import", str(path), "--json").json()
    assert (again["written"], again["unchanged"]) == (0, 5000)


def test_five_thousand_in_a_yaml_document_import_then_export_as_yaml_round_trips(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path
) -> None:
    table = many(5000)
    path = tmp_path / "schedules.yaml"
    path.write_text(yaml.dump({"schedules": table}, Dumper=yaml.CSafeDumper))
    done = kiqbeat("schedules", "import", str(path))
    assert done.code == 0, done.err
    assert done.out.startswith(f"{path}: 5,000 written, 0 unchanged, 0 invalid, 0 refused")
    assert definitions(redis_client) == table
    exported = kiqbeat("schedules", "export")
    assert yaml.load(exported.out, Loader=yaml.CSafeLoader) == {"schedules": table,
                                                                "time_zone": "UTC"}
    back = tmp_path / "exported.yaml"
    back.write_text(exported.out)
    again = kiqbeat("schedules", "import", str(back), "--json").json()  # read as validate reads
    assert (again["written"], again["unchanged"]) == (0, 5000)
    as_json = kiqbeat("schedules", "export", "--json")
    assert json.loads(as_json.out) == {"schedules": table, "time_zone": "UTC"}


def test_export_keeps_the_documents_zone_for_a_schedule_added_later(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "schedules.yaml"
    path.write_text("time_zone: America/New_York\nschedules:\n"
                    "  a: {cron: '0 9 * * *', class: A}\n"
                    "  b: {cron: '0 17 * * 1-5', class: B}\n"
                    "  c: {cron: '0 8 * * * Europe/Paris', class: C}\n")
    assert kiqbeat("schedules", "import", str(path)).code == 0
    exported = kiqbeat("schedules", "export")
    assert exported.code == 0, exported.err
    document = yaml.safe_load(exported.out)
    assert document["time_zone"] == "America/New_York"
    assert json.loads(kiqbeat("schedules", "export", "--json").out)["time_zone"] == \
        "America/New_York"
    # A schedule added to the exported file runs in New York, as the others do.
    document["schedules"]["d"] = {"cron": "0 9 * * *", "class": "D"}
    back = tmp_path / "exported.yaml"
    back.write_text(yaml.safe_dump(document))
    again = kiqbeat("schedules", "import", str(back), "--json").json()
    assert (again["written"], again["unchanged"]) == (1, 3)
    assert definitions(redis_client)["d"]["tz"] == "America/New_York"
    # A definition that runs in UTC without saying so keeps the export in UTC.
    kiqbeat("schedules", "add", "e", "--json-definition", '{"cron": "0 9 * * *", "class": "E"}')
    assert yaml.safe_load(kiqbeat("schedules", "export").out)["time_zone"] == "UTC"


def test_a_sidekiq_cron_file_imports_converted(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "schedule.yml"
    path.write_text("- name: hourly\n  cron: '0 * * * *'\n  klass: HourlyWorker\n"
                    "  args: '[1, 2]'\n  status: disabled\n")
    done = kiqbeat("schedules", "import", str(path))
    assert done.code == 0, done.err
    assert "read as a sidekiq-cron file" in done.err
    assert definitions(redis_client) == {
        "hourly": {"cron": "0 * * * *", "class": "HourlyWorker", "args": [1, 2],
                   "enabled": False}}


def test_a_sidekiq_cron_file_imports_in_the_app_zone_given_with_its_dst_nights_warned(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "schedule.yml"
    path.write_text("early: {cron: '30 2 * * *', class: EarlyJob, queue: default}\n")
    done = kiqbeat("schedules", "import", str(path), "--app-zone", "America/New_York")
    assert done.code == 0, done.err
    assert definitions(redis_client)["early"]["tz"] == "America/New_York"
    assert "schedule 'early': daylight saving: on " in done.err
    assert "add dst: fugit to the schedule" in done.err


def test_a_document_with_a_problem_imports_nothing_and_lists_every_problem(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "schedules.yaml"
    path.write_text("schedules:\n  a: {cron: '61 * * * *', class: A}\n"
                    "  b: {cron: '* * * * *', class: B, quue: x}\n"
                    "  c: {cron: '* * * * *', class: C}\n")
    done = kiqbeat("schedules", "import", str(path))
    assert done.code == 1
    assert "minute field '61'" in done.err and "did you mean 'queue'" in done.err
    assert definitions(redis_client) == {}


def test_an_import_lists_bad_lines_and_refusals_and_writes_the_rest(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path
) -> None:
    document = tmp_path / "schedule.yaml"
    document.write_text("schedules:\n  nightly: {cron: '0 2 * * *', class: NightlyWorker}\n")
    assert kiqbeat("run-once", "--config", str(document)).code == 0
    good = {"cron": "*/5 * * * *", "class": "GoodWorker"}
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([
        json.dumps({"name": "good", "definition": good}),
        "",
        json.dumps({"name": "bad", "definition": {"cron": "61 * * * *", "class": "B"}}),
        "{not json",
        json.dumps({"name": "good", "definition": {**good, "args": [1]}}),
        json.dumps({"definition": good}),
        json.dumps({"name": "nightly", "definition": good}),
        json.dumps({"name": "dup", "definition": good, "name ": 1})[:-1] + ', "name": "x"}',
    ]) + "\n")
    done = kiqbeat("schedules", "import", str(path), "--json")
    assert done.code == 1 and "schedules not imported" in done.err
    result = done.json()
    assert result["written"] == 1
    whys = [row["why"] for row in result["invalid"]]
    assert any(w.startswith("schedule 'bad' (field 'cron'):") for w in whys), whys
    assert "line 4: invalid JSON at line 1, column 2" in whys[0]
    assert any(w.startswith("line 5: schedule 'good' is on an earlier line") for w in whys)
    assert any(w.startswith('line 6: expected an object {"name"') for w in whys)
    assert any(w.startswith("line 8: duplicate key 'name'") for w in whys), whys
    assert len(whys) == 5
    assert result["refused"] == [{"name": "nightly", "why": f"belongs to {document}"}]
    stored = definitions(redis_client)
    assert stored["good"] == good and "bad" not in stored
    assert stored["nightly"]["class"] == "NightlyWorker"  # the document's, untouched


def test_json_lines_outside_printable_ascii_are_read_as_the_document_reader_reads_them(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # A line of printable ASCII (tab and line ends allowed) skips the document decoder's
    # checks; any other goes through them: DEL and other control characters refused with
    # their messages, a byte-order mark dropped, UTF-8 read.
    definition = b'"definition": {"cron": "* * * * *", "class": "W"}}'
    path = tmp_path / "bytes.jsonl"
    path.write_bytes(b"".join([
        b'{"name": "del\x7f", ' + definition + b"\n",
        b'{"name": "soh\x01", ' + definition + b"\n",
        b'\xef\xbb\xbf{"name": "bom", ' + definition + b"\n",
        '{"name": "caf\u00e9", '.encode() + definition + b"\n",
        b'{"name":\t"tab", ' + definition + b"\r\n",
        b'{"name": "latin1\xe9", ' + definition + b"\n",
    ]))
    result = kiqbeat("schedules", "import", str(path), "--jsonl", "--json").json()
    whys = [row["why"] for row in result["invalid"]]
    assert whys[0] == ("line 1: line 1, column 14: the character U+007F is not allowed "
                       "(control characters, lone surrogates and the like are not text)")
    assert whys[1].startswith("line 2: invalid JSON at line 1, column 14: Invalid control")
    assert whys[2].startswith("line 6: not UTF-8 text") and len(whys) == 3, whys
    assert set(definitions(redis_client)) == {"bom", "caf\u00e9", "tab"}


def test_no_replace_keeps_what_exists(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path
) -> None:
    kiqbeat("schedules", "add", "digest", "--json-definition", json.dumps(DIGEST))
    path = tmp_path / "new.jsonl"
    path.write_text(json.dumps({"name": "digest", "definition": {**DIGEST, "args": [1]}}) + "\n"
                    + json.dumps({"name": "other", "definition": DIGEST}) + "\n")
    done = kiqbeat("schedules", "import", str(path), "--no-replace")
    assert done.code == 0, done.err
    assert "1 written, 0 unchanged, 1 kept" in done.out
    assert definitions(redis_client) == {"digest": DIGEST, "other": DIGEST}


@pytest.mark.parametrize("size", [(24, 100), (0, 0)], ids=["sized", "unsized"])
def test_import_draws_a_bar_on_a_terminal_unless_told_not_to(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, size: tuple[int, int]
) -> None:
    path = tmp_path / "schedules.jsonl"
    path.write_text("".join(json.dumps({"name": n, "definition": d}) + "\n"
                            for n, d in many(5000).items()))
    env = {k: v for k, v in os.environ.items() if "REDIS" not in k and "KIQBEAT" not in k}
    env |= {"KIQBEAT_REDIS_URL": redis_url}
    command = [sys.executable, "-m", "kiqbeat", "schedules", "import", str(path)]
    code, out, terminal = run_on_a_terminal([*command, "--no-progress"], env, size)
    assert code == 0, terminal
    assert out.startswith(f"{path}: 5,000 written")
    assert terminal == ""  # forced off: nothing on the terminal at all
    assert redis_client.hlen("kiqbeat:schedules") == 5000
    redis_client.flushall()
    code, out, terminal = run_on_a_terminal(command, env, size)
    assert code == 0, terminal
    assert "5000/5000" in terminal and "schedules/s" in terminal
    assert redis_client.hlen("kiqbeat:schedules") == 5000


def test_import_without_tqdm_installed_imports_without_a_bar(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # As in the container image, which installs the function's pinned requirements only.
    path = tmp_path / "schedules.jsonl"
    path.write_text("".join(json.dumps({"name": n, "definition": d}) + "\n"
                            for n, d in many(100).items()))
    env = {k: v for k, v in os.environ.items() if "REDIS" not in k and "KIQBEAT" not in k}
    env |= {"KIQBEAT_REDIS_URL": redis_url}
    code = ("import sys; sys.modules['tqdm'] = None  # `import tqdm` raises ImportError\n"
            "from kiqbeat.entrypoints.cli import main\n"
            f"sys.exit(main(['schedules', 'import', {str(path)!r}]))\n")
    status, out, terminal = run_on_a_terminal([sys.executable, "-c", code], env, (24, 100))
    assert status == 0, terminal
    assert out.startswith(f"{path}: 100 written") and terminal == ""
    assert redis_client.hlen("kiqbeat:schedules") == 100


def test_the_engine_the_handler_and_other_commands_never_load_tqdm(redis_url: str) -> None:
    code = (
        "import sys\n"
        "def loaded(): return sorted(m for m in sys.modules if m.partition('.')[0] == 'tqdm')\n"
        "import kiqbeat.engine, handler.app\n"
        "from kiqbeat.entrypoints.cli import main\n"
        "assert main(['schedules', 'list', '--json']) == 0\n"
        "print('before', loaded())\n"
        "import tqdm\n"
        "print('after', bool(loaded()))\n"
    )
    env = {k: v for k, v in os.environ.items() if "REDIS" not in k and "KIQBEAT" not in k}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=env | {"KIQBEAT_REDIS_URL": redis_url}, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-2:] == ["before []", "after True"]  # the check can see tqdm when it is there


def test_definitions_and_imports_read_from_stdin(redis_url: str,
                                                 redis_client: redis.Redis) -> None:
    env = {k: v for k, v in os.environ.items() if "REDIS" not in k and "KIQBEAT" not in k}
    env |= {"KIQBEAT_REDIS_URL": redis_url}

    def kiqbeat(*args: str, given: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kiqbeat", *args], input=given,
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)

    done = kiqbeat("schedules", "add", "digest", "--file", "-", given=yaml.safe_dump(DIGEST))
    assert done.returncode == 0, done.stderr
    lines = json.dumps({"name": "other", "definition": DIGEST}) + "\n"
    done = kiqbeat("schedules", "import", "-", "--jsonl", given=lines)
    assert done.returncode == 0, done.stderr
    done = kiqbeat("schedules", "import", "-", given="schedules:\n  third: {every: 1h, class: T}\n")
    assert done.returncode == 0, done.stderr
    assert definitions(redis_client) == {"digest": DIGEST, "other": DIGEST,
                                         "third": {"every": "1h", "class": "T"}}


def test_pause_with_a_note_and_an_end_is_shown_by_get_and_status_and_a_past_end_refused(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    kiqbeat("schedules", "add", "digest", "--json-definition", json.dumps(DIGEST))
    until = (redis_now(redis_client) + timedelta(hours=1)).replace(microsecond=0)
    past = kiqbeat("schedules", "pause", "digest", "--until", "2020-01-01T00:00:00Z")
    assert past.code == 1 and "not in the future" in past.err
    paused = kiqbeat("schedules", "pause", "digest", "--note", "INC-9: mailer down",
                     "--until", until.isoformat(), "--actor", "alice")
    assert paused.code == 0 and until.isoformat(timespec="seconds") in paused.out
    got = kiqbeat("schedules", "get", "digest", "--json").json()
    assert got["enabled"] is False and got["paused"]["by"] == "alice"
    assert got["paused"]["note"] == "INC-9: mailer down"
    assert "paused by alice" in kiqbeat("schedules", "get", "digest").out
    assert "INC-9: mailer down" in kiqbeat("status").out
    assert definitions(redis_client)["digest"] == DIGEST  # the definition is untouched


def test_status_lists_ended_schedules_and_get_says_ended(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    at = (redis_now(redis_client) + timedelta(seconds=2)).replace(microsecond=0)
    kiqbeat("schedules", "add", "once", "--json-definition",
            json.dumps({"at": at.isoformat(), "class": "OnceWorker"}))
    assert kiqbeat("run-once").code == 0
    advance_clock(redis_client, 3)
    assert kiqbeat("run-once").code == 0
    assert "ended: 1 schedule(s) past their end push nothing more: once" in kiqbeat(
        "status").out
    status = kiqbeat("status", "--json").json()
    assert status["ended"] == {"count": 1, "names": [{"name": "once"}]}
    assert "ended" in kiqbeat("schedules", "get", "once").out


JSON_LINES = [
    b'{"name": "a", "definition": {"cron": "* * * * *", "class": "W"}}\n',
    b'{"name": "a", "name": "b"}', b'{":name": "a"}', b'{"a": {":b": 1}}',
    b'{"\\u003aname": "a"}', b'{"a": 1, "\\u003Ab": 2}', b'{"a": ":x"}',
    b'{"a": {"b": 1, "b": 2}}', b'{"1": 1, ":a": 2}', b'{"0": 1, "": 2}',
    b'\xef\xbb\xbf{"name": "bom"}', b'{"bad": "\x01"}', b'{"nul": "\\u0000"}', b"\xff{}",
    '{"é": "\u2028"}'.encode(), b"{not json", b"[1, 2]", b"{}", b'  {"a": 1}  ', b'{"a": NaN}',
    b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}", b'{"a": 1' + b"0" * 5000 + b"}",
    '{"a": "x"}'.encode("utf-16"), b'{"a": 1}{"b": 2}', b'{"a": .5}', b"{a: 1}",
]


@pytest.mark.parametrize("line", JSON_LINES, ids=range(len(JSON_LINES)))
def test_an_import_line_is_read_as_the_full_json_reader_reads_it(line: bytes) -> None:
    def read(reader: Any) -> object:
        try:
            return ("value", reader(line, "line 1"))
        except ConfigError as exc:
            return ("error", exc.problems, exc.source)

    assert read(_plain_line) == read(_json_value)


def test_get_status_and_json_show_a_schedules_life_and_ended_once_max_runs_is_used(
    kiqbeat: Kiqbeat, redis_client: redis.Redis
) -> None:
    minute = redis_now(redis_client).replace(second=0, microsecond=0) - timedelta(minutes=10)
    kiqbeat("schedules", "add", "limited", "--json-definition", json.dumps({
        "cron": "* * * * *", "class": "LimitedWorker", "max_runs": 2, "jitter": "20s",
        "overlap": "skip", "start_at": "2020-01-01T00:00:00Z",
        "end_at": "2099-01-01T00:00:00Z", "except": ["2099-12-25"]}))
    kiqbeat("schedules", "add", "skipping", "--json-definition",
            json.dumps({"cron": "* * * * *", "class": "SkippingWorker"}))
    assert kiqbeat("schedules", "skip", "skipping", "--count", "2").code == 0
    got = kiqbeat("schedules", "get", "limited", "--json").json()
    assert got["life"] | {"rules": ""} == {
        "start_at": "2020-01-01T00:00:00Z", "end_at": "2099-01-01T00:00:00Z",
        "except": [], "calendars": [], "dates_zone": None, "max_runs": 2, "runs": 0,
        "skips": 0, "jitter_s": 20.0, "overlap": "skip", "rules": "",
        "expect_success_within_s": None, "alert_after_failures": None,
        "pause_after_failures": None} | {
        "except": ["2099-12-25"], "dates_zone": "UTC"}
    assert got["ended"] is False
    assert "0 of 2 runs used" in kiqbeat("schedules", "get", "limited").out
    assert "2 ticks to skip" in kiqbeat("schedules", "get", "skipping").out
    # The first invocation meets it; the next two push its two runs (the second job is not
    # held back by overlap: the first one is removed as if a worker took it).
    for step in (0, 1, 2, 3):
        now = (minute + timedelta(minutes=step)).isoformat()
        assert kiqbeat("run-once", "--now", now).code == 0
        redis_client.delete("queue:default", "schedule")
    assert redis_client.hget("kiqbeat:runs", "limited") == "2"
    got = kiqbeat("schedules", "get", "limited", "--json").json()
    assert (got["life"]["runs"], got["ended"]) == (2, True)
    shown = kiqbeat("schedules", "get", "limited").out
    assert "(ended)" in shown and "2 of 2 runs used" in shown
    assert "2 of 2 runs used" in kiqbeat("status", "limited").out
    assert kiqbeat("schedules", "get", "skipping", "--json").json()["life"]["skips"] == 0


def test_calendar_commands_set_get_list_and_refuse_removing_one_in_use(
        kiqbeat: Kiqbeat, redis_client: redis.Redis) -> None:
    done = kiqbeat("schedules", "calendar", "set", "holidays", "2030-12-25", "2030-01-01")
    assert done.code == 0, done.err
    assert json.loads(redis_client.hget("kiqbeat:calendars", "holidays") or "") == [
        "2030-01-01", "2030-12-25"]
    bad = kiqbeat("schedules", "calendar", "set", "holidays", "2030-13-01")
    assert bad.code == 1 and "calendar 'holidays': '2030-13-01' is not a date" in bad.err
    added = kiqbeat("schedules", "add", "daily", "--json-definition",
                    json.dumps({**DIGEST, "except": ["holidays"]}))
    assert added.code == 0, added.err
    assert definitions(redis_client)["daily"]["calendars"] == {
        "holidays": ["2030-01-01", "2030-12-25"]}
    changed = kiqbeat("schedules", "calendar", "set", "holidays", "2031-01-01", "--json").json()
    assert (changed["rewritten"], changed["unchanged"]) == (1, 0)
    assert definitions(redis_client)["daily"]["calendars"] == {"holidays": ["2031-01-01"]}
    assert kiqbeat("schedules", "calendar", "get", "holidays").out == "holidays: 2031-01-01\n"
    assert kiqbeat("schedules", "calendar", "list", "--json").json() == {
        "calendars": {"holidays": ["2031-01-01"]}}
    refused = kiqbeat("schedules", "calendar", "remove", "holidays")
    assert refused.code == 1 and "named in 'except' by 1 schedule(s): 'daily'" in refused.err
    assert kiqbeat("schedules", "remove", "daily").code == 0
    removed = kiqbeat("schedules", "calendar", "remove", "holidays", "--json").json()
    assert removed == {"calendar": "holidays", "removed": True}
    unknown = kiqbeat("schedules", "add", "x", "--json-definition",
                      json.dumps({**DIGEST, "except": ["holidays"]}))
    assert unknown.code == 1
    assert "no calendar 'holidays' (the store's calendars: none;" in unknown.err
