"""Missed ticks recorded and backfilled, manual runs and history, against a real redis-server.

The promises (issue 12, DESIGN §2): ticks an invocation passes over (older than the
missed-jobs window, or skipped by `catch_up`) are recorded as ranges in the same atomic
step that moves the watermark over them; the record stays O(schedules) however long the
outage; a backfill pushes each recorded tick exactly once, whatever runs beside it (other
backfills, invocations, a backfill killed half-way and run again), as the tick's own job;
a manual run's jid is never a tick's.

Expected ticks come from `kiqbeat.fire_times` (or epoch arithmetic for `every`) and jids
from (name, tick); the jobs are counted by jid in Redis, never taken from a report.
Invocations replay earlier instants with `now=`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import redis

from kiqbeat import fire_times
from kiqbeat.core.limits import MAX_MISSED_COUNTED
from kiqbeat.core.payload import jid
from kiqbeat.core.plan import from_ms, to_ms, to_ms_up
from kiqbeat.core.records import MAX_RANGES
from kiqbeat.core.schedule import Config
from kiqbeat.engine import Engine, run
from kiqbeat.errors import ConfigError, RedisRefusedError, StateError, shown
from kiqbeat.redis import keys, progress, scripts
from kiqbeat.redis.connection import connect
from kiqbeat.settings import Settings
from kiqbeat.store import MAX_LISTED, Store
from tests.support.clock import advance_clock, minute_floor, redis_now, room_before_boundary
from tests.support.engine import Meddling, config, pushed_jobs
from tests.support.marks import stored_mark, write_marks
from tests.support.servers import skip_before_redis7

MISSED = "kiqbeat:missed"
HISTORY = "kiqbeat:history"
WATERMARKS = "kiqbeat:watermarks"
ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------- expectations


@dataclass(frozen=True)
class Spec:
    """What a schedule's ticks are, independently of kiqbeat's timetables: a cron and zone
    (kiqbeat.fire_times, the public reference) or an interval (epoch arithmetic)."""

    cron: str = ""
    tz: str = "UTC"
    every_s: int = 0
    dst: str | dict[str, str] = "cron"

    def ticks(self, after: datetime, until: datetime) -> list[datetime]:
        """Every tick in (after, until]."""
        if self.every_s:
            first = int(after.timestamp()) // self.every_s * self.every_s + self.every_s
            last = int(until.timestamp())
            return [datetime.fromtimestamp(s, tz=UTC)
                    for s in range(first, last + 1, self.every_s)]
        return fire_times(self.cron, tz=self.tz, after=after, until=until, dst=self.dst)


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def recorded(client: redis.Redis, name: str) -> list[tuple[int, int, str]]:
    """The raw record of `name`: (after_ms, through_ms, reason) per line."""
    raw = client.hget(MISSED, name)
    if raw is None:
        return []
    return [(int(a), int(t), r) for a, t, r in
            (line.split(" ") for line in text(raw).splitlines())]


def recorded_ticks(client: redis.Redis, name: str, spec: Spec,
                   reason: str | None = None) -> list[datetime]:
    """The ticks the record of `name` names (of `reason` only, when given), in order."""
    return [t for a, b, r in recorded(client, name) if reason in (None, r)
            for t in spec.ticks(from_ms(a), from_ms(b))]


def job_jids(client: redis.Redis) -> Counter[str]:
    """How many jobs of each jid Redis holds, in queues and the schedule set."""
    return Counter(job["jid"] for job in pushed_jobs(client))


def assert_each_once(client: redis.Redis, specs: dict[str, Spec], after: datetime,
                     until: datetime, *, ahead: dict[str, timedelta] | None = None) -> int:
    """Every tick of every schedule in (after, until (+ its lookahead)] is in Redis exactly
    once, and no other job is; returns how many."""
    expected = Counter(jid(name, t) for name, spec in specs.items()
                       for t in spec.ticks(after, until + (ahead or {}).get(name, timedelta())))
    found = job_jids(client)
    twice = {j: n for j, n in found.items() if n > 1}
    assert not twice, f"{len(twice)} ticks pushed more than once"
    missing, extra = expected - found, found - expected
    assert not missing and not extra, (f"{sum(missing.values())} ticks never pushed, "
                                       f"{sum(extra.values())} jobs of no expected tick")
    return sum(expected.values())


# A fall-back night in New York (05:xx UTC is 01:xx EDT, 06:xx UTC is 01:xx EST): fixed-time
# and wildcard zoned crons (fixed-time under three DST policies), an interval, seconds
# with lookahead, metadata, and the catch-up policies.
NIGHT = """
missed_jobs_window: 1h
schedules:
  ny_fixed: {cron: "30 1 * * *", tz: America/New_York, class: NightlyJob}
  ny_wild: {cron: "*/20 1 * * *", tz: America/New_York, class: NightOwlJob}
  ny_both: {cron: "30 1 * * *", tz: America/New_York, class: BothJob, dst: {repeated: both}}
  ny_last: {cron: "30 1 * * *", tz: America/New_York, class: LastJob, dst: {repeated: last}}
  five: {cron: "*/5 * * * *", class: FiveJob, queue: reports, include_metadata: true}
  seven: {every: 7m, class: SevenJob}
  ahead: {cron: "*/30 * * * * *", class: AheadJob, queue: fast, lookahead: 40s}
  latest: {every: 2m, class: LatestJob, catch_up: latest}
  none: {cron: "* * * * *", class: NoneJob, catch_up: none}
  paused: {cron: "* * * * *", class: PausedJob, enabled: false}
"""
NIGHT_SPECS = {
    "ny_fixed": Spec("30 1 * * *", "America/New_York"),
    "ny_wild": Spec("*/20 1 * * *", "America/New_York"),
    "ny_both": Spec("30 1 * * *", "America/New_York", dst={"repeated": "both"}),
    "ny_last": Spec("30 1 * * *", "America/New_York", dst={"repeated": "last"}),
    "five": Spec("*/5 * * * *"),
    "seven": Spec(every_s=420),
    "ahead": Spec("*/30 * * * * *"),
    "latest": Spec(every_s=120),
    "none": Spec("* * * * *"),
}
NIGHT_AHEAD = {"ahead": timedelta(seconds=40)}
WINDOW = timedelta(hours=1)
NIGHT_START = datetime(2025, 11, 2, 3, 0, 5, tzinfo=UTC)
NIGHT_END = datetime(2025, 11, 2, 12, 0, 5, tzinfo=UTC)


def _seen_ms(client: redis.Redis, name: str) -> int:
    mark = stored_mark(client, name)
    assert mark is not None and mark.first_seen_ms is not None, name
    return mark.first_seen_ms


def _has_history(client: redis.Redis, name: str) -> bool:
    return name in progress.read_histories(client, "", [name])


def test_an_outage_longer_than_the_window_records_exactly_the_ticks_passed_over(
    client: redis.Redis,
) -> None:
    """Ticks in (watermark, now - window] are recorded as "window"; those `catch_up` skips
    as "policy"; a paused schedule records nothing. With what was pushed, each tick of the
    period is accounted for exactly once."""
    cfg = config(NIGHT)
    run(client, cfg, now=NIGHT_START)
    report = run(client, cfg, now=NIGHT_END)
    cut = NIGHT_END - WINDOW
    for name in ("ny_fixed", "ny_wild", "five", "seven", "none", "latest"):
        spec = NIGHT_SPECS[name]
        assert recorded_ticks(client, name, spec, "window") == spec.ticks(NIGHT_START, cut), name
    # The lookahead schedule registered with its first 40 s already in the schedule set.
    ahead = NIGHT_SPECS["ahead"]
    assert recorded_ticks(client, "ahead", ahead, "window") == ahead.ticks(
        NIGHT_START + timedelta(seconds=40), cut)
    assert all(t <= to_ms(cut) for _, t, r in recorded(client, "ny_wild") if r == "window")
    assert recorded_ticks(client, "latest", NIGHT_SPECS["latest"], "policy") == (
        NIGHT_SPECS["latest"].ticks(cut, NIGHT_END)[:-1])
    late = [t for t in NIGHT_SPECS["none"].ticks(cut, NIGHT_END)
            if NIGHT_END - t >= timedelta(seconds=120)]
    assert recorded_ticks(client, "none", NIGHT_SPECS["none"], "policy") == late
    assert not client.hexists(MISSED, "paused")
    assert sorted(text(n) for n in client.hkeys(MISSED)) == sorted(NIGHT_SPECS)
    total = sum(len(recorded_ticks(client, n, s)) for n, s in NIGHT_SPECS.items())
    lost = sum(len(recorded_ticks(client, n, s, "window")) for n, s in NIGHT_SPECS.items())
    # Lost ticks (older than the window) alone count as missed; the policy's are skipped.
    assert 0 < lost < total
    assert report.missed_recorded == lost
    assert report.missed_recorded + report.skipped_recorded == total

    listed = Store(client).missed()
    assert {(m.name, m.reason) for m in listed} == {
        *((n, "window") for n in NIGHT_SPECS), ("latest", "policy"), ("none", "policy")}
    for m in listed:
        ticks = NIGHT_SPECS[m.name].ticks(m.after, m.through)
        assert (m.ticks, m.capped) == (len(ticks), False), m
        assert m.as_dict()["ticks"] == len(ticks) and m.name in m.line()
    assert Store(client).missed(["five", "paused", "nobody"]) == [
        m for m in listed if m.name == "five"]

    # Pushed now and recorded together: every tick of the night, each once.
    recorded_jids = Counter(jid(n, t) for n, s in NIGHT_SPECS.items()
                            for t in recorded_ticks(client, n, s))
    expected = Counter(jid(n, t) for n, s in NIGHT_SPECS.items()
                       for t in s.ticks(NIGHT_START, NIGHT_END + NIGHT_AHEAD.get(n, timedelta())))
    assert job_jids(client) + recorded_jids == expected


def test_a_backfill_pushes_each_recorded_tick_once_as_the_ticks_own_job(
    client: redis.Redis,
) -> None:
    """After it, every tick of the night is in Redis exactly once, the record is empty, the
    history says "backfill", and each job is the tick's (jid, queue, class, scheduled_at)."""
    cfg = config(NIGHT)
    run(client, cfg, now=NIGHT_START)
    run(client, cfg, now=NIGHT_END)
    owed = {n: recorded_ticks(client, n, s) for n, s in NIGHT_SPECS.items()}
    before = job_jids(client)
    store = Store(client, window_s=WINDOW.total_seconds())
    dry = store.backfill(dry_run=True)
    assert (dry.planned, dry.pushed, dry.schedules) == (
        sum(map(len, owed.values())), 0, len(NIGHT_SPECS))
    assert job_jids(client) == before and client.hlen(MISSED) == len(NIGHT_SPECS)

    handled: list[int] = []
    done = store.backfill(progress=handled.append)
    assert (done.pushed, done.already, done.stale, done.skipped) == (dry.planned, 0, 0, [])
    assert sum(handled) == done.pushed
    assert_each_once(client, NIGHT_SPECS, NIGHT_START, NIGHT_END, ahead=NIGHT_AHEAD)
    assert client.hlen(MISSED) == 0 and store.missed() == []

    jobs = {j["jid"]: j for j in pushed_jobs(client)}
    for name, ticks in owed.items():
        for tick in ticks:
            job = jobs[jid(name, tick)]
            assert job["queue"] == {"five": "reports", "ahead": "fast"}.get(name, "default")
            assert job["enqueued_at"] >= tick.timestamp()
        newest = store.history(name)[0]
        assert (newest.kind, newest.tick, newest.jid) == ("backfill", ticks[-1],
                                                          jid(name, ticks[-1]))
    # 01:30 happened at 05:30Z (EDT) and at 06:30Z (EST): the DST policies chose.
    first, second = (datetime(2025, 11, 2, h, 30, tzinfo=UTC) for h in (5, 6))
    assert {jid("ny_both", first), jid("ny_both", second), jid("ny_last", second),
            jid("ny_fixed", first)} <= set(jobs)
    assert not {jid("ny_last", first), jid("ny_fixed", second)} & set(jobs)
    five = [jobs[jid("five", t)] for t in owed["five"]]
    assert [j["args"] for j in five] == [[{"scheduled_at": t.timestamp()}] for t in owed["five"]]
    assert {j["class"] for j in five} == {"FiveJob"}
    # The result lists the first MAX_LISTED pushed jobs, each one of the recorded ticks.
    assert len(done.jobs) == min(MAX_LISTED, done.pushed) == MAX_LISTED
    assert {(j.schedule, j.jid) for j in done.jobs} <= {
        (n, jid(n, t)) for n, ticks in owed.items() for t in ticks}
    again = store.backfill()
    assert (again.pushed, again.planned, again.schedules) == (0, 0, 0)


def test_a_schedule_with_several_ranges_is_backfilled_once_and_its_record_emptied(
    client: redis.Redis,
) -> None:
    """`catch_up: latest` after a long outage records a "window" and a "policy" range; both
    backfilled (in one script call: they are small), nothing stays recorded, and a second
    backfill pushes nothing again."""
    cfg = config("missed_jobs_window: 1h\nschedules:\n"
                 "  l: {cron: '*/10 * * * *', class: L, catch_up: latest}\n")
    t0 = minute_floor(redis_now(client)) - timedelta(hours=4) + timedelta(seconds=5)
    run(client, cfg, now=t0)
    run(client, cfg, now=t0 + timedelta(hours=3))
    spec = Spec("*/10 * * * *")
    assert [r for _, _, r in recorded(client, "l")] == ["window", "policy"]
    owed = recorded_ticks(client, "l", spec)
    store = Store(client)
    assert store.backfill().pushed == len(owed) == 17
    assert recorded(client, "l") == []
    assert store.backfill().pushed == 0
    assert_each_once(client, {"l": spec}, t0, t0 + timedelta(hours=3))


def test_since_until_and_latest_only_take_their_part_and_leave_the_rest_recorded(
    client: redis.Redis,
) -> None:
    """A backfill of [since, until] pushes exactly those recorded ticks; the rest stays
    recorded and a later backfill pushes it; latest-only pushes the newest and forgets the
    rest of that schedule's record."""
    cfg = config(NIGHT)
    run(client, cfg, now=NIGHT_START)
    run(client, cfg, now=NIGHT_END)
    store = Store(client, window_s=WINDOW.total_seconds())
    five, spec = "five", NIGHT_SPECS["five"]
    owed = recorded_ticks(client, five, spec)
    since, until = owed[10], owed[20]
    part = store.backfill([five], since=since, until=until)
    assert [j.tick for j in part.jobs] == owed[10:21] and part.pushed == 11
    assert recorded_ticks(client, five, spec) == owed[:10] + owed[21:]
    # Between two ticks: none of either edge.
    part = store.backfill([five], since=owed[3] + timedelta(seconds=1),
                          until=owed[5] - timedelta(seconds=1))
    assert [j.tick for j in part.jobs] == [owed[4]]
    assert store.backfill([five]).pushed == len(owed) - 12
    assert not client.hexists(MISSED, five)

    seven = NIGHT_SPECS["seven"]
    owed_seven = recorded_ticks(client, "seven", seven)
    newest = store.backfill(["seven"], latest_only=True)
    assert [j.tick for j in newest.jobs] == [owed_seven[-1]] and newest.planned == 1
    assert not client.hexists(MISSED, "seven")
    assert store.backfill(["seven"]).pushed == 0
    pushed_seven = [j for j in job_jids(client) if j in {jid("seven", t) for t in owed_seven}]
    assert pushed_seven == [jid("seven", owed_seven[-1])]


def test_since_and_until_between_milliseconds_keep_to_at_or_after_and_at_or_before(
    client: redis.Redis,
) -> None:
    """`since` a microsecond after a tick leaves that tick out; `until` a microsecond before
    one leaves it out too (instants are not rounded into scope)."""
    cfg = config("missed_jobs_window: 1h\nschedules:\n  m: {cron: '* * * * *', class: M}\n")
    t0 = minute_floor(redis_now(client)) - timedelta(hours=4) + timedelta(seconds=5)
    run(client, cfg, now=t0)
    run(client, cfg, now=t0 + timedelta(hours=3))
    owed = recorded_ticks(client, "m", Spec("* * * * *"))
    done = Store(client).backfill(["m"], since=owed[5] + timedelta(microseconds=1),
                                  until=owed[8] - timedelta(microseconds=1))
    assert [j.tick for j in done.jobs] == owed[6:8]


def test_paused_unknown_and_invalid_schedules_are_skipped_and_keep_their_record(
    client: redis.Redis,
) -> None:
    store = Store(client)
    for name in ("p", "bad", "ok"):
        store.put(name, {"cron": "* * * * *", "class": "W"})
    t0 = minute_floor(redis_now(client)) - timedelta(hours=5) + timedelta(seconds=5)
    run(client, Config(schedules=()), now=t0)
    run(client, Config(schedules=()), now=t0 + timedelta(hours=3))
    store.pause("p")
    client.hset(keys.definitions(""), "bad", b'{"cron": "61 * * * *", "class": "W"}')
    client.hset(MISSED, "ghost", client.hget(MISSED, "ok") or b"")  # its definition gone
    result = store.backfill(["p", "bad", "ok", "ghost"])
    assert sorted(n for n, _ in result.skipped) == ["bad", "ghost", "p"]  # each once
    client.hdel(MISSED, "ghost")
    assert "paused" in dict(result.skipped)["p"] and "invalid" in dict(result.skipped)["bad"]
    assert result.pushed == 120
    assert client.hexists(MISSED, "p") and client.hexists(MISSED, "bad")
    listed = [(m.name, m.reason, m.ticks) for m in store.missed()]
    # The pause also recorded what p still owed since the last invocation (t0 + 3 h).
    assert listed[0] == ("bad", "window", None) and listed[1] == ("p", "window", 120)
    assert [reason for _, reason, _ in listed[2:]] == ["paused"]
    owed = 120 + (listed[2][2] or 0)
    store.resume("p")
    assert store.backfill().pushed == owed


def test_a_schedule_every_second_down_for_thirty_days_is_one_small_range(
    client: redis.Redis,
) -> None:
    """Two million ticks are one line of a few dozen bytes; the missed hash has a field
    per schedule with misses; every kiqbeat hash holds at most one field per schedule."""
    cfg = config("""
missed_jobs_window: 1m
schedules:
  secondly: {every: 1s, class: S}
  cron_secondly: {cron: "* * * * * *", class: C, tz: Europe/London}
  daily: {cron: "0 9 * * *", class: D, tz: America/New_York}
  quiet: {cron: "0 0 1 1 *", class: Q}
  paused: {every: 1s, class: P, enabled: false}
""")
    # A fixed past instant: no New Year in the thirty days ("quiet" owes nothing), no
    # 09:00 New York in the last minute.
    end = datetime(2025, 6, 15, 12, 0, 30, 250_000, tzinfo=UTC)
    start = end - timedelta(days=30)
    run(client, cfg, now=start)
    report = run(client, cfg, now=end)
    assert report.pushed == 120  # the last minute of the two every-second ones
    assert sorted(text(n) for n in client.hkeys(MISSED)) == [
        "cron_secondly", "daily", "secondly"]
    for name in ("secondly", "cron_secondly", "daily"):
        assert len(recorded(client, name)) == 1, name
        assert client.hstrlen(MISSED, name) < 48
    daily = Spec("0 9 * * *", "America/New_York").ticks(start, end - timedelta(minutes=1))
    assert recorded_ticks(client, "daily", Spec("0 9 * * *", "America/New_York")) == daily
    listed = {m.name: m for m in Store(client, window_s=60).missed()}
    # `kiqbeat missed` counts to the cap the invocation counted to: the two agree.
    assert (listed["secondly"].ticks, listed["secondly"].capped) == (MAX_MISSED_COUNTED, True)
    assert (report.missed, report.missed_capped) == (2 * MAX_MISSED_COUNTED + len(daily), True)
    assert f"{MAX_MISSED_COUNTED:,}+" in listed["secondly"].line()
    assert (listed["daily"].ticks, listed["daily"].capped) == (len(daily), False)
    (a, b, reason), = recorded(client, "secondly")
    assert (b - a) // 1000 == 30 * 86_400 - 60 and reason == "window"
    for key in client.scan_iter(match="kiqbeat:*"):
        if client.type(key) == b"hash":
            assert client.hlen(key) <= 5, key
    memory = client.memory_usage(MISSED)
    assert memory is not None and memory < 1024

    # The last two hours of it, backfilled: 7,200 - 60 jobs; the rest stays one range.
    store = Store(client, window_s=60)
    since = end - timedelta(hours=2)
    done = store.backfill(["secondly"], since=since)
    assert done.pushed == 7_200 - 60
    (a2, b2, _), = recorded(client, "secondly")
    assert (a2, b2) == (a, to_ms_up(since) - 1)  # "at or after since": whole ms up
    secondly = Spec(every_s=1).ticks(since - timedelta(milliseconds=1), end)
    found = job_jids(client)
    assert all(found[jid("secondly", t)] == 1 for t in secondly)


def test_a_watermark_set_back_to_zero_records_nothing_from_before_first_seen(
    client: redis.Redis,
) -> None:
    """No pre-history: the record clips at first-seen, so a watermark of 0 (set by hand)
    owes the ticks since the schedule was first seen, never 56 years of them."""
    cfg = config("missed_jobs_window: 1m\nschedules:\n  x: {every: 1s, class: X}\n")
    t0 = redis_now(client) - timedelta(minutes=10)
    run(client, cfg, now=t0)
    seen = _seen_ms(client, "x")
    write_marks(client, "", {"x": progress.Mark(0, seen)})
    run(client, cfg, now=t0 + timedelta(minutes=5))
    ((after, through, reason),) = recorded(client, "x")
    assert (after, reason) == (seen, "window")
    assert through == to_ms(t0 + timedelta(minutes=4))
    dry = Store(client, window_s=60).backfill(dry_run=True)
    assert (dry.planned, dry.before_first_seen) == (240, 0)


def test_a_watermark_set_back_to_zero_pushes_nothing_from_before_first_seen(
    client: redis.Redis,
) -> None:
    """No pre-history when pushing either: a schedule first seen a minute ago whose
    watermark is set back to 0 by hand gets only its ticks since first-seen pushed, not the
    whole window's (issue 17's re-run: 3,600 ticks of the hour before first-seen pushed)."""
    cfg = config("missed_jobs_window: 1h\nschedules:\n  x: {every: 1s, class: X}\n")
    t0 = redis_now(client).replace(microsecond=0) - timedelta(minutes=2)
    run(client, cfg, now=t0)
    seen = from_ms(_seen_ms(client, "x"))
    write_marks(client, "", {"x": progress.Mark(0, to_ms(seen))})
    now = t0 + timedelta(minutes=1)
    run(client, cfg, now=now)
    found = job_jids(client)
    assert set(found) == {jid("x", t) for t in Spec(every_s=1).ticks(seen, now)}
    assert len(found) == 60 and set(found.values()) == {1}


def test_more_missed_ticks_than_an_invocation_counts_are_reported_with_a_plus(
    client: redis.Redis,
) -> None:
    """An invocation counts a schedule's missed ticks up to MAX_MISSED_COUNTED; beyond it, the
    count is a lower bound and says so ("10000+", `missed_capped`), never a capped number
    without "+" (issue 17: a 56-year range shown as "10000 missed"). The record holds them
    all."""
    cfg = config("missed_jobs_window: 1m\nschedules:\n  x: {every: 1s, class: X}\n")
    t0 = redis_now(client).replace(microsecond=0) - timedelta(hours=4)
    run(client, cfg, now=t0)
    report = run(client, cfg, now=t0 + timedelta(hours=3, minutes=1))
    owed = recorded_ticks(client, "x", Spec(every_s=1))
    assert len(owed) == 3 * 3600 > MAX_MISSED_COUNTED
    assert (report.missed, report.missed_capped) == (MAX_MISSED_COUNTED, True)
    assert f"{MAX_MISSED_COUNTED}+ missed beyond the window" in report.summary()
    assert f"({MAX_MISSED_COUNTED}+ recorded for kiqbeat backfill)" in report.summary()
    assert report.as_dict()["missed_capped"] is True
    below = run(client, cfg, now=t0 + timedelta(hours=3, minutes=3))  # 60 missed: exact
    assert (below.missed, below.missed_capped) == (60, False)
    assert "60 missed beyond the window" in below.summary()


def test_at_most_the_newest_hundred_ranges_are_kept(client: redis.Redis) -> None:
    """`catch_up: latest` every second records a range each invocation; the record keeps
    the newest MAX_RANGES, and they name exactly the ticks those invocations skipped."""
    cfg = config("schedules:\n  s: {every: 1s, class: S, catch_up: latest}\n")
    start = redis_now(client).replace(microsecond=0) - timedelta(hours=1)
    run(client, cfg, now=start)
    nows = [start + timedelta(seconds=10 * k) for k in range(1, 151)]
    for now in nows:
        run(client, cfg, now=now)
    ranges = recorded(client, "s")
    assert len(ranges) == MAX_RANGES == 100
    skipped = [t for previous, now in pairwise(nows[49:])
               for t in Spec(every_s=1).ticks(previous, now)[:-1]]
    assert recorded_ticks(client, "s", Spec(every_s=1)) == skipped
    assert all(r == "policy" for _, _, r in ranges)


def test_beyond_a_hundred_ranges_the_policy_ones_go_before_an_outage(
    client: redis.Redis,
) -> None:
    cfg = config("missed_jobs_window: 1h\nschedules:\n  s: {every: 1s, class: S, "
                 "catch_up: latest}\n")
    start = redis_now(client).replace(microsecond=0) - timedelta(hours=2)
    run(client, cfg, now=start - timedelta(hours=3))
    run(client, cfg, now=start)  # the outage: a window range (and a policy one)
    outage = [r for r in recorded(client, "s") if r[2] == "window"]
    assert len(outage) == 1
    for k in range(1, 151):
        run(client, cfg, now=start + timedelta(seconds=10 * k))
    ranges = recorded(client, "s")
    assert len(ranges) == MAX_RANGES and ranges[0] == outage[0]


@pytest.mark.parametrize("key", [MISSED, HISTORY])
def test_a_record_that_cannot_be_written_leaves_the_watermark_and_the_jobs_unmoved(
    client: redis.Redis, key: str,
) -> None:
    """Recorded in the same step as the watermark: when the record cannot be written (a key
    of the wrong type), neither the mark nor the record nor any job moves; once fixed, the
    next invocation records and pushes as if nothing had happened."""
    cfg = config("missed_jobs_window: 1h\nschedules:\n  m: {cron: '* * * * *', class: M}\n")
    t0 = minute_floor(redis_now(client)) - timedelta(hours=4) + timedelta(seconds=5)
    run(client, cfg, now=t0)
    mark = stored_mark(client, "m")
    client.set(key, "not a hash")
    with pytest.raises(StateError, match=key):
        run(client, cfg, now=t0 + timedelta(hours=3))
    assert stored_mark(client, "m") == mark and client.get(key) == b"not a hash"
    assert pushed_jobs(client) == []
    client.delete(key)
    report = run(client, cfg, now=t0 + timedelta(hours=3))
    assert (report.pushed, report.missed_recorded) == (60, 120)
    spec = Spec("* * * * *")
    assert recorded_ticks(client, "m", spec) == spec.ticks(t0, t0 + timedelta(hours=2))


def test_a_user_that_may_not_write_the_record_moves_nothing(
    client: redis.Redis, redis_url: str,
) -> None:
    """An ACL user with every right but writing the missed hash: the invocation is refused
    before its first write (the watermark and the jobs stay as they were)."""
    skip_before_redis7(client, "read-only key patterns (%R~) and scripts asking before a "
                       "write (docs/deploy.md#redis-acl)")
    cfg = config("missed_jobs_window: 1h\nschedules:\n  m: {cron: '* * * * *', class: M}\n")
    t0 = minute_floor(redis_now(client)) - timedelta(hours=4) + timedelta(seconds=5)
    run(client, cfg, now=t0)
    mark = stored_mark(client, "m")
    client.acl_setuser("no_record", enabled=True, passwords=["+pw"], commands=["+@all"],
                       keys=["kiqbeat:[^m]*", "%R~kiqbeat:missed", "queue:*", "queues",
                             "schedule"])
    url = redis_url.replace("redis://", "redis://no_record:pw@")
    try:
        with connect(url) as limited, pytest.raises(RedisRefusedError, match="pushing jobs"):
            run(limited, cfg, now=t0 + timedelta(hours=3))
    finally:
        client.acl_deluser("no_record")
    assert stored_mark(client, "m") == mark and not client.exists(MISSED)
    assert pushed_jobs(client) == []


def test_removal_forgets_the_record_and_the_history(client: redis.Redis) -> None:
    """Removed through the API or gone from the document: no record, no history left, and a
    schedule of the same name added later starts with neither."""
    cfg = config("missed_jobs_window: 1h\nschedules:\n  doc: {cron: '* * * * *', class: D}\n")
    store = Store(client)
    store.put("api", {"cron": "* * * * *", "class": "A"})
    t0 = minute_floor(redis_now(client)) - timedelta(hours=4) + timedelta(seconds=5)
    run(client, cfg, now=t0)
    run(client, cfg, now=t0 + timedelta(hours=3))
    for name in ("api", "doc"):
        assert client.hexists(MISSED, name) and _has_history(client, name), name
        assert store.history(name)
    assert store.remove("api") is True
    run(client, config("schedules: {}"), now=t0 + timedelta(hours=3))
    for name in ("api", "doc"):
        assert not client.hexists(MISSED, name) and not _has_history(client, name), name
        with pytest.raises(ConfigError, match=name):
            store.history(name)
    assert store.missed() == [] and store.backfill().pushed == 0


@pytest.mark.parametrize("garbled", ["1000 2000", "soon later window", "1000 2000 bogus"])
def test_a_garbled_record_is_named_not_acted_on(client: redis.Redis, garbled: str) -> None:
    """A record written by hand that is not "AFTER THROUGH window|policy" lines: listing it
    fails with a ConfigError naming the schedule (or, given a list, names it there);
    backfilling skips it, saying why; nothing is pushed and the record stays."""
    store = Store(client)
    store.put("x", {"cron": "* * * * *", "class": "X"})
    client.hset(MISSED, "x", garbled)
    with pytest.raises(ConfigError, match="'x'"):
        store.missed()
    named: list[tuple[str, str]] = []
    assert store.missed(garbled=named) == [] and [n for n, _ in named] == ["x"]
    done = store.backfill(["x"])
    assert [n for n, why in done.skipped if "garbled" in why] == ["x"] and done.pushed == 0
    assert pushed_jobs(client) == [] and client.hget(MISSED, "x") == garbled.encode()


def test_a_record_that_is_not_utf8_is_shown_alike_listed_whole_or_by_name(
        client: redis.Redis) -> None:
    """A record's bytes that are not UTF-8 (written by hand) are shown escaped, the same
    whether `missed` lists every schedule (HSCAN pages) or names it (HMGET)."""
    store = Store(client)
    store.put("x", {"cron": "* * * * *", "class": "X"})
    client.hset(MISSED, "x", b"\xff\xfe 2000 window")
    every: list[tuple[str, str]] = []
    named: list[tuple[str, str]] = []
    assert store.missed(garbled=every) == [] and store.missed(["x"], garbled=named) == []
    # Each byte shown escaped (errors.shown), not replaced by U+FFFD, which loses it.
    assert every == named and "\\udcff\\udcfe" in every[0][1] and "\ufffd" not in every[0][1]


def test_a_garbled_record_costs_only_its_schedule_in_a_backfill(
    client: redis.Redis,
) -> None:
    """Every record is read before the first push: one garbled record, whatever its name's
    place in the order, is skipped and named (issue 26: it used to stop the backfill of
    every schedule); the others are backfilled, each tick once, and it stays as it was."""
    store = Store(client)
    store.put("aaa", {"every": "10s", "class": "W"})  # 720 ticks recorded: several calls
    store.put("zzz", {"cron": "* * * * *", "class": "W"})
    t0 = minute_floor(redis_now(client)) - timedelta(hours=5) + timedelta(seconds=5)
    run(client, Config(schedules=()), now=t0)
    run(client, Config(schedules=()), now=t0 + timedelta(hours=3))
    client.hset(MISSED, "zzz", "1795480000000 1795481000000 windo")
    before = len(pushed_jobs(client))
    done = store.backfill()
    assert [n for n, why in done.skipped if "garbled" in why] == ["zzz"]
    jids = [job["jid"] for job in pushed_jobs(client)]
    assert len(jids) == len(set(jids)) == before + done.pushed and done.pushed > 0
    assert client.hget(MISSED, "aaa") is None
    assert client.hget(MISSED, "zzz") == b"1795480000000 1795481000000 windo"


def test_a_backfill_stopped_part_way_says_what_it_had_pushed_and_a_rerun_does_the_rest(
    client: redis.Redis,
) -> None:
    """A queue key of the wrong type refuses the call that pushes into it; the calls before
    it stay done, the error says how many ticks they pushed, and the backfill run again once
    the key is fixed pushes the rest: every tick once."""
    store = Store(client)
    store.put("aaa", {"every": "10s", "class": "A"})
    store.put("zzz", {"cron": "* * * * *", "class": "Z", "queue": "blocked"})
    t0 = minute_floor(redis_now(client)) - timedelta(hours=5) + timedelta(seconds=5)
    run(client, Config(schedules=()), now=t0)
    back = t0 + timedelta(hours=3)
    run(client, Config(schedules=()), now=back)
    client.set("queue:blocked", "not a list")
    aaa = Spec(every_s=10).ticks(t0, back - timedelta(hours=1))
    with pytest.raises(StateError, match=(
            rf"queue:blocked.*before this, {len(aaa):,} tick\(s\) were pushed by "
            rf"{-(-len(aaa) // 200)} earlier call\(s\)")):
        store.backfill()
    queued = Counter(json.loads(raw)["jid"] for raw in client.lrange("queue:default", 0, -1))
    assert queued == Counter(jid("aaa", t) for t in Spec(every_s=10).ticks(t0, back))
    assert not client.hexists(MISSED, "aaa") and client.hexists(MISSED, "zzz")
    client.delete("queue:blocked")
    again = store.backfill()
    zzz = Spec("* * * * *").ticks(t0, back - timedelta(hours=1))
    assert (again.pushed, again.already) == (len(zzz), 0)
    assert Counter(json.loads(raw)["jid"] for raw in client.lrange("queue:blocked", 0, -1)) \
        == Counter(jid("zzz", t) for t in zzz)


# ---------------------------------------------------------------------------- races


def test_an_invocation_replaying_recorded_instants_never_pushes_a_recorded_tick(
    client: redis.Redis,
) -> None:
    """Every recorded tick lies at or below the watermark: late invocations replaying any
    instant of the outage push none of them, and the backfill still pushes each once."""
    cfg = config(NIGHT)
    run(client, cfg, now=NIGHT_START)
    run(client, cfg, now=NIGHT_END)
    owed = Counter(jid(n, t) for n, s in NIGHT_SPECS.items() for t in recorded_ticks(client, n, s))
    before = job_jids(client)
    for minutes in range(5, 9 * 60, 37):
        late = run(client, cfg, now=NIGHT_START + timedelta(minutes=minutes))
        assert late.pushed == 0 and late.missed_recorded == 0
    assert job_jids(client) == before
    assert Counter(jid(n, t) for n, s in NIGHT_SPECS.items()
                   for t in recorded_ticks(client, n, s)) == owed
    Store(client).backfill()
    assert_each_once(client, NIGHT_SPECS, NIGHT_START, NIGHT_END, ahead=NIGHT_AHEAD)


def test_racing_backfills_and_invocations_push_each_tick_exactly_once(redis_url: str) -> None:
    """Four backfills in threads, while invocations go on and more outages are recorded:
    every tick of the period once, the record empty at the end."""
    cfg = config(NIGHT)
    with connect(redis_url) as c:
        run(c, cfg, now=NIGHT_START)
        run(c, cfg, now=NIGHT_END)
    later = [NIGHT_END + timedelta(hours=h, minutes=7 * h) for h in range(1, 6)]
    errors: list[BaseException] = []
    results: list[int] = []
    lock = threading.Lock()

    def backfill() -> None:
        try:
            with connect(redis_url) as c:
                for _ in range(3):
                    pushed = Store(c).backfill().pushed
                    with lock:
                        results.append(pushed)
        except BaseException as exc:
            errors.append(exc)

    def invoke() -> None:
        try:
            with connect(redis_url) as c:
                engine = Engine(client=c)
                for now in later:
                    engine.run(cfg, now=now)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=backfill) for _ in range(4)]
    threads += [threading.Thread(target=invoke) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[0]
    with connect(redis_url) as c:
        Store(c).backfill()
        assert c.hlen(MISSED) == 0
        assert_each_once(c, NIGHT_SPECS, NIGHT_START, later[-1], ahead=NIGHT_AHEAD)
    assert sum(results) > 0


def test_a_definition_changed_between_read_and_backfill_is_left_alone(
    client: redis.Redis,
) -> None:
    """Its recorded ticks stay recorded (counted stale), nothing of it is pushed; the next
    backfill pushes them with the new definition."""
    store = Store(client)
    store.put("x", {"cron": "*/10 * * * *", "class": "Old"})
    t0 = minute_floor(redis_now(client)) - timedelta(hours=5) + timedelta(seconds=5)
    run(client, Config(schedules=()), now=t0)
    run(client, Config(schedules=()), now=t0 + timedelta(hours=3))
    owed = recorded_ticks(client, "x", Spec("*/10 * * * *"))
    before = job_jids(client)

    def change(name: str) -> None:
        if name == "backfill":
            store.put("x", {"cron": "*/10 * * * *", "class": "New"})

    result = Store(client, lua=Meddling(before=change)).backfill()
    assert (result.pushed, result.stale) == (0, len(owed))  # stale: ticks left alone
    assert job_jids(client) == before
    assert recorded_ticks(client, "x", Spec("*/10 * * * *")) == owed
    assert store.backfill().pushed == len(owed)
    backfilled = {jid("x", t) for t in owed}
    assert {j["class"] for j in pushed_jobs(client) if j["jid"] in backfilled} == {"New"}


# ---------------------------------------------------------------------------- trigger


MANUAL_JID = re.compile(r"manual[0-9a-f]{18}")


def test_a_manual_run_has_its_own_jid_and_is_remembered_as_manual(client: redis.Redis) -> None:
    """A paused schedule runs too; args may be replaced for the run; the jid is "manual" and
    18 hex digits, never any tick's, and the history keeps it."""
    store = Store(client)
    store.put("report", {"cron": "* * * * *", "class": "ReportJob", "args": [1], "queue": "rep",
                         "include_metadata": True, "enabled": False})
    first = store.trigger("report")
    second = store.trigger("report", args=["two", {"x": 3}])
    assert MANUAL_JID.fullmatch(first.jid) and MANUAL_JID.fullmatch(second.jid)
    assert first.jid != second.jid and (first.queue, first.name) == ("rep", "report")
    jobs = {j["jid"]: j for j in pushed_jobs(client)}
    assert jobs.keys() == {first.jid, second.jid}
    assert jobs[first.jid]["args"][0] == 1 and jobs[second.jid]["args"][:2] == ["two", {"x": 3}]
    assert {j["class"] for j in jobs.values()} == {"ReportJob"}
    assert jobs[first.jid]["enqueued_at"] == pytest.approx(first.at.timestamp(), abs=0.002)
    assert first.as_dict()["jid"] == first.jid
    history = store.history("report")
    assert [(p.kind, p.jid) for p in history] == [("manual", second.jid), ("manual", first.jid)]
    # A tick's jid is 24 hex digits: no tick of any instant can be confused with a manual run.
    assert not re.fullmatch(r"[0-9a-f]{24}", first.jid) and len(first.jid) == 24
    assert re.fullmatch(r"[0-9a-f]{24}", jid("report", first.at))
    with pytest.raises(ConfigError, match="ghost"):
        store.trigger("ghost")


def test_a_definition_changed_between_read_and_trigger_is_refused(client: redis.Redis) -> None:
    store = Store(client)
    store.put("x", {"cron": "* * * * *", "class": "Old"})

    def change(name: str) -> None:
        if name == "trigger":
            store.put("x", {"cron": "* * * * *", "class": "New"})

    with pytest.raises(ConfigError, match="changed or was removed"):
        Store(client, lua=Meddling(before=change)).trigger("x")
    assert pushed_jobs(client) == [] and store.history("x") == []


class LostReply(scripts.Caller):
    """Runs each script twice, keeping the second reply: what redis-py's retry does when the
    first reply is lost on the way back."""

    def call(self, lua: scripts.Lua, client: redis.Redis, keys: Sequence[str],
             args: Sequence[scripts.Arg]) -> Any:
        super().call(lua, client, keys, args)
        return super().call(lua, client, keys, args)


def test_a_manual_run_sent_again_after_a_lost_reply_is_pushed_once(client: redis.Redis) -> None:
    store = Store(client)
    store.put("x", {"cron": "* * * * *", "class": "X"})
    ran = Store(client, lua=LostReply()).trigger("x")
    assert [j["jid"] for j in pushed_jobs(client)] == [ran.jid]
    assert [p.jid for p in store.history("x")] == [ran.jid]
    again = store.trigger("x")  # a new run is a new job
    assert sorted(j["jid"] for j in pushed_jobs(client)) == sorted([ran.jid, again.jid])


def test_pausing_records_what_was_owed_and_the_pause_is_never_pushed(
    client: redis.Redis,
) -> None:
    """Invokers stopped for 5 h, then the schedule paused and resumed with no invocation
    between: the ticks owed before the pause are recorded ("paused") and backfilled once;
    the ticks of the pause are neither pushed nor recorded; the next ones are pushed."""
    store = Store(client)
    store.put("x", {"every": "1s", "class": "X"})
    spec = Spec(every_s=1)
    t0 = redis_now(client) - timedelta(hours=5)
    run(client, Config(schedules=()), now=t0)  # registered 5 h ago; nothing since
    paused_at = redis_now(client)
    assert store.pause("x")
    advance_clock(client, 2.5)
    resumed_at = redis_now(client)  # read first: the resume is at or after it
    assert store.resume("x")
    ((after, through, reason),) = recorded(client, "x")
    assert reason == "paused"
    assert from_ms(after) <= t0 + timedelta(seconds=1)
    assert paused_at - timedelta(seconds=1) <= from_ms(through) <= paused_at + timedelta(
        seconds=1)
    advance_clock(client, 1.1)
    report = run(client, Config(schedules=()))
    assert report.missed_recorded == 0
    owed = recorded_ticks(client, "x", spec)
    done = store.backfill(["x"])
    assert done.pushed == len(owed) > 5 * 3600 - 10
    found = job_jids(client)
    assert all(found[jid("x", t)] == 1 for t in owed)
    between = spec.ticks(from_ms(through), resumed_at)
    assert between and not any(jid("x", t) in found for t in between)  # the pause
    assert recorded(client, "x") == []


def test_a_pause_and_resume_between_invocations_pushes_nothing_of_the_pause(
    client: redis.Redis,
) -> None:
    """An up-to-date schedule paused then resumed before the next invocation: that
    invocation pushes the ticks after the resume, none from the pause, and records none."""
    store = Store(client)
    store.put("x", {"every": "1s", "class": "X"})
    run(client, Config(schedules=()))
    room_before_boundary(client, 1, 1)  # just past a whole second: it comes due, and the
    # next run and the pause share the second that follows
    run(client, Config(schedules=()))
    paused_at = redis_now(client)
    assert store.pause("x")
    advance_clock(client, 2.5)
    resumed_at = redis_now(client)  # read first: the resume is at or after it
    assert store.resume("x")
    advance_clock(client, 1.1)
    report = run(client, Config(schedules=()))
    assert report.pushed >= 1 and report.missed_recorded == 0
    assert recorded(client, "x") == []
    found = job_jids(client)
    pause = Spec(every_s=1).ticks(paused_at + timedelta(seconds=1), resumed_at)
    assert pause and not any(jid("x", t) in found for t in pause)


def test_a_backfill_whose_scope_holds_no_tick_leaves_the_record_whole(
    client: redis.Redis,
) -> None:
    store = Store(client)
    store.put("h", {"cron": "0 * * * *", "class": "H"})
    hour = minute_floor(redis_now(client)).replace(minute=0)
    t0 = hour - timedelta(hours=30) + timedelta(seconds=5)
    run(client, Config(schedules=()), now=t0)
    run(client, Config(schedules=()), now=t0 + timedelta(hours=20))
    before = recorded(client, "h")
    between = t0 + timedelta(hours=3, minutes=30)  # [hh:30:05, hh:31:05): no tick of :00
    for latest_only in (False, True):
        done = store.backfill(["h"], since=between, until=between + timedelta(minutes=1),
                              latest_only=latest_only)
        assert done.pushed == 0
    assert recorded(client, "h") == before


def test_the_history_keeps_the_newest_n_pushes_of_every_kind(client: redis.Redis) -> None:
    """Invocations keep `history` (the setting; 0: none) ticks a schedule; backfills and
    manual runs the Store's; newest first."""
    cfg = config("missed_jobs_window: 1h\nschedules:\n  m: {cron: '* * * * *', class: M}\n"
                 "  n: {cron: '* * * * *', class: N}\n")
    t0 = minute_floor(redis_now(client)) - timedelta(hours=4) + timedelta(seconds=5)
    engine = Engine(Settings(history=3), client=client)
    engine.run(cfg, now=t0)
    engine.run(cfg, now=t0 + timedelta(minutes=90))
    ticks = Spec("* * * * *").ticks(t0, t0 + timedelta(minutes=90))
    store = Store(client, history=4)
    assert [(p.kind, p.tick) for p in store.history("m")] == [
        ("tick", t) for t in reversed(ticks[-3:])]
    store.backfill(["m"])
    manual = store.trigger("m")
    assert [p.kind for p in store.history("m")] == ["manual", "backfill", "backfill", "backfill"]
    assert store.history("m")[0].jid == manual.jid
    assert [p.tick for p in store.history("m")[1:]] == list(reversed(ticks[-63:-60]))
    Engine(Settings(history=0), client=client).run(cfg, now=t0 + timedelta(minutes=95))
    assert len(store.history("n")) == 3  # not kept: nothing added, nothing lost
    Store(client, history=0).trigger("n")
    assert len(store.history("n")) == 3


@pytest.mark.parametrize("history", [
    b"\x01\x8b\xcf\xe5\x68\x00\x02\x02\x00\x02ab",  # says 2 entries, holds 1
    b"\xff\xff\xff\xff\xff\xff\x01\x00\x00",  # a tick past the year 9999
])
def test_a_garbled_history_costs_only_its_schedule_and_names_it_and_its_key(
    client: redis.Redis, history: bytes,
) -> None:
    """`kiqbeat history` of a record Python cannot read refuses with the schedule, the bucket
    key and the record's bytes; its report shows no pushes; another schedule's history reads."""
    store = Store(client)
    for name in ("sick", "well"):
        store.put(name, {"cron": "* * * * *", "class": "W"})
    store.trigger("well")
    sick = keys.progress_bucket("", progress.bucket("sick"))
    record = progress.encode_record(progress.Mark(1_700_000_000_000, None), history)
    client.hset(sick, "sick", record)
    with pytest.raises(ConfigError) as refused:
        store.history("sick")
    assert str(refused.value) == (f"the history of schedule 'sick' in {sick} is garbled: "
                                  f"{shown(repr(record))}")
    assert not any(t.outcome in ("pushed", "backfilled")
                   for t in store.report("sick").ticks)
    assert [p.kind for p in store.history("well")] == ["manual"]


def test_an_operators_smaller_history_setting_never_shortens_the_history(
    client: redis.Redis,
) -> None:
    """A deployment's history of 30 pushes; an operator's shell keeping 10 (or none) adds
    its manual runs and backfills and keeps 30 (none: adds nothing)."""
    store = Store(client, history=40)
    store.put("x", {"cron": "* * * * *", "class": "X"})
    for _ in range(30):
        store.trigger("x")
    held = store.history("x")
    assert len(held) == 30
    small = Store(client, history=10)
    newest = small.trigger("x")
    kept = store.history("x")
    assert [p.jid for p in kept] == [newest.jid] + [p.jid for p in held[:29]]
    Store(client, history=0).trigger("x")  # keeps none: adds none, drops none
    assert store.history("x") == kept
    t0 = minute_floor(redis_now(client)) - timedelta(hours=3) + timedelta(seconds=5)
    deployment = Engine(Settings(history=30), client=client)
    deployment.run(Config(schedules=()), now=t0)
    deployment.run(Config(schedules=()), now=t0 + timedelta(hours=2))  # 60 ticks recorded
    assert [p.kind for p in store.history("x")] == ["tick"] * 30
    assert small.backfill(["x"]).pushed == 60
    after = store.history("x")
    assert [p.kind for p in after] == ["backfill"] * 30


# ---------------------------------------------------------------------------- the CLI, end to end


OUTAGE_DOC = """
missed_jobs_window: 1h
schedules:
  ny_fixed: {cron: "30 1 * * *", tz: America/New_York, class: NightlyJob}
  ny_wild: {cron: "*/20 1 * * *", tz: America/New_York, class: NightOwlJob}
  ny_both: {cron: "30 1 * * *", tz: America/New_York, class: BothJob, dst: {repeated: both}}
  ny_last: {cron: "30 1 * * *", tz: America/New_York, class: LastJob, dst: {repeated: last}}
  five: {cron: "*/5 * * * *", class: FiveJob, queue: reports, include_metadata: true}
  seven: {every: 7m, class: SevenJob}
  ahead: {cron: "*/30 * * * * *", class: AheadJob, queue: fast, lookahead: 40s}
  secondly: {every: 1s, class: SecondJob, queue: busy}
  also_secondly: {cron: "* * * * * *", class: OtherSecondJob, queue: busy}
"""
OUTAGE_SPECS = {
    "ny_fixed": NIGHT_SPECS["ny_fixed"], "ny_wild": NIGHT_SPECS["ny_wild"],
    "ny_both": NIGHT_SPECS["ny_both"], "ny_last": NIGHT_SPECS["ny_last"],
    "five": NIGHT_SPECS["five"], "seven": NIGHT_SPECS["seven"], "ahead": NIGHT_SPECS["ahead"],
    "secondly": Spec(every_s=1), "also_secondly": Spec("* * * * * *"),
}
OUTAGE_AHEAD = {"ahead": timedelta(seconds=40)}
# Invokers run an hour, stop for 12 (New York's fall-back night among it), come back.
FIRST_SEEN = datetime(2025, 11, 2, 3, 0, 5, tzinfo=UTC)
STOPPED = FIRST_SEEN + timedelta(hours=1)
BACK = STOPPED + timedelta(hours=12)


def kiqbeat_cli(*args: str, url: str, path: Path) -> list[str]:
    """The argv of `python -m kiqbeat ARGS` on this Redis and document."""
    return [sys.executable, "-m", "kiqbeat", *args, "--config", str(path), "--redis-url", url]


def cli_env() -> dict[str, str]:
    """The environment without kiqbeat's or Redis's variables: only the flags decide."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("KIQBEAT_", "REDIS_"))}


def cli_json(*args: str, url: str, path: Path) -> Any:
    """Run a kiqbeat command with --json to completion; its parsed output."""
    done = subprocess.run(kiqbeat_cli(*args, "--json", url=url, path=path), env=cli_env(),
                          capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert done.returncode == 0, f"kiqbeat {args[0]}: {done.stderr[-2000:]}"
    return json.loads(done.stdout)


def backfills(count: int, url: str, path: Path) -> list[subprocess.Popen[str]]:
    """`kiqbeat backfill --all --yes --json` processes, started together (--yes: tens of
    thousands of ticks, on purpose)."""
    return [subprocess.Popen(kiqbeat_cli("backfill", "--all", "--yes", "--json", url=url,
                                         path=path),
                             env=cli_env(), cwd=ROOT, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE) for _ in range(count)]


def finished(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """A backfill process's JSON result, once it exited 0."""
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-2000:]
    result: dict[str, Any] = json.loads(out)
    return result


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["two racing backfills", "a backfill killed half-way"])
def test_after_invokers_stopped_longer_than_the_window_missed_and_backfill_push_every_tick_once(
    redis_url: str, tmp_path: Path, how: str,
) -> None:
    """Issue 12's end-to-end promise: invokers stop for 12 h (window 1 h); `kiqbeat missed`
    lists exactly the ticks passed over; `kiqbeat backfill --all`, in processes racing each
    other or SIGKILLed half-way and run again, while invocations go on, leaves every tick
    since first-seen in Redis exactly once (by jid, against fire_times), the record empty,
    and "backfill" in the history."""
    path = tmp_path / "schedules.yaml"
    path.write_text(OUTAGE_DOC)
    cfg = config(OUTAGE_DOC)
    client = connect(redis_url)
    engine = Engine(client=client)
    for minutes in range(0, 61, 10):
        engine.run(cfg, now=FIRST_SEEN + timedelta(minutes=minutes))
    report = engine.run(cfg, now=BACK)
    cut = BACK - WINDOW
    owed = {n: recorded_ticks(client, n, s) for n, s in OUTAGE_SPECS.items()}
    for name, spec in OUTAGE_SPECS.items():  # `ahead` pushed its next 40 s before the stop
        assert owed[name] == spec.ticks(STOPPED + OUTAGE_AHEAD.get(name, timedelta()), cut)
    # The invocation counts each schedule's missed ticks up to MAX_MISSED_COUNTED only.
    assert report.missed_recorded == sum(min(len(t), MAX_MISSED_COUNTED) for t in owed.values())
    assert sum(map(len, owed.values())) > 2 * 11 * 3600

    listed = cli_json("missed", url=redis_url, path=path)["missed"]
    # Counted to the same cap as the invocation's report: the two agree.
    assert {(m["name"], m["reason"], m["ticks"], m["capped"]) for m in listed} == {
        (n, "window", min(len(ticks), MAX_MISSED_COUNTED), len(ticks) > MAX_MISSED_COUNTED)
        for n, ticks in owed.items()}
    assert sum(m["ticks"] for m in listed) == report.missed_recorded
    assert {(m["name"], m["after"], m["through"]) for m in listed} == {
        (n, from_ms(a).isoformat(), from_ms(b).isoformat())
        for n in OUTAGE_SPECS for a, b, _ in recorded(client, n)}

    # Invocations go on while the backfills run (racing invokers, nothing new missed).
    later = [BACK + timedelta(minutes=m) for m in range(5, 61, 5)]
    failures: list[BaseException] = []

    def invoke() -> None:
        try:
            with connect(redis_url) as own:
                for now in later:
                    Engine(client=own).run(cfg, now=now)
        except BaseException as exc:
            failures.append(exc)

    invoking = threading.Thread(target=invoke, daemon=True)
    results: list[dict[str, Any]] = []
    try:
        if how == "two racing backfills":
            procs = backfills(2, redis_url, path)
            invoking.start()
            results = [finished(p) for p in procs]
        else:
            record = client.hgetall(MISSED)
            (victim,) = backfills(1, redis_url, path)
            invoking.start()
            deadline = time.monotonic() + 60
            # Killed as soon as its first script call has taken ticks out of the record.
            while client.hgetall(MISSED) == record and victim.poll() is None:
                assert time.monotonic() < deadline, "the backfill did nothing in 60 s"
                time.sleep(0.001)
            victim.send_signal(signal.SIGKILL)
            victim.communicate()
            assert victim.returncode == -signal.SIGKILL, "the backfill finished before the kill"
            left = sum(len(recorded_ticks(client, n, s)) for n, s in OUTAGE_SPECS.items())
            assert 0 < left < sum(map(len, owed.values())), "killed before or after it pushed"
            (again,) = backfills(1, redis_url, path)
            results = [finished(again)]
            assert results[0]["pushed"] == left
    finally:
        if invoking.ident is not None:
            invoking.join(timeout=120)
    assert not invoking.is_alive() and not failures, failures

    assert client.hlen(MISSED) == 0
    assert cli_json("missed", url=redis_url, path=path) == {"missed": []}
    total = assert_each_once(client, OUTAGE_SPECS, FIRST_SEEN, later[-1], ahead=OUTAGE_AHEAD)
    assert total > 2 * 12 * 3600
    if how == "two racing backfills":
        assert sum(r["pushed"] for r in results) == sum(map(len, owed.values()))
    jobs = {j["jid"]: j for j in pushed_jobs(client)}
    assert all(jobs[jid("five", t)]["args"] == [{"scheduled_at": t.timestamp()}]
               for t in owed["five"])
    history = cli_json("history", "ny_fixed", url=redis_url, path=path)["history"]
    assert [(p["kind"], p["tick"]) for p in history] == [
        ("backfill", t.isoformat()) for t in reversed(owed["ny_fixed"])]
    client.close()


def test_a_backfill_sets_aside_only_the_schedule_whose_progress_record_is_not_one(
    client: redis.Redis,
) -> None:
    """A progress record written by hand (here: its history cut short) costs a backfill of
    every schedule only that schedule: it is skipped, named with the record's key, its ticks
    stay recorded, and the others are backfilled (the whole call was once refused)."""
    store = Store(client)
    store.put("aaa", {"cron": "* * * * *", "class": "A", "queue": "a"})
    store.put("zzz", {"cron": "* * * * *", "class": "Z", "queue": "z"})
    t0 = minute_floor(redis_now(client)) - timedelta(hours=5) + timedelta(seconds=5)
    run(client, Config(schedules=()), now=t0)
    back = t0 + timedelta(hours=3)
    run(client, Config(schedules=()), now=back)  # 2 hours passed over: recorded
    key = f"kiqbeat:progress:{progress.bucket('zzz')}"
    record = client.hget(key, "zzz")
    assert record is not None
    missed, queued = client.hget(MISSED, "zzz"), client.lrange("queue:z", 0, -1)
    cut = record[:6] + b"\x00\x00\x05"  # 5 entries of history, none there
    client.hset(key, "zzz", cut)
    done = store.backfill()
    assert [n for n, _ in done.skipped] == [n for n, _ in done.aside] == ["zzz"]
    assert client.hget(key, "zzz") == cut
    assert key in done.skipped[0][1] and "progress record" in done.skipped[0][1]
    assert client.lrange("queue:z", 0, -1) == queued and client.hget(MISSED, "zzz") == missed
    assert Counter(json.loads(raw)["jid"] for raw in client.lrange("queue:a", 0, -1)) \
        == Counter(jid("aaa", t) for t in Spec("* * * * *").ticks(t0, back))


def test_a_backfill_naming_a_garbled_record_without_a_definition_names_the_record(
    client: redis.Redis,
) -> None:
    """A name whose only trace is a missed record written by hand is not a typo: a backfill
    naming it skips it naming the garbled record (as `missed` does), not "no schedule of
    that name", and exits with the record still there to fix."""
    client.hset(MISSED, "ghost", b"5 not-a-number window")
    store = Store(client)
    done = store.backfill(["ghost"], must_exist=True)
    assert [n for n, _ in done.aside] == ["ghost"]
    assert "no schedule" not in done.aside[0][1] and "ghost" in done.aside[0][1]
    assert client.hget(MISSED, "ghost") == b"5 not-a-number window"
