"""What kiqbeat prints reads as sentences: plurals agree with their counts, a state that has
not happened yet is said so, and numbers carry their units (issue 22)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kiqbeat.core.describe import counted
from kiqbeat.core.report import Report
from kiqbeat.operator import ScheduleStatus

NOW = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)


@pytest.mark.parametrize(("count", "more", "said"), [
    (0, False, "0 schedules"), (1, False, "1 schedule"), (2, False, "2 schedules"),
    (1_000, False, "1,000 schedules"), (1, True, "1+ schedules"),
])
def test_a_count_and_its_noun_agree(count: int, more: bool, said: str) -> None:
    assert counted(count, "schedule", more=more) == said


def test_a_noun_whose_plural_is_not_an_s_is_given_it() -> None:
    assert counted(2, "entry", "entries") == "2 entries"
    assert counted(1, "entry", "entries") == "1 entry"


def test_an_invocations_summary_says_one_schedule_and_one_round_trip_in_the_singular() -> None:
    one = Report(now=NOW, schedules=1, pushed=1, round_trips=1, lag_s=0.25).summary()
    assert "1 schedule due," in one and "(1 round trip, " in one
    assert "schedules due" not in one and "round trips" not in one
    assert "largest lag 0.2 s" in one or "largest lag 0.3 s" in one  # with its unit
    many = Report(now=NOW, schedules=2, round_trips=2).summary()
    assert "2 schedules due," in many and "(2 round trips, " in many


def test_an_invocations_json_form_holds_each_number_once_in_the_documented_order() -> None:
    """`run-once --json`, the handler's result and the metrics read `Report.as_dict`: every
    number, in this order, instants as ISO 8601, durations rounded, no per-job list."""
    report = Report(now=NOW, schedules=3, pushed=4, already_pushed=5, missed=6, skipped=7,
                    missed_recorded=8, skipped_recorded=9, missed_capped=True,
                    new_schedules=10, lag_s=1.23456, chunks=11, unreplicated=12, stale=13,
                    set_aside=14, documents_applied=15, alert_events=16,
                    alerts_delivered=17, outcomes_folded=18, outcomes_waiting=19,
                    round_trips=20, duration_s=0.123456, next_due_ms=1_772_953_260_500,
                    warnings=["careful"])
    report.skipped_by_reason["paused"] = 7
    found = report.as_dict()
    assert list(found.items()) == [
        ("now", "2026-03-08T07:00:00+00:00"), ("schedules", 3), ("pushed", 4),
        ("already_pushed", 5), ("missed", 6), ("skipped", 7), ("missed_recorded", 8),
        ("skipped_recorded", 9),
        ("skipped_by_reason", {"catch_up": 0, "paused": 7, "except": 0, "skip": 0,
                               "max_runs": 0, "overlap": 0}),
        ("missed_capped", True), ("new_schedules", 10), ("lag_s", 1.235), ("chunks", 11),
        ("unreplicated", 12), ("stale", 13), ("set_aside", 14), ("documents_applied", 15),
        ("alert_events", 16), ("alerts_delivered", 17), ("outcomes_folded", 18),
        ("outcomes_waiting", 19), ("round_trips", 20), ("duration_s", 0.1235),
        ("next_due", "2026-03-08T07:01:00.500000+00:00"), ("warnings", ["careful"])]
    found["warnings"].append("x")
    found["skipped_by_reason"]["skip"] = 1  # copies: the report itself is unchanged
    assert report.warnings == ["careful"] and report.skipped_by_reason["skip"] == 0
    assert Report(now=NOW).as_dict()["next_due"] is None


def test_a_schedule_never_planned_says_so_instead_of_a_covered_tick_that_was_never_seen() -> None:
    row = ScheduleStatus(name="digest", definition={}, source="", enabled=True, zone="UTC",
                         timing="every hour at minute 0", covered_through=None,
                         first_seen=None, next_tick=NOW, lag_s=0.0, set_aside=None)
    line = row.line()
    assert "not planned yet" in line
    assert "never seen" not in line and "last tick covered" not in line
    planned = ScheduleStatus(name="digest", definition={}, source="", enabled=True, zone="UTC",
                             timing="every hour at minute 0", covered_through=NOW,
                             first_seen=NOW, next_tick=NOW, lag_s=0.0, set_aside=None)
    assert "last tick covered 2026-03-08T07:00:00+00:00" in planned.line()
