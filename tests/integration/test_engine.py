"""The engine against a real redis-server: each due tick pushed once, per DESIGN §1–2."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta

import pytest
import redis
import time_machine

from kiqbeat.core.cron import fire_times
from kiqbeat.core.payload import jid
from kiqbeat.core.report import Report
from kiqbeat.demo.server import RedisServer
from kiqbeat.engine import run
from kiqbeat.errors import ConfigError, StateError
from kiqbeat.redis import keys, progress
from kiqbeat.store import Store
from tests.support.clock import minute_floor, redis_now, room_before_boundary
from tests.support.engine import config, marks, plan_stored, push_plan, pushed_jobs
from tests.support.marks import names_with_state, stored_mark
from tests.support.servers import compact_hash_encoding

EVERY_MINUTE = """
missed_jobs_window: 1h
schedules:
  report:
    cron: "* * * * *"
    class: ReportWorker
    args: [1, "two"]
"""


def start(client: redis.Redis) -> datetime:
    """A replay instant three hours before the Redis clock, on a minute boundary plus 5 s."""
    return minute_floor(redis_now(client)) - timedelta(hours=3) + timedelta(seconds=5)


def test_a_new_schedule_is_marked_and_not_backfilled(client: redis.Redis) -> None:
    cfg = config(EVERY_MINUTE)
    t0 = start(client)
    report = run(client, cfg, now=t0)
    assert (report.new_schedules, report.pushed) == (1, 0)
    assert marks(client, cfg) == {"report": round(t0.timestamp() * 1000)}
    assert pushed_jobs(client) == []


def test_each_minute_tick_is_pushed_once_with_its_jid(client: redis.Redis) -> None:
    cfg = config(EVERY_MINUTE)
    t0 = start(client)
    run(client, cfg, now=t0)
    for minutes in range(1, 6):
        report = run(client, cfg, now=t0 + timedelta(minutes=minutes))
        assert report.pushed == 1
        again = run(client, cfg, now=t0 + timedelta(minutes=minutes, seconds=30))
        assert (again.pushed, again.already_pushed) == (0, 0)
    jobs = pushed_jobs(client)
    expected = fire_times("* * * * *", after=t0, until=t0 + timedelta(minutes=5))
    assert [j["jid"] for j in jobs] == [jid("report", t) for t in expected]
    assert all(j["class"] == "ReportWorker" and j["args"] == [1, "two"] for j in jobs)
    assert all(j["queue"] == "default" for j in jobs)


def test_a_replayed_older_invocation_finds_its_ticks_already_pushed(client: redis.Redis) -> None:
    cfg = config(EVERY_MINUTE)
    t0 = start(client)
    run(client, cfg, now=t0)
    run(client, cfg, now=t0 + timedelta(minutes=10))
    late = run(client, cfg, now=t0 + timedelta(minutes=4))
    assert late.pushed == 0
    assert len(pushed_jobs(client)) == 10


def test_a_gap_shorter_than_the_window_is_caught_up(client: redis.Redis) -> None:
    cfg = config(EVERY_MINUTE)
    t0 = start(client)
    run(client, cfg, now=t0)
    report = run(client, cfg, now=t0 + timedelta(minutes=50))
    assert (report.pushed, report.missed) == (50, 0)
    assert report.lag_s == pytest.approx(49 * 60 + 5, abs=1)


def test_a_gap_longer_than_the_window_pushes_the_window_and_counts_the_rest(
    client: redis.Redis,
) -> None:
    cfg = config(EVERY_MINUTE)
    t0 = start(client)
    run(client, cfg, now=t0)
    report = run(client, cfg, now=t0 + timedelta(minutes=150))
    # Ticks t0+1m .. t0+150m (at :00 each); the window keeps the last 60 minutes' ticks.
    assert (report.pushed, report.missed) == (60, 90)
    again = run(client, cfg, now=t0 + timedelta(minutes=150, seconds=20))
    assert (again.pushed, again.missed) == (0, 0), "missed ticks are reported once"


@pytest.mark.parametrize(("policy", "pushed", "skipped"), [("latest", 1, 2), ("none", 0, 3)])
def test_catch_up_latest_and_none_skip_missed_ticks(
    client: redis.Redis, policy: str, pushed: int, skipped: int
) -> None:
    cfg = config(f"""
schedules:
  report:
    every: 10m
    class: ReportWorker
    catch_up: {policy}
""")
    now = redis_now(client) - timedelta(hours=3)
    base = now.replace(minute=now.minute - now.minute % 10, second=0, microsecond=0)
    run(client, cfg, now=base + timedelta(seconds=5))
    # Ticks at base+10m, +20m, +30m; the newest is 2 min old when the next invocation comes.
    report = run(client, cfg, now=base + timedelta(minutes=32, seconds=5))
    assert (report.pushed, report.skipped) == (pushed, skipped)
    on_time = run(client, cfg, now=base + timedelta(minutes=40, seconds=30))
    assert on_time.pushed == 1, "a tick from within the last minute is on time under every policy"


def test_a_disabled_schedule_is_not_backfilled_when_re_enabled(client: redis.Redis) -> None:
    cfg = config(EVERY_MINUTE)
    off = config(EVERY_MINUTE + "    enabled: false\n")
    t0 = start(client)
    run(client, cfg, now=t0)
    paused = run(client, off, now=t0 + timedelta(minutes=20))
    # No invocation ran for 20 minutes before the pause: its 20 ticks were owed then, and
    # the pause recorded them as missed (for a backfill), pushing none.
    assert (paused.pushed, paused.skipped) == (0, 0)
    (owed,) = Store(client).missed(["report"])
    assert (owed.reason, owed.ticks) == ("paused", 20)
    # Re-enabled by the document this invocation applies: its instant is the resume, so the
    # tick 5 s before it fell while paused and is not pushed; the next one is.
    assert run(client, cfg, now=t0 + timedelta(minutes=21)).pushed == 0
    assert run(client, cfg, now=t0 + timedelta(minutes=22)).pushed == 1
    expected = jid("report", t0 + timedelta(minutes=22, seconds=-5))
    assert [j["jid"] for j in pushed_jobs(client)] == [expected]


def test_a_removed_schedule_stops_and_others_go_on(client: redis.Redis) -> None:
    two = config(EVERY_MINUTE + '  other:\n    cron: "*/2 * * * *"\n    class: OtherWorker\n')
    one = config(EVERY_MINUTE)
    t0 = start(client)
    run(client, two, now=t0)
    run(client, one, now=t0 + timedelta(minutes=10))
    assert {j["class"] for j in pushed_jobs(client)} == {"ReportWorker"}


def test_a_changed_cron_takes_effect_without_repeating_a_tick(client: redis.Redis) -> None:
    """Hourly, then every 15 minutes from a document change that came after the next top of
    the hour had gone unpushed: that top is owed under the new cron (the mark stops just
    before it), the top already pushed is not repeated, and nothing earlier is backfilled."""
    text = EVERY_MINUTE.replace("missed_jobs_window: 1h", "missed_jobs_window: 4h")
    hourly = config(text.replace('"* * * * *"', '"0 * * * *"'))
    quarter = config(text.replace('"* * * * *"', '"*/15 * * * *"'))
    t0 = start(client)
    run(client, hourly, now=t0)
    top = t0.replace(minute=0, second=0) + timedelta(hours=1)
    run(client, hourly, now=top + timedelta(seconds=10))
    report = run(client, quarter)  # now, two hours later
    ticks = [j["jid"] for j in pushed_jobs(client)]
    owed = fire_times("*/15 * * * *", after=top + timedelta(minutes=59), until=report.now)
    assert ticks == [jid("report", t) for t in [top, *owed]]


def test_lookahead_puts_ticks_in_the_schedule_set_at_their_instant(client: redis.Redis) -> None:
    cfg = config("""
schedules:
  fast:
    cron: "*/10 * * * * *"
    class: FastWorker
    lookahead: 60s
""")
    t0 = start(client)
    first = run(client, cfg, now=t0)
    assert (first.new_schedules, first.pushed) == (1, 6), "a new schedule's first ticks too"
    assert run(client, cfg, now=t0 + timedelta(seconds=1)).pushed == 0
    scored = client.zrange("schedule", 0, -1, withscores=True)
    instants = fire_times("*/10 * * * * *", after=t0, until=t0 + timedelta(seconds=60))
    assert [score for _, score in scored] == [t.timestamp() for t in instants]
    assert all(json.loads(raw)["enqueued_at"] == score for raw, score in scored)
    again = run(client, cfg, now=t0 + timedelta(seconds=30))
    assert again.pushed == 3, "only ticks beyond the first lookahead horizon are new"


def test_now_later_than_the_redis_clock_is_refused(client: redis.Redis) -> None:
    with pytest.raises(ConfigError, match="later than the Redis clock"):
        run(client, config(EVERY_MINUTE), now=redis_now(client) + timedelta(minutes=5))


def test_a_garbled_watermark_sets_its_schedule_aside_naming_the_key(client: redis.Redis) -> None:
    """Once it failed the invocation for every schedule; now it costs only its own (issue
    26): set aside, the key named in the warning and in kiqbeat:rejected, nothing pushed."""
    cfg = config(EVERY_MINUTE)
    t0 = start(client)
    run(client, cfg, now=t0)
    bucket_key = keys.progress_bucket("", progress.bucket("report"))
    client.hset(bucket_key, "report", "yesterday")
    report = run(client, cfg, now=t0 + timedelta(minutes=5))
    assert report.set_aside == 1 and any(bucket_key in w for w in report.warnings)
    assert bucket_key.encode() in (client.hget("kiqbeat:rejected", "report") or b"")
    assert pushed_jobs(client) == []


@pytest.mark.parametrize("key", ["queue:default", "queues", "kiqbeat:watermarks", "schedule",
                                 keys.progress_bucket("", progress.bucket("report")),
                                 keys.progress_bucket("", progress.bucket("two"))])
def test_a_key_of_the_wrong_type_is_named_and_nothing_is_pushed(
    client: redis.Redis, redis_client: redis.Redis, key: str
) -> None:
    cfg = config(EVERY_MINUTE + '  two:\n    cron: "* * * * *"\n    class: Two\n    queue: other\n')
    t0 = start(client)
    run(client, cfg, now=t0)
    before = marks(client, cfg) if "kiqbeat:watermarks" not in key and (
        "kiqbeat:progress" not in key) else None
    client.delete(key)
    client.set(key, "not mine")
    with pytest.raises(StateError, match=key):
        run(client, cfg, now=t0 + timedelta(minutes=5))
    assert client.llen("queue:other") == 0
    if before is not None:
        assert marks(client, cfg) == before


def test_namespace_prefixes_every_key(client: redis.Redis) -> None:
    cfg = config('namespace: "exq:"\n' + EVERY_MINUTE)
    t0 = start(client)
    run(client, cfg, now=t0)
    run(client, cfg, now=t0 + timedelta(minutes=2))
    assert sorted(k.decode() for k in client.keys("*")) == [
        "exq:kiqbeat:document:test", "exq:kiqbeat:documents", "exq:kiqbeat:due",
        "exq:kiqbeat:name_ranges", "exq:kiqbeat:name_ranges:",
        f"exq:kiqbeat:progress:{progress.bucket('report')}",
        "exq:kiqbeat:schedules", "exq:kiqbeat:shards",
        "exq:queue:default", "exq:queues"]


def test_a_schedule_with_a_full_history_is_one_small_field_of_a_listpack_bucket(
    client: redis.Redis
) -> None:
    """progress.lua's promise: watermark, first-seen and the last 10 pushes live in one
    field of one bucket, small enough (under 64 bytes, hash-max-listpack-value) that Redis
    keeps the bucket a listpack, even with each push half an hour late (replayed minutes:
    delays of 18 to 30 minutes take the most bytes a late push's delay does, 4; live ones,
    seconds, take 2)."""
    cfg = config(EVERY_MINUTE)
    t0 = minute_floor(redis_now(client)) - timedelta(minutes=30) + timedelta(seconds=5)
    for minutes in range(12):
        run(client, cfg, now=t0 + timedelta(minutes=minutes))
    assert len(progress.read_histories(client, "", ["report"])["report"]) == 10
    bucket = keys.progress_bucket("", progress.bucket("report"))
    assert client.hlen(bucket) == 1
    assert client.hstrlen(bucket, "report") < 64
    assert client.object("encoding", bucket) == compact_hash_encoding(client)  # 6.2: ziplist
    assert client.keys("kiqbeat:watermarks*") == client.keys("kiqbeat:history*") == []


def test_schedules_sharing_a_cron_each_get_their_own_jobs(client: redis.Redis) -> None:
    body = "".join(f'  s{i}:\n    cron: "*/5 * * * *"\n    class: W{i}\n' for i in range(50))
    cfg = config("schedules:\n" + body)
    t0 = start(client)
    run(client, cfg, now=t0)
    report = run(client, cfg, now=t0 + timedelta(minutes=10))
    assert report.pushed == 100
    assert len({j["jid"] for j in pushed_jobs(client)}) == 100


def test_a_large_catch_up_is_split_into_chunks_without_loss(client: redis.Redis) -> None:
    cfg = config("""
missed_jobs_window: 3h
schedules:
  secondly:
    cron: "* * * * * *"
    class: SecondWorker
""")
    t0 = start(client)
    run(client, cfg, now=t0)
    report = run(client, cfg, now=t0 + timedelta(hours=2))
    assert report.pushed == 7200
    assert report.chunks >= 8
    assert report.round_trips == 1 + report.chunks
    jids = [j["jid"] for j in pushed_jobs(client)]
    assert jids == [jid("secondly", t0 + timedelta(seconds=s)) for s in range(1, 7201)]


def test_a_host_clock_ten_minutes_fast_pushes_nothing_early(client: redis.Redis) -> None:
    cfg = config(EVERY_MINUTE)
    room_before_boundary(client, 60, 10)  # no tick comes due between the two runs
    run(client, cfg)
    with time_machine.travel(datetime.now(UTC) + timedelta(minutes=10), tick=True):
        report = run(client, cfg)
    assert report.pushed == 0
    assert abs((report.now - redis_now(client)).total_seconds()) < 2


def test_wait_replicas_waits_for_a_replica_and_warns_without_one(
    client: redis.Redis, redis_server: RedisServer
) -> None:
    cfg = config("wait_replicas: 1\nwait_timeout: 0.2\n" + EVERY_MINUTE)
    t0 = start(client)
    run(client, cfg, now=t0)
    alone = run(client, cfg, now=t0 + timedelta(minutes=3))
    assert alone.pushed == 3 and alone.unreplicated == 3
    assert any("only 0 of 1 replicas acknowledged 3 pushed jobs" in w for w in alone.warnings)
    with RedisServer("--replicaof", "127.0.0.1", str(redis_server.port)) as replica:
        replica_client = redis.Redis(port=replica.port)
        try:
            while "online" not in str(client.info("replication").get("slave0", "")):
                time.sleep(0.05)
            patient = config("wait_replicas: 1\nwait_timeout: 5\n" + EVERY_MINUTE)
            backed = run(client, patient, now=t0 + timedelta(minutes=5))
            assert backed.pushed == 2 and backed.unreplicated == 0
            on_master = stored_mark(client, "report")
            assert on_master is not None and stored_mark(replica_client, "report") == on_master
        finally:
            replica_client.close()


def test_copies_racing_to_register_a_new_schedule_lose_no_tick(client: redis.Redis) -> None:
    # Copy B reads the clock 10 ms before a minute boundary and registers the schedule;
    # copy A read it 10 ms after, planned the schedule as new, and its script runs second.
    cfg = config(EVERY_MINUTE)
    boundary = minute_floor(redis_now(client)) - timedelta(hours=1)
    run(client, cfg, now=boundary - timedelta(milliseconds=10))
    late_plan = plan_stored(client, cfg, {"report": None},
                            boundary + timedelta(milliseconds=10))
    report = Report(now=boundary)
    push_plan(client, late_plan, cfg, report, deadline=time.monotonic() + 10)
    assert report.new_schedules == 0, "the second registration changes nothing"
    later = run(client, cfg, now=boundary + timedelta(seconds=30))
    assert [(j.schedule, j.tick) for j in later.jobs] == [("report", boundary)]


def test_a_now_even_slightly_past_the_redis_clock_is_refused(client: redis.Redis) -> None:
    with pytest.raises(ConfigError, match="later than the Redis clock"):
        run(client, config(EVERY_MINUTE), now=redis_now(client) + timedelta(seconds=2))


def test_an_error_after_earlier_chunks_says_what_was_pushed(client: redis.Redis) -> None:
    cfg = config("""
missed_jobs_window: 2h
schedules:
  a_fast: {cron: "* * * * * *", class: A, queue: first}
  b_slow: {cron: "* * * * *", class: B, queue: second}
""")
    t0 = start(client)
    run(client, cfg, now=t0)
    client.set("queue:second", "not a list")
    with pytest.raises(StateError, match=r"queue:second holds a string.*before this, "
                                         r"(\d+) jobs were pushed by \d+ earlier calls") as refused:
        run(client, cfg, now=t0 + timedelta(minutes=20))
    pushed = re.search(r"(\d+) jobs were pushed", str(refused.value))
    assert pushed and 0 < client.llen("queue:first") == int(pushed.group(1)) <= 1200


def test_a_schedule_removed_from_the_document_is_forgotten_at_once(
    client: redis.Redis,
) -> None:
    """DESIGN §7: removal forgets the state — definition, index entry, watermark, first-seen
    — so nothing of it stays behind; the document's other schedules keep theirs."""
    both = config(EVERY_MINUTE + '  gone:\n    cron: "* * * * *"\n    class: Gone\n')
    t0 = start(client)
    run(client, both, now=t0)
    report = run(client, config(EVERY_MINUTE), now=t0 + timedelta(minutes=2))
    assert report.pushed == 2 and {j.schedule for j in report.jobs} == {"report"}
    assert client.hkeys("kiqbeat:schedules") == [b"report"]
    assert names_with_state(client, "") == {"report"}
    assert client.zrange("kiqbeat:due", 0, -1) == [b"report"]


def redis_url_of(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"
