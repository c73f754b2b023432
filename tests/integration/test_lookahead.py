"""`lookahead` against a real redis-server: a new schedule's first ticks go out on time.

A schedule's first invocation registers it (first-seen = that invocation's `now`) and, with
`lookahead`, pushes its ticks in (now, now + lookahead] into the `schedule` set at once:
without that its first ticks waited for the next trigger, up to a trigger period late. The
invocations are replays (`now=` hours before the Redis clock), never wall-clock sleeps.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import redis

from kiqbeat.core.payload import jid
from kiqbeat.core.plan import MAX_JOBS_PER_CALL, to_ms
from kiqbeat.core.report import Report
from kiqbeat.engine import run
from kiqbeat.redis.connection import connect
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import config, marks, plan_stored, push_plan
from tests.support.marks import stored_mark

FAST = """
schedules:
  fast:
    cron: "*/10 * * * * *"
    class: FastWorker
    lookahead: 60s
"""


def every_ten_s(after: datetime, until: datetime) -> list[datetime]:
    """The instants in (after, until] of `*/10 * * * * *`, by arithmetic, not by the cron code."""
    first = (int(after.timestamp()) // 10 + 1) * 10
    return [datetime.fromtimestamp(s, tz=UTC)
            for s in range(first, int(until.timestamp()) + 1, 10)]


def start(client: redis.Redis) -> datetime:
    """A replay instant three hours before the Redis clock, 5.25 s past a minute boundary."""
    return minute_floor(redis_now(client)) - timedelta(hours=3) + timedelta(seconds=5.25)


def scheduled(client: redis.Redis) -> list[tuple[dict[str, object], float]]:
    """Every job in the `schedule` set with its score, decoded, by score."""
    return [(json.loads(raw), score)
            for raw, score in client.zrange("schedule", 0, -1, withscores=True)]


def jids(jobs: list[tuple[dict[str, object], float]]) -> list[object]:
    return [job["jid"] for job, _ in jobs]


def first_seen_ms(client: redis.Redis, name: str) -> int:
    mark = stored_mark(client, name)
    assert mark is not None and mark.first_seen_ms is not None
    return mark.first_seen_ms


@pytest.mark.parametrize("offset", [timedelta(0), timedelta(seconds=4.75)],
                         ids=["between ticks", "on a tick"])
def test_a_new_lookahead_schedule_pushes_its_near_ticks_on_its_first_invocation(
    client: redis.Redis, offset: timedelta,
) -> None:
    cfg = config(FAST)
    t0 = start(client) + offset
    report = run(client, cfg, now=t0)

    expected = every_ten_s(t0, t0 + timedelta(seconds=60))
    assert len(expected) == 6
    assert (report.new_schedules, report.pushed) == (1, 6)
    assert first_seen_ms(client, "fast") == to_ms(t0)
    jobs = scheduled(client)
    # Exactly the ticks strictly after first-seen, scored at their instants, each with its jid.
    assert [score for _, score in jobs] == [t.timestamp() for t in expected]
    assert jids(jobs) == [jid("fast", t) for t in expected]
    assert all(score > t0.timestamp() for _, score in jobs)  # none before first-seen
    assert jid("fast", t0) not in jids(jobs)  # on a tick: that tick is first-seen itself
    assert all(job["enqueued_at"] == score for job, score in jobs)
    assert client.keys("queue:*") == []  # nothing straight into a queue: all in the future
    assert marks(client, cfg) == {"fast": to_ms(expected[-1])}


def test_later_invocations_continue_after_the_first_lookahead_without_repeats(
    client: redis.Redis,
) -> None:
    cfg = config(FAST)
    t0 = start(client)
    pushed = [run(client, cfg, now=t0 + timedelta(seconds=s)).pushed for s in (0, 1, 30, 75)]
    assert pushed == [6, 0, 3, 5]
    expected = every_ten_s(t0, t0 + timedelta(seconds=135))
    assert sorted(jids(scheduled(client))) == sorted(jid("fast", t) for t in expected)


@pytest.mark.parametrize("winner_first", [True, False],
                         ids=["earlier copy registers", "later copy registers"])
def test_copies_racing_to_register_a_lookahead_schedule_push_each_tick_once(
    client: redis.Redis, winner_first: bool,
) -> None:
    # Both copies read no watermark and plan the schedule as new, 25 s apart; one script runs
    # first and registers it, the other then finds its watermark and must change nothing.
    cfg = config(FAST)
    early = start(client)
    late = early + timedelta(seconds=25)
    plans = {t: plan_stored(client, cfg, {"fast": None}, t) for t in (early, late)}
    assert all(len(p.groups[0].jobs) == 6 for p in plans.values())
    winner, loser = (early, late) if winner_first else (late, early)

    reports = []
    for at in (winner, loser):
        report = Report(now=at)
        push_plan(client, plans[at], cfg, report, deadline=time.monotonic() + 10)
        reports.append(report)
    assert (reports[0].new_schedules, reports[0].pushed) == (1, 6)
    assert (reports[1].new_schedules, reports[1].pushed) == (0, 0), "the loser changes nothing"
    assert first_seen_ms(client, "fast") == to_ms(winner)
    winners = every_ten_s(winner, winner + timedelta(seconds=60))
    assert marks(client, cfg) == {"fast": to_ms(winners[-1])}
    assert set(jids(scheduled(client))) == {jid("fast", t) for t in winners}

    # The next invocations fill in the rest: every tick after first-seen, each once.
    end = late + timedelta(seconds=40)
    run(client, cfg, now=end)
    counts = Counter(jids(scheduled(client)))
    counts.update(json.loads(raw)["jid"] for raw in client.lrange("queue:default", 0, -1))
    expected = every_ten_s(winner, end + timedelta(seconds=60))
    assert set(counts) == {jid("fast", t) for t in expected}
    assert max(counts.values()) == 1


def test_many_copies_registering_at_once_push_each_tick_once(redis_url: str) -> None:
    # Eight threads, each its own client, invoke at instants 1 ms apart with nothing stored.
    cfg = config(FAST)
    setup = connect(redis_url)
    t0 = start(setup)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def invoke(k: int) -> None:
        own = connect(redis_url)
        try:
            barrier.wait()
            run(own, cfg, now=t0 + timedelta(milliseconds=k))
        except BaseException as exc:  # reported below, with the thread's failure
            errors.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=invoke, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    seen = datetime.fromtimestamp(first_seen_ms(setup, "fast") / 1000, tz=t0.tzinfo)
    counts = Counter(jids(scheduled(setup)))
    assert set(counts) == {jid("fast", t) for t in every_ten_s(seen, seen + timedelta(seconds=60))}
    assert max(counts.values()) == 1
    setup.close()


def test_a_new_schedule_with_more_ticks_ahead_than_one_call_holds_gets_them_all_once(
    client: redis.Redis,
) -> None:
    cfg = config("""
missed_jobs_window: 2h
schedules:
  second: {every: 1s, class: SecondWorker, lookahead: 1h}
""")
    t0 = start(client)
    first = run(client, cfg, now=t0)
    assert (first.pushed, first.chunks) == (MAX_JOBS_PER_CALL, 1)
    second = run(client, cfg, now=t0 + timedelta(minutes=1))
    assert first.pushed + second.pushed == 3_660
    counts = Counter(jids(scheduled(client)))
    assert len(counts) == 3_660 and max(counts.values()) == 1
    assert min(score for _, score in scheduled(client)) == int(t0.timestamp()) + 1
