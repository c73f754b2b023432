"""The planner's promises that need no Redis: chunk bounds and the catch-up policies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kiqbeat.core.cron import fire_times
from kiqbeat.core.limits import PUSH_CALL_BUDGET_US, PUSH_US_PER_GROUP, PUSH_US_PER_JOB
from kiqbeat.core.plan import (
    MAX_BYTES_PER_CALL,
    MAX_JOBS_PER_CALL,
    ON_TIME_S,
    Entry,
    Plan,
    TickMemo,
    plan_due,
    to_ms,
)
from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text

NOW = datetime(2026, 5, 1, 9, 0, 5, tzinfo=UTC)


def call_cost_us(groups: int, jobs: int) -> float:
    """The time a push call of `groups` groups and `jobs` jobs is estimated to hold Redis,
    in µs (core/limits.py's measured costs, which `Plan.chunks` sums)."""
    return groups * PUSH_US_PER_GROUP + jobs * PUSH_US_PER_JOB


def plan_ticks(config: Config, marks: dict[str, int | None], now: datetime) -> Plan:
    """Every push of a whole document from the marks (epoch ms) and `now`: only the
    schedules with something to do get a group (one whose mark stays where it was only
    carries the schedule's next index entry)."""
    plan = plan_due([Entry(s, marks.get(s.name)) for s in config.schedules], now,
                    config.missed_jobs_window_s)
    plan.groups = [g for g in plan.groups if g.mark_ms != g.stored_ms]
    return plan


def test_no_call_carries_more_than_the_byte_cap_across_schedules() -> None:
    big = "x" * 8_000
    text = "schedules:\n" + "".join(
        f"  s{i}: {{cron: '* * * * *', class: A, args: [{big}]}}\n" for i in range(100))
    config = load_config_text(text)
    marks: dict[str, int | None] = {s.name: to_ms(NOW - timedelta(minutes=1))
                                     for s in config.schedules}
    chunks = list(plan_ticks(config, marks, NOW).chunks())
    sizes = [sum(len(j.payload) for g in chunk for j in g.jobs) for chunk in chunks]
    assert sum(len(g.jobs) for chunk in chunks for g in chunk) == 100
    assert max(sizes) <= MAX_BYTES_PER_CALL
    assert len(chunks) == 2  # about 65 jobs of 8 KB fit in 512 KiB


@pytest.mark.parametrize(("age_s", "pushed"), [(ON_TIME_S - 1, 1), (ON_TIME_S + 1, 0)])
def test_catch_up_none_keeps_ticks_younger_than_two_trigger_periods(
    age_s: float, pushed: int
) -> None:
    config = load_config_text("schedules: {r: {every: 10m, class: A, catch_up: none}}")
    tick = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
    now = tick + timedelta(seconds=age_s)
    (group,) = plan_ticks(config, {"r": to_ms(tick - timedelta(seconds=1))}, now).groups
    assert (len(group.jobs), group.skipped) == (pushed, 1 - pushed)


def test_a_schedule_without_a_mark_is_planned_as_new_with_no_jobs() -> None:
    config = load_config_text("schedules: {r: {cron: '* * * * *', class: A}}")
    (group,) = plan_ticks(config, {"r": None}, NOW).groups
    assert (group.new, group.jobs, group.mark_ms) == (True, [], to_ms(NOW))


def test_registering_many_new_schedules_is_split_into_calls_within_the_time_budget() -> None:
    config = load_config_text("schedules:\n" + "".join(
        f"  s{i}: {{cron: '* * * * *', class: A}}\n" for i in range(2_500)))
    chunks = list(plan_ticks(config, {}, NOW).chunks())
    assert len(chunks) > 1
    assert [g.name for chunk in chunks for g in chunk] == [f"s{i}" for i in range(2_500)]
    for chunk in chunks:
        assert call_cost_us(len(chunk), sum(len(g.ticks) for g in chunk)) <= PUSH_CALL_BUDGET_US


def test_a_call_is_sized_by_its_estimated_time_not_by_a_job_count() -> None:
    """A catch-up of one schedule is cut where the next job would pass the budget: more
    jobs a call when each costs less."""
    config = load_config_text("missed_jobs_window: 2h\nschedules: {s: {every: 1s, class: A}}")
    plan = plan_ticks(config, {"s": to_ms(NOW - timedelta(seconds=3_000))}, NOW)
    for budget in (300.0, 900.0):
        chunks = list(plan.chunks(budget_us=budget))
        jobs = [sum(len(g.ticks) for g in chunk) for chunk in chunks]
        assert sum(jobs) == 3_000
        assert all(call_cost_us(1, n) <= budget for n in jobs)
        assert all(call_cost_us(1, n + 1) > budget for n in jobs[:-1])  # filled to the budget


def test_a_new_schedules_jobs_fit_one_call_and_are_never_split() -> None:
    config = load_config_text("""
missed_jobs_window: 2h
schedules:
  busy: {every: 1s, class: A, queue: busy}
  second: {every: 1s, class: B, lookahead: 1h}
""")
    busy_mark = to_ms(NOW - timedelta(seconds=600))
    plan = plan_ticks(config, {"busy": busy_mark, "second": None}, NOW)
    busy, new = plan.groups
    assert len(busy.jobs) == 600
    # 3,600 ticks ahead: one call's worth now, the rest (15 min and more away) next time.
    assert len(new.jobs) == MAX_JOBS_PER_CALL
    assert new.mark_ms == new.jobs[-1].tick_ms
    parts = [g for chunk in plan.chunks() for g in chunk if g.name == "second"]
    assert len(parts) == 1 and parts[0] is new  # not split, though 600 jobs came before
    for chunk in plan.chunks(budget_us=call_cost_us(1, 100)):
        assert all(g.jobs == new.jobs for g in chunk if g.name == "second")


# ------------------------------------------------------------------ missed ranges recorded
# Each passed-over tick must be named by exactly one recorded range, and no pushed tick by
# any (core/plan.py docstring): checked against the cron reference, not the planner.

RANGES = """
schedules:
  every5: {cron: '*/5 * * * *', class: A, tz: Europe/Paris}
  latest: {cron: '* * * * *', class: A, catch_up: latest}
  none: {cron: '* * * * *', class: A, catch_up: none}
  paused: {cron: '* * * * *', class: A, enabled: false}
"""


def _named(ranges: list[tuple[int, int, str, int]], tick: datetime) -> list[str]:
    return [reason for after, through, reason, _ in ranges if after < to_ms(tick) <= through]


@pytest.mark.parametrize("hours_down", [0.5, 3, 30])
def test_every_passed_over_tick_is_in_exactly_one_recorded_range(hours_down: float) -> None:
    config = load_config_text(RANGES)  # window 1 h
    mark = NOW - timedelta(hours=hours_down)
    plan = plan_ticks(config, {s.name: to_ms(mark) for s in config.schedules}, NOW)
    assert {g.name for g in plan.groups} == {"every5", "latest", "none", "paused"}
    for group in plan.groups:
        pushed = {job.tick_ms for job in group.jobs}
        cron, tz = ("*/5 * * * *", "Europe/Paris") if group.name == "every5" else (
            "* * * * *", "UTC")
        ticks = fire_times(cron, tz=tz, after=mark, until=NOW)
        window_start = NOW - timedelta(hours=1)
        for tick in ticks:
            named = _named(group.ranges, tick)
            if group.name == "paused" or to_ms(tick) in pushed:
                assert named == [], tick
            else:
                expected = "window" if tick <= window_start else "policy"
                assert named == [expected], tick
        counts = {reason: n for _, _, reason, n in group.ranges}
        assert counts.get("window", 0) == group.missed
        if group.name != "paused":
            assert counts.get("policy", 0) == group.skipped


def test_recorded_ranges_go_with_the_first_call_of_a_split_catch_up() -> None:
    config = load_config_text("missed_jobs_window: 1h\nschedules: {s: {every: 1s, class: A}}")
    plan = plan_ticks(config, {"s": to_ms(NOW - timedelta(hours=2))}, NOW)
    chunks = list(plan.chunks())
    parts = [group for chunk in chunks for group in chunk]
    assert len(parts) > 1
    assert [bool(p.ranges) for p in parts] == [True] + [False] * (len(parts) - 1)
    ((after, through, reason, _),) = parts[0].ranges
    assert (after, through, reason) == (to_ms(NOW - timedelta(hours=2)),
                                        to_ms(NOW - timedelta(hours=1)), "window")
    assert parts[0].mark_ms >= through


def _decisions(plans: list[Plan]) -> list[tuple[object, ...]]:
    return [(g.name, g.mark_ms, g.next_due_ms, g.missed, g.skipped, g.ranges, g.ticks,
             g.releases, g.payloads) for plan in plans for g in plan.groups]


def test_schedules_planned_a_slice_at_a_time_get_what_planning_them_at_once_gives() -> None:
    # Decisions are shared by the schedules of an invocation that decide alike (timetable,
    # mark, policy): slices of one invocation share them, a later invocation or another
    # window does not reuse them.
    config = load_config_text("schedules:\n" + "".join(
        f"  s{i}: {{cron: '{cron}', class: A, args: [{i}], catch_up: {policy}}}\n"
        for i, (cron, policy) in enumerate(
            [(c, p) for c in ("* * * * *", "*/5 * * * *", "0 * * * *")
             for p in ("all", "latest", "none")] * 4)))
    ago = [None, 0, 61, 301, 3_599, 3_601, 7_300]
    for window_s in (3600.0, 900.0):
        memo = TickMemo()
        for now in (NOW, NOW + timedelta(minutes=1), NOW + timedelta(minutes=1, seconds=30)):
            entries = [Entry(s, None if a is None else to_ms(now) - a * 1000)
                       for s, a in zip(config.schedules, ago * 6, strict=False)]
            alone = _decisions([plan_due(entries, now, window_s)])
            sliced = _decisions([plan_due(entries[k:k + 5], now, window_s, memo)
                                 for k in range(0, len(entries), 5)])
            assert sliced == alone
            assert any(ticks for *_, ticks, _, _ in alone)  # some jobs, some not
