"""A schedule's life through the engine and the push script, racing invokers on a real Redis:
start_at, end_at, except and at are applied by the timetable; max_runs, jitter, overlap and
pending skips by the push step (tests/support/life.py `fates` is the reference) — so no tick
outside them is ever pushed, none twice, none early."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiqbeat.core.instants import ENDED_MS
from kiqbeat.core.lifecycle import jitter_offset_ms
from kiqbeat.core.limits import MAX_PENDING_SKIPS
from kiqbeat.core.payload import jid, jid_ms
from kiqbeat.core.plan import Group, to_ms
from kiqbeat.core.schedule import Config
from kiqbeat.engine import run
from kiqbeat.errors import ConfigError
from kiqbeat.redis import keys, progress
from kiqbeat.store import Store
from tests.support.engine import config, push_call, pushed_jobs, race
from tests.support.life import Ledger
from tests.support.marks import stored_mark, write_marks

T0 = datetime(2025, 12, 24, 0, 0, tzinfo=UTC)
LIFE = """
schedules:
  bounded:
    cron: "0 * * * *"
    class: A
    start_at: "2025-12-24T05:00:00Z"
    end_at: "2025-12-26T20:00:00Z"
    except: ['2025-12-25']
  once:
    at: "2025-12-24T17:00:00Z"
    class: B
"""


def test_racing_invokers_push_only_the_ticks_within_the_bounds_and_off_the_excluded_dates(
        redis_url: str) -> None:
    race(redis_url, config(LIFE), [T0 + timedelta(minutes=20 * k)
                                   for k in range(3 * 72 + 1)])  # three days
    client = redis.Redis.from_url(redis_url)
    jobs = pushed_jobs(client)
    # Written out by hand: 05:00-23:00 on the 24th, nothing on the 25th, 00:00-20:00 on the 26th.
    hours = ([T0 + timedelta(hours=h) for h in range(5, 24)]
             + [T0 + timedelta(days=2, hours=h) for h in range(21)])
    expected = {jid("bounded", t) for t in hours} | {jid("once", T0 + timedelta(hours=17))}
    assert len(jobs) == len({j["jid"] for j in jobs})  # none twice
    assert {j["jid"] for j in jobs} == expected
    assert client.hget("kiqbeat:missed", "bounded") is None  # excluded is not missed
    # Both ended: their index entries are scored where nothing is ever due.
    assert {n.decode(): s for n, s in client.zrange("kiqbeat:due", 0, -1, withscores=True)
            } == {"bounded": 253_402_300_799_999, "once": 253_402_300_799_999}
    client.close()


def index_score(client: redis.Redis, name: str) -> float | None:
    return client.zscore("kiqbeat:due", name)


LIMITED = """
schedules:
  limited:
    every: 10m
    class: A
    max_runs: 5
"""


def test_racing_invokers_push_at_most_max_runs_ticks_then_the_schedule_ends(
        redis_url: str, client: redis.Redis) -> None:
    instants = [T0 + timedelta(minutes=3 * k) for k in range(60)]  # three hours
    race(redis_url, config(LIMITED), instants)
    jobs = pushed_jobs(client)
    ticks = [T0 + timedelta(minutes=10 * k) for k in range(1, 6)]  # first-seen is T0
    assert sorted(j["jid"] for j in jobs) == sorted(jid("limited", t) for t in ticks)
    assert index_score(client, "limited") == ENDED_MS
    assert client.hget(keys.runs(""), "limited") == b"5"
    assert client.hget("kiqbeat:missed", "limited") is None  # ended is not missed


def test_raising_max_runs_keeps_the_count_and_removing_the_schedule_forgets_it(
        client: redis.Redis) -> None:
    run(client, config(LIMITED), now=T0)
    run(client, config(LIMITED), now=T0 + timedelta(hours=2))  # catches up 5 of 12
    assert len(pushed_jobs(client)) == 5
    raised = LIMITED.replace("max_runs: 5", "max_runs: 7")
    for k in range(1, 7):
        run(client, config(raised), now=T0 + timedelta(hours=2, minutes=10 * k))
    assert len({j["jid"] for j in pushed_jobs(client)}) == 7
    assert client.hget(keys.runs(""), "limited") == b"7"
    assert index_score(client, "limited") == ENDED_MS
    store = Store(client)
    store.remove("limited", force=True)
    assert client.hget(keys.runs(""), "limited") is None


def test_a_backfill_counts_as_runs_and_stops_at_max_runs(client: redis.Redis) -> None:
    text = LIMITED.replace("class: A", "class: A\n    catch_up: latest")
    run(client, config(text), now=T0)
    run(client, config(text), now=T0 + timedelta(hours=1, minutes=1))  # 6 due: 1 pushed
    assert len(pushed_jobs(client)) == 1
    result = Store(client).backfill(["limited"])
    assert result.pushed == 4  # five runs in all, though five ticks were recorded
    jobs = pushed_jobs(client)
    assert len({j["jid"] for j in jobs}) == len(jobs) == 5
    assert client.hget(keys.runs(""), "limited") == b"5"
    assert client.hget("kiqbeat:missed", "limited") is None
    run(client, config(text), now=T0 + timedelta(hours=2))
    assert len(pushed_jobs(client)) == 5
    assert index_score(client, "limited") == ENDED_MS


JITTERED = """
schedules:
  spread:
    every: 1h
    class: A
    jitter: 50m
"""


def test_a_jittered_tick_waits_in_the_schedule_set_until_its_offset_with_the_ticks_jid(
        client: redis.Redis) -> None:
    cfg = config(JITTERED.replace("class: A", "class: A\n    include_metadata: true"))
    run(client, cfg, now=T0)
    released_before_now = in_set = 0
    for hour in range(1, 25):
        tick = T0 + timedelta(hours=hour)
        now = tick + timedelta(minutes=20)
        run(client, cfg, now=now)
        offset = jitter_offset_ms("spread", to_ms(tick), 50 * 60_000)
        job_id = jid("spread", tick)
        score = client.zscore("schedule", next(
            (raw for raw in client.zrange("schedule", 0, -1) if job_id in raw.decode()), b"-"))
        queued = [json.loads(r) for r in client.lrange("queue:default", 0, -1)]
        if to_ms(tick) + offset > to_ms(now):
            assert score == (to_ms(tick) + offset) / 1000  # never released before it
            job = json.loads(next(r for r in client.zrange("schedule", 0, -1)
                                  if job_id in r.decode()))
            assert job["enqueued_at"] == (to_ms(tick) + offset) / 1000
            in_set += 1
        else:  # its offset instant has passed: straight into the queue
            assert score is None
            job = next(j for j in queued if j["jid"] == job_id)
            released_before_now += 1
        assert job["args"][-1] == {"scheduled_at": tick.timestamp()}
        found = stored_mark(client, "spread")
        assert found is not None and found.mark_ms == to_ms(tick)
    assert in_set and released_before_now  # both ways taken over a day of offsets
    jobs = pushed_jobs(client)
    assert len(jobs) == len({j["jid"] for j in jobs}) == 24


def test_jitter_with_lookahead_places_each_tick_at_its_offset_ahead(client: redis.Redis) -> None:
    cfg = config(JITTERED.replace("every: 1h", "every: 10m").replace("jitter: 50m", "jitter: 9m")
                 .replace("class: A", "class: A\n    lookahead: 30m"))
    run(client, cfg, now=T0)
    scores = {json.loads(raw)["jid"]: score
              for raw, score in client.zrange("schedule", 0, -1, withscores=True)}
    ticks = [T0 + timedelta(minutes=m) for m in (10, 20, 30)]
    assert scores == {jid("spread", t): (to_ms(t) + jitter_offset_ms(
        "spread", to_ms(t), 9 * 60_000)) / 1000 for t in ticks}


DEFINITION = b'{"every":"1m","class":"W"}'
SHA = hashlib.sha1(DEFINITION).hexdigest()
MINUTE = 60_000
FUZZ = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@given(st.integers(1, 6), st.integers(0, 2),
       st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=10))
@FUZZ
def test_the_push_script_follows_the_ledger_and_never_exceeds_max_runs_in_any_interleaving(
        client: redis.Redis, max_runs: int, skips: int, offers: list[tuple[int, int]]) -> None:
    # Each racing invocation planned some span of ticks from whatever mark it read; the
    # push steps run one at a time in Redis, in any order: the script does what the
    # reference model (Ledger) does.
    client.flushall()
    client.hset(keys.definitions(""), "r", DEFINITION)
    write_marks(client, "", {"r": progress.Mark(0, None)})
    if skips:
        client.hset(keys.skips(""), "r", skips)
    ledger = Ledger(skips=skips)
    for lo, hi in offers:
        offered = [t * MINUTE for t in range(min(lo, hi) + 1, max(lo, hi) + 1)]
        ledger, _ = ledger.step(offered, max_runs=max_runs)
        if not offered:
            continue
        # Planned from the first mark (0): never above the stored one, so always applied.
        group = Group("r", offered[-1], stored_ms=0, sha=SHA, queue="q", max_runs=max_runs)
        for tick in offered:
            group.add(tick, 0, json.dumps({"jid": jid_ms("r", tick)}).encode())
        push_call(client, "", keys.due(""), 10**13, [group], 10)
    queued = [json.loads(raw)["jid"] for raw in client.lrange(keys.queue("", "q"), 0, -1)]
    assert len(queued) == len(set(queued)) <= max_runs
    assert int(client.hget(keys.runs(""), "r") or 0) == ledger.runs == len(queued)
    assert int(client.hget(keys.skips(""), "r") or 0) == ledger.skips
    found = stored_mark(client, "r")
    assert (found.mark_ms if found else 0) == ledger.watermark_ms


OVERLAPPING = """
schedules:
  slow:
    every: 1m
    class: A
    overlap: skip
"""


def queued_jids(client: redis.Redis) -> list[str]:
    return [json.loads(raw)["jid"] for raw in client.lrange("queue:default", 0, -1)]


def test_overlap_skip_pushes_no_tick_while_the_previous_job_waits_or_runs(
        client: redis.Redis) -> None:
    cfg = config(OVERLAPPING)
    minute = [T0 + timedelta(minutes=m) for m in range(8)]
    run(client, cfg, now=minute[0])
    run(client, cfg, now=minute[1])
    assert queued_jids(client) == [jid("slow", minute[1])]
    run(client, cfg, now=minute[2])  # minute 1's job still waits in its queue
    assert queued_jids(client) == [jid("slow", minute[1])]
    client.rpop("queue:default")  # a worker takes it, and runs it:
    client.set(keys.running("", "slow"), jid("slow", minute[1]), px=60_000)
    run(client, cfg, now=minute[3])
    assert queued_jids(client) == []
    client.delete(keys.running("", "slow"))  # done
    run(client, cfg, now=minute[4])
    assert queued_jids(client) == [jid("slow", minute[4])]
    # Minutes 2 and 3 are recorded as missed for overlap, one range.
    store = Store(client)
    assert [(r.after, r.through, r.reason) for r in store.missed()] == [
        (minute[1], minute[3], "overlap")]
    assert store.backfill(["slow"]).pushed == 0  # not backfilled unless asked
    # A backfill keeps the promise too (issue 26): nothing while minute 4's job waits, then
    # one job a backfill, the oldest first; the rest stays recorded meanwhile.
    assert store.backfill(["slow"], reasons=["overlap"]).pushed == 0
    assert queued_jids(client) == [jid("slow", minute[4])]
    for owed in minute[2:4]:
        client.rpop("queue:default")  # a worker takes the waiting job
        assert store.backfill(["slow"], reasons=["overlap"]).pushed == 1
        assert store.backfill(["slow"], reasons=["overlap"]).pushed == 0  # it waits now
        assert queued_jids(client) == [jid("slow", owed)]
    assert store.missed() == []


def test_overlap_skip_finds_a_jittered_job_still_in_the_schedule_set(client: redis.Redis) -> None:
    cfg = config(OVERLAPPING.replace("overlap: skip", "overlap: skip\n    jitter: 59s"))
    run(client, cfg, now=T0)
    first = next(m for m in range(1, 60)
                 if jitter_offset_ms("slow", to_ms(T0 + timedelta(minutes=m)), 59_000) > 2_000)
    tick = T0 + timedelta(minutes=first)
    run(client, cfg, now=tick + timedelta(seconds=1))  # released later: in the schedule set
    assert client.zcard("schedule") == 1
    run(client, cfg, now=tick + timedelta(minutes=1, seconds=1))
    assert client.zcard("schedule") == 1 and client.llen("queue:default") == 0
    assert [r.reason for r in Store(client).missed()] == ["overlap"]


def test_racing_invokers_push_one_overlap_skip_job_while_no_worker_takes_it(
        redis_url: str, client: redis.Redis) -> None:
    instants = [T0 + timedelta(seconds=20 * k) for k in range(60)]  # twenty minutes
    race(redis_url, config(OVERLAPPING), instants)
    assert queued_jids(client) == [jid("slow", T0 + timedelta(minutes=1))]
    ranges = Store(client).missed()
    assert [(r.after, r.through, r.reason, r.ticks) for r in ranges] == [
        (T0 + timedelta(minutes=1), instants[-1] - timedelta(seconds=40), "overlap", 18)]


def test_skipped_ticks_are_not_pushed_not_counted_as_runs_and_shown_as_skipped_in_history(
        client: redis.Redis) -> None:
    cfg = config(LIMITED.replace("max_runs: 5", "max_runs: 2"))
    run(client, cfg, now=T0)
    store = Store(client)
    assert store.skip("limited", 2) == 2
    ticks = [T0 + timedelta(minutes=10 * k) for k in range(1, 6)]
    for tick in ticks:
        run(client, cfg, now=tick)
    assert sorted(j["jid"] for j in pushed_jobs(client)) == sorted(
        jid("limited", t) for t in ticks[2:4])  # two skipped, then two runs, then ended
    assert client.hget(keys.skips(""), "limited") is None  # all used
    assert [(p.kind, p.tick) for p in store.history("limited")] == [
        ("tick", ticks[3]), ("tick", ticks[2]), ("skipped", ticks[1]), ("skipped", ticks[0])]
    assert store.missed() == []


def test_racing_invokers_use_each_pending_skip_once(redis_url: str, client: redis.Redis) -> None:
    text = LIMITED.replace("    max_runs: 5\n", "")
    run(client, config(text), now=T0)
    Store(client).skip("limited", 3)
    race(redis_url, config(text), [T0 + timedelta(minutes=5 * k) for k in range(1, 13)])
    ticks = [T0 + timedelta(minutes=10 * k) for k in range(1, 7)]
    assert sorted(j["jid"] for j in pushed_jobs(client)) == sorted(
        jid("limited", t) for t in ticks[3:])


def test_a_skip_past_the_cap_is_refused_naming_the_skips_the_script_found_pending(
        client: redis.Redis) -> None:
    run(client, config(LIMITED), now=T0)
    store = Store(client)
    assert store.skip("limited", MAX_PENDING_SKIPS) == MAX_PENDING_SKIPS
    with pytest.raises(ConfigError, match=f"has {MAX_PENDING_SKIPS:,} skips pending; 1 more"):
        store.skip("limited", 1)
    # A count written by hand that is no whole number (Lua would read some as numbers, and
    # HINCRBY refuses them without a name): refused naming the schedule's field, as the push
    # step sets it aside, and kept as it is.
    for written in ("1e9", "inf", "nan", "5.5", "0x10"):
        client.hset(keys.skips(""), "limited", written)
        with pytest.raises(ConfigError, match=(
                f"schedule 'limited': kiqbeat:skips holds '{written}' for it, not a whole "
                "number of ticks to skip")):
            store.skip("limited", 1)
        assert client.hget(keys.skips(""), "limited") == written.encode()  # nothing written


# ---------------------------------------------------------------------------- store calendars

NO_DOCUMENT = Config(())
DAILY_EXCEPT = {"cron": "0 9 * * *", "class": "DailyWorker", "except": ["holidays"]}


def _next_nine(after: datetime) -> datetime:
    nine = after.replace(hour=9, minute=0, second=0, microsecond=0)
    return nine if nine > after else nine + timedelta(days=1)


def test_a_store_calendar_excludes_its_dates_for_an_api_schedule_and_changing_it_changes_the_pushes(
        redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    store = Store(client)
    now = T0  # invocations replayed from here (a schedule written later is first seen then)
    first = _next_nine(now + timedelta(minutes=5))
    second, third = first + timedelta(days=1), first + timedelta(days=2)
    store.put_calendar("holidays", [first.date().isoformat()])
    store.put("daily", DAILY_EXCEPT)
    stored = json.loads(client.hget("kiqbeat:schedules", "daily") or b"")
    assert stored["calendars"] == {"holidays": [first.date().isoformat()]}  # written in
    run(client, NO_DOCUMENT, now=now)  # registers it
    run(client, NO_DOCUMENT, now=first + timedelta(minutes=1))
    assert pushed_jobs(client) == []  # its first tick is on a holiday
    assert client.hget("kiqbeat:missed", "daily") is None  # and not recorded as missed
    # The calendar now names the second day instead: the next invocation follows it.
    change = store.put_calendar("holidays", [second.date().isoformat()])
    assert (change.rewritten, change.not_rewritten) == (1, [])
    run(client, NO_DOCUMENT, now=second + timedelta(minutes=1))
    run(client, NO_DOCUMENT, now=third + timedelta(minutes=1))
    assert {j["jid"] for j in pushed_jobs(client)} == {jid("daily", third)}
    # Set again with the same dates: nothing left to rewrite (an interrupted change resumes).
    assert store.put_calendar("holidays", [second.date().isoformat()]).rewritten == 0
    client.close()


def test_a_store_calendar_in_use_is_not_removed_and_documents_keep_their_own(
        redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    store = Store(client)
    store.put_calendar("holidays", ["2030-12-25"])
    for i in range(12):
        store.put(f"tenant:{i}", DAILY_EXCEPT)
    document = config("calendars: {holidays: ['2030-01-01']}\nschedules:\n"
                      "  nightly: {cron: '0 9 * * *', class: N, except: [holidays]}\n")
    run(client, document, now=T0)
    before = client.hget("kiqbeat:schedules", "nightly")
    assert store.put_calendar("holidays", ["2030-12-25", "2030-12-26"]).rewritten == 12
    assert client.hget("kiqbeat:schedules", "nightly") == before  # the document's own
    with pytest.raises(ConfigError, match=r"calendar 'holidays' is named in 'except' by 12 "
                                          r"schedule\(s\): 'tenant:\d+'.* and 2 more"):
        store.remove_calendar("holidays")
    assert client.hexists("kiqbeat:calendars", "holidays")
    for i in range(12):
        store.remove(f"tenant:{i}")
    assert store.remove_calendar("holidays") is True
    assert store.calendars() == {}
    store.put_calendar("holidays", [])
    with pytest.raises(ConfigError, match=r"no calendar 'holiday'; did you mean 'holidays'\?"
                                          r" \(the store's calendars: holidays;"):
        store.put("x", {**DAILY_EXCEPT, "except": ["holiday"]})
    client.close()
