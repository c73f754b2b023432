"""The planner's promises that need no Redis: chunk bounds and the catch-up policies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kiqbeat.core.plan import MAX_BYTES_PER_CALL, ON_TIME_S, plan_ticks, to_ms
from kiqbeat.document.config import load_config_text

NOW = datetime(2026, 5, 1, 9, 0, 5, tzinfo=UTC)


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


def test_registering_many_new_schedules_is_split_into_bounded_calls() -> None:
    config = load_config_text("schedules:\n" + "".join(
        f"  s{i}: {{cron: '* * * * *', class: A}}\n" for i in range(2_500)))
    chunks = list(plan_ticks(config, {}, NOW).chunks())
    assert [len(chunk) for chunk in chunks] == [1000, 1000, 500]
