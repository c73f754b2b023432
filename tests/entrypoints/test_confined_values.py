"""One stored or given value costs only what it touches (issue 26): an instant in range as
written but out of range once converted, a life counter written by hand, and `overlap: skip`
kept by a backfill. The real commands, in this process, against a real Redis; the proofs
are the control schedule's distinct jids in its queue and the reasons in `kiqbeat:rejected`."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
import redis
from handler import app

from kiqbeat.core.instants import utc_instant
from kiqbeat.core.payload import jid
from kiqbeat.core.schedule import Config
from kiqbeat.core.varints import read_varint
from kiqbeat.engine import Engine
from kiqbeat.entrypoints.requests import from_event
from kiqbeat.errors import ConfigError
from kiqbeat.redis.connection import connect
from kiqbeat.redis.progress import bucket
from kiqbeat.store import Store
from tests.support.cli import Kiqbeat
from tests.support.clock import minute_floor, redis_now

STORE_ONLY = Config(schedules=())
CONTROL = {"class": "ControlWorker", "cron": "* * * * *", "queue": "control"}
# In range as written, out of range once converted to UTC (datetime's own limits).
OVERFLOWING = ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+14:00"]


def control_jids(client: redis.Redis) -> list[str]:
    return [json.loads(raw)["jid"] for raw in client.lrange("queue:control", 0, -1)]


def registered(redis_url: str, victim: dict[str, object]) -> tuple[redis.Redis, datetime]:
    """A client, and the instant three minutes back at which an invocation registered the
    stored `control` and `victim` (the latter with this definition)."""
    client = connect(redis_url)
    store = Store(client)
    store.put("control", CONTROL)
    store.put("victim", victim)
    t0 = minute_floor(redis_now(client)) - timedelta(minutes=3) + timedelta(seconds=5)
    Engine(client=client).run(STORE_ONLY, now=t0)
    return client, t0


@pytest.mark.parametrize("value", OVERFLOWING)
def test_the_one_reader_of_instants_refuses_an_overflowing_one_with_a_message(value: str) -> None:
    with pytest.raises(ConfigError, match="must be from 1970-01-01 to before 9999-01-01"):
        utc_instant(value)


@pytest.mark.parametrize("value", OVERFLOWING)
@pytest.mark.parametrize("field", ["start_at", "end_at", "at"])
def test_a_stored_instant_that_overflows_when_converted_costs_only_its_schedule(
    redis_url: str, kiqbeat: Kiqbeat, field: str, value: str,
) -> None:
    """The issue's reproduction: HSET the definition, ZADD it due, beside a control; the
    invocation pushes the control's every tick, sets the bad one aside naming the field, and
    status, list, get, export, history and missed answer."""
    client = connect(redis_url)
    Store(client).put("control", CONTROL)
    t0 = minute_floor(redis_now(client)) - timedelta(minutes=3) + timedelta(seconds=5)
    Engine(client=client).run(STORE_ONLY, now=t0)
    bad = {"class": "W", "cron": "* * * * *", field: value}
    if field == "at":
        bad.pop("cron")
    client.hset("kiqbeat:schedules", "bad", json.dumps(bad))
    client.zadd("kiqbeat:due", {"bad": 0})
    ran = kiqbeat("run-once", "--now", (t0 + timedelta(minutes=2)).isoformat())
    assert ran.code == 0, ran.err
    assert "Traceback" not in ran.err and "set aside" in ran.err
    expected = [jid("control", minute_floor(t0) + timedelta(minutes=m)) for m in (1, 2)]
    assert sorted(control_jids(client)) == sorted(expected)
    reason = (client.hget("kiqbeat:rejected", "bad") or b"").decode()
    assert field in reason and value in reason and "1970-01-01" in reason
    for args in (["status"], ["schedules", "list"], ["schedules", "list", "--json"],
                 ["schedules", "get", "bad"], ["schedules", "export"], ["history", "bad"],
                 ["missed"], ["next", "--store"], ["next", "bad"]):
        done = kiqbeat(*args)
        assert "Traceback" not in done.err, (args, done.err)
        assert done.code in (0, 1), (args, done.code, done.err)
    assert "bad" in kiqbeat("status").out
    client.close()


@pytest.mark.parametrize("value", OVERFLOWING)
def test_every_entry_point_answers_an_overflowing_instant_with_a_message(
    redis_url: str, kiqbeat: Kiqbeat, value: str,
) -> None:
    """CLI options, a definition written through the CLI, and a Lambda event's fields: a
    message naming the value, exit 1, never a traceback."""
    kiqbeat("schedules", "add", "c", "--json-definition", json.dumps(CONTROL))
    for args in (["schedules", "pause", "c", "--until", value],
                 ["backfill", "c", "--since", value], ["backfill", "c", "--until", value],
                 ["next", "--cron", "* * * * *", "--from", value],
                 ["run-once", "--now", value],
                 ["schedules", "add", "d", "--json-definition",
                  json.dumps({**CONTROL, "start_at": value})],
                 ["schedules", "add", "e", "--json-definition",
                  json.dumps({"class": "W", "at": value})]):
        done = kiqbeat(*args)
        assert done.code == 1, (args, done.out, done.err)
        assert "Traceback" not in done.err and value in done.err, (args, done.err)
    for key in ("since", "until"):  # a Lambda operator event (the handler's own reader)
        with pytest.raises(ConfigError, match=f"the event's \"{key}\" .*1970-01-01"):
            from_event({"kiqbeat": "backfill", "names": ["c"], key: value})
    # An EventBridge event's time that cannot be used is no time, not a failure.
    event = {"detail-type": "Scheduled Event", "id": "e", "time": value}
    assert app.trigger(event).scheduled_time is None


@pytest.mark.parametrize(("key", "value", "definition"), [
    ("kiqbeat:skips", b"1e308", {"class": "V", "cron": "* * * * *", "queue": "victim"}),
    ("kiqbeat:skips", b"abc", {"class": "V", "cron": "* * * * *", "queue": "victim"}),
    ("kiqbeat:runs", b"abc", {"class": "V", "cron": "* * * * *", "queue": "victim",
                              "max_runs": 50}),
    ("kiqbeat:runs", b"1e308", {"class": "V", "cron": "* * * * *", "queue": "victim",
                                "max_runs": 50}),
])
def test_a_life_counter_written_by_hand_sets_only_its_schedule_aside(
    redis_url: str, kiqbeat: Kiqbeat, key: str, value: bytes, definition: dict[str, object],
) -> None:
    """`HSET kiqbeat:skips victim 1e308` (or runs = abc for a schedule with max_runs) once
    failed every push call ("hash value is not an integer"): now the victim is set aside with
    the key and value named, and the control pushes each tick."""
    client, t0 = registered(redis_url, definition)
    client.hset(key, "victim", value)
    ran = kiqbeat("run-once", "--now", (t0 + timedelta(minutes=2)).isoformat())
    assert ran.code == 0, ran.err
    expected = [jid("control", minute_floor(t0) + timedelta(minutes=m)) for m in (1, 2)]
    assert sorted(control_jids(client)) == sorted(expected)
    assert client.llen("queue:victim") == 0
    reason = (client.hget("kiqbeat:rejected", "victim") or b"").decode()
    assert key in reason and value.decode() in reason
    assert "victim" in kiqbeat("status").out
    if key == "kiqbeat:runs":  # a backfill leaves it alone too, and says why
        client.hset("kiqbeat:missed", "victim", b"%d %d window" % (
            int(t0.timestamp() * 1000) - 180_000, int(t0.timestamp() * 1000)))
        done = kiqbeat("backfill", "victim", "--yes")
        assert "Traceback" not in done.err and key in done.out + done.err
        assert client.llen("queue:victim") == 0
    client.close()


def test_a_backfill_keeps_overlap_skip_one_job_at_a_time(
    redis_url: str, kiqbeat: Kiqbeat,
) -> None:
    """The issue's reproduction (an every-second `overlap: skip` schedule; two invocations a
    second apart; paused 4 s; resumed): `backfill --yes` pushed 5 jobs beside the waiting one.
    Now it pushes none while that job waits, then one a backfill, each once."""
    client = connect(redis_url)
    assert kiqbeat("schedules", "add", "o", "--json-definition", json.dumps(
        {"class": "W", "cron": "* * * * * *", "queue": "ovl", "overlap": "skip"})).code == 0
    t0 = redis_now(client).replace(microsecond=0) - timedelta(seconds=30)
    for at in (t0, t0 + timedelta(seconds=1), t0 + timedelta(seconds=2)):
        assert kiqbeat("run-once", "--now", at.isoformat()).code == 0
    paused_at = t0 + timedelta(seconds=2)
    # Paused for 4 s, as `schedules pause o` then `resume o` 4 s later record it:
    client.hset("kiqbeat:missed", "o", b"%d %d paused" % (
        int(paused_at.timestamp() * 1000), int(paused_at.timestamp() * 1000) + 4000))
    waiting = [json.loads(raw)["jid"] for raw in client.lrange("queue:ovl", 0, -1)]
    assert len(waiting) == 1
    done = kiqbeat("backfill", "o", "--yes")
    assert "overlap: skip" in done.out + done.err, done
    assert [json.loads(raw)["jid"] for raw in client.lrange("queue:ovl", 0, -1)] == waiting
    pushed: list[str] = []
    for _ in range(4):
        client.rpop("queue:ovl")  # a worker takes the waiting job
        assert kiqbeat("backfill", "o", "--yes").code == 0
        queued = [json.loads(raw)["jid"] for raw in client.lrange("queue:ovl", 0, -1)]
        assert len(queued) == 1
        pushed += queued
        kiqbeat("backfill", "o", "--yes")  # while it waits: nothing more
        assert client.llen("queue:ovl") == 1
    ticks = [paused_at + timedelta(seconds=s) for s in range(1, 5)]
    assert pushed == [jid("o", t) for t in ticks]  # oldest first, each once
    assert client.hget("kiqbeat:missed", "o") is None
    client.close()


def test_list_and_export_never_transfer_a_definition_over_the_limit(
    redis_url: str, kiqbeat: Kiqbeat,
) -> None:
    """Three 20 MB definitions written by HSET beside a healthy one: `schedules list`, `list
    --json` and `export` show them set aside for their size, unread; Redis sends each command
    far less than one of them (INFO's total_net_output_bytes, an independent count), and no
    HSCAN or HGETALL that could return values runs (COMMANDSTATS)."""
    client = connect(redis_url)
    Store(client).put("control", CONTROL)
    size = 20 * 1024 * 1024
    for k in range(3):
        client.hset("kiqbeat:schedules", f"huge{k}",
                    json.dumps({**CONTROL, "description": "d" * size}))
    client.config_resetstat()
    for args in (["schedules", "list"], ["schedules", "list", "--json"],
                 ["schedules", "export"], ["schedules", "export", "--jsonl"]):
        before = int(client.info("stats")["total_net_output_bytes"])
        done = kiqbeat(*args)
        sent = int(client.info("stats")["total_net_output_bytes"]) - before
        assert sent < 1024 * 1024, (args, sent)
        assert "Traceback" not in done.err
        text = done.out + done.err
        assert all(f"huge{k}" in text for k in range(3)), (args, text)
        assert "over the limit" in text and "control" in done.out
    commands = client.info("commandstats")
    assert "cmdstat_hgetall" not in commands
    hscan = commands.get("cmdstat_hscan", {"calls": 0})
    answered = hscan["calls"] - hscan.get("failed_calls", 0)
    try:  # names-only HSCANs (NOVALUES) where the server has them; HKEYS before that
        client.execute_command("HSCAN", "kiqbeat:schedules", 0, "COUNT", 1, "NOVALUES")
    except redis.ResponseError:
        assert answered == 0 and commands["cmdstat_hkeys"]["calls"] >= 4
    client.close()


def test_a_missed_record_or_history_past_the_year_9999_costs_only_its_schedule(
    redis_url: str, kiqbeat: Kiqbeat,
) -> None:
    """Numbers written by hand past the last instant kiqbeat plans once stopped `missed`,
    `status NAME` and every backfill with an OSError traceback (found by the fuzzer's long
    run): now the record is garbled, named, and the others are listed and backfilled."""
    client, t0 = registered(redis_url, CONTROL)
    t0_ms = int(t0.timestamp() * 1000)
    client.hset("kiqbeat:missed", "control", b"%d %d window" % (t0_ms - 120_000, t0_ms))
    client.hset("kiqbeat:missed", "victim", b"5 99999999999999999999 window")
    client.hset("kiqbeat:history", "victim", b"t 99999999999999999999 5")
    listed = kiqbeat("missed")
    assert "control" in listed.out and "victim" in listed.err and "garbled" in listed.err
    for args in (["status", "victim"], ["history", "victim"], ["missed", "victim"]):
        done = kiqbeat(*args)
        assert done.code in (0, 1) and "Traceback" not in done.err, (args, done.err)
    done = kiqbeat("backfill", "--all", "--yes")
    assert "victim" in done.out + done.err
    assert len(set(control_jids(client))) == 2
    client.close()


@pytest.mark.parametrize("record", [b"", b"\xff" * 30, b"garbage that is not a record"])
def test_a_garbled_progress_record_sets_only_its_schedule_aside(
    redis_url: str, kiqbeat: Kiqbeat, record: bytes,
) -> None:
    """A progress record written by hand once stopped every invocation ("watermark ... is
    not a number; nothing was pushed"; found by the fuzzer's long run): now its schedule is
    set aside naming the key, and the control pushes each tick."""
    client, t0 = registered(redis_url, {**CONTROL, "queue": "victim"})
    client.hset(f"kiqbeat:progress:{bucket('victim')}", "victim", record)
    ran = kiqbeat("run-once", "--now", (t0 + timedelta(minutes=2)).isoformat())
    assert ran.code == 0, ran.err
    expected = [jid("control", minute_floor(t0) + timedelta(minutes=m)) for m in (1, 2)]
    assert sorted(control_jids(client)) == sorted(expected)
    assert client.llen("queue:victim") == 0
    reason = (client.hget("kiqbeat:rejected", "victim") or b"").decode()
    assert f"kiqbeat:progress:{bucket('victim')}" in reason and "garbled" in reason
    client.close()


def test_a_run_now_refused_over_a_cut_history_names_the_record_not_the_watermark(
    redis_url: str, kiqbeat: Kiqbeat,
) -> None:
    """A run now (which adds to the history) of a schedule whose progress record holds a
    sound watermark but a history cut short is refused naming the record and its key (the
    refusal once said the watermark "is not a number", which sent the operator to the wrong
    field); nothing is pushed, and the record is left for the operator to fix or delete."""
    client, t0 = registered(redis_url, {**CONTROL, "queue": "victim"})
    Engine(client=client).run(STORE_ONLY, now=t0 + timedelta(minutes=2))  # a history
    key = f"kiqbeat:progress:{bucket('victim')}"
    record = client.hget(key, "victim")
    assert record is not None and len(record) > 8
    _, newest_at = read_varint(record, 6)  # past the watermark and first-seen
    _, count_at = read_varint(record, newest_at)
    _, entries_at = read_varint(record, count_at)
    cut = record[:entries_at + 1]  # the count of entries kept, their bytes cut
    client.hset(key, "victim", cut)
    queued = client.llen("queue:victim")
    refused = kiqbeat("trigger", "victim")
    assert refused.code != 0
    assert "progress record of schedule 'victim'" in refused.err and key in refused.err
    assert "not a number" not in refused.err and f"0x{cut.hex()}" in refused.err  # binary as hex
    assert client.hget(key, "victim") == cut and client.llen("queue:victim") == queued
    client.close()


def test_a_backfill_of_all_left_alone_by_a_cut_progress_record_says_so_and_exits_1(
    redis_url: str, kiqbeat: Kiqbeat,
) -> None:
    """`backfill --all` meeting a schedule whose progress record was cut by hand backfills
    the others, leaves that one alone with its ticks still recorded, and says so on stderr
    with exit 1 (a scripted backfill must not hide it: it once exited 0 with one line on
    stdout)."""
    client, t0 = registered(redis_url, {**CONTROL, "queue": "victim"})
    Engine(client=client).run(STORE_ONLY, now=t0 + timedelta(minutes=2))  # a history
    t0_ms = int(t0.timestamp() * 1000)
    for name in ("control", "victim"):
        client.hset("kiqbeat:missed", name, b"%d %d window" % (t0_ms - 180_000, t0_ms - 60_000))
    key = f"kiqbeat:progress:{bucket('victim')}"
    record = client.hget(key, "victim")
    assert record is not None
    cut = record[:6] + b"\x00\x00\x05"  # a history of 5 entries, none of them there
    client.hset(key, "victim", cut)
    queued, missed = client.lrange("queue:victim", 0, -1), client.hget("kiqbeat:missed", "victim")
    before = set(control_jids(client))
    done = kiqbeat("backfill", "--all", "--yes")
    assert done.code == 1, (done.out, done.err)
    assert "victim" in done.err and "progress record" in done.err and key in done.err
    assert set(control_jids(client)) - before == {
        jid("control", minute_floor(t0) - timedelta(minutes=m)) for m in (1, 2)}
    assert client.lrange("queue:victim", 0, -1) == queued
    assert client.hget("kiqbeat:missed", "victim") == missed and client.hget(key, "victim") == cut
    client.close()
