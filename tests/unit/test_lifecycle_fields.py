"""The life fields of a document and of a stored definition: read, checked, written in."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, date, datetime

import pytest

from kiqbeat.core.cron import Every
from kiqbeat.core.lifecycle import ENDED, Bounded, OneShot
from kiqbeat.core.schedule import Config, Schedule
from kiqbeat.document import load_config_text
from kiqbeat.document.validate import read_definition
from kiqbeat.errors import ConfigError


def load(text: str) -> Config:
    return load_config_text(textwrap.dedent(text), source="test.yaml")


def one(text: str) -> Schedule:
    (schedule,) = load(text).schedules
    return schedule


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(text)
    return caught.value.problems


def stored(schedule: Schedule) -> Schedule:
    """The schedule read back from its stored definition, on its own."""
    return read_definition(schedule.name, json.dumps(schedule.definition).encode())


LIFE = """
    time_zone: Europe/Paris
    calendars:
      holidays: ['2026-12-25', '2027-01-01']
      unused: ['2026-05-01']
    schedules:
      report:
        cron: "0 9 * * *"
        class: ReportWorker
        start_at: "2026-12-20T00:00:00+01:00"
        end_at: 2027-01-03T00:00:00Z
        except: [holidays, '2026-12-31']
        jitter: 5m
        max_runs: 10
        overlap: skip
"""


def test_every_life_field_is_read_into_the_schedule() -> None:
    report = one(LIFE)
    assert (report.max_runs, report.jitter_s, report.overlap) == (10, 300.0, "skip")
    timetable = report.timetable
    assert isinstance(timetable, Bounded)
    assert timetable.start == datetime(2026, 12, 19, 23, tzinfo=UTC)
    assert timetable.end == datetime(2027, 1, 3, tzinfo=UTC)
    assert timetable.excluded == {date(2026, 12, 25), date(2027, 1, 1), date(2026, 12, 31)}
    assert timetable.dates_zone == "Europe/Paris"
    ticks = timetable.between(datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 2, 1, tzinfo=UTC))
    assert [t.day for t in ticks] == [20, 21, 22, 23, 24, 26, 27, 28, 29, 30, 2]
    assert timetable.next_after(ticks[-1]) is ENDED


def test_a_stored_definition_carries_the_calendars_it_names_and_means_the_same_alone() -> None:
    report = one(LIFE)
    assert report.definition["calendars"] == {"holidays": ["2026-12-25", "2027-01-01"]}
    again = stored(report)
    assert again.timetable == report.timetable
    assert (again.max_runs, again.jitter_s, again.overlap) == (10, 300.0, "skip")


def test_an_interval_reads_its_excluded_dates_in_the_documents_zone_also_when_stored() -> None:
    sync = one("""
        time_zone: Asia/Tokyo
        schedules: {sync: {every: 1h, class: S, except: ['2026-01-01']}}
    """)
    assert isinstance(sync.timetable, Bounded) and sync.timetable.dates_zone == "Asia/Tokyo"
    assert isinstance(sync.timetable.inner, Every)
    assert stored(sync).timetable == sync.timetable


def test_a_one_shot_ticks_once_at_its_instant() -> None:
    once = one("schedules: {once: {at: '2026-12-24T17:00:00+01:00', class: A}}")
    assert once.timetable == OneShot(datetime(2026, 12, 24, 16, tzinfo=UTC), "UTC")
    assert once.timing == "at 2026-12-24T16:00:00Z"
    assert stored(once).timetable == once.timetable


def test_the_python_api_may_give_instants_as_aware_datetimes() -> None:
    from kiqbeat.document.validate import validate

    when = datetime(2026, 12, 24, 17, tzinfo=UTC)
    (once,) = validate({"schedules": {"once": {"at": when, "class": "A"}}}).schedules
    assert once.definition["at"] == "2026-12-24T17:00:00+00:00"
    assert stored(once).timetable == OneShot(when, "UTC")


def test_a_schedule_without_life_fields_keeps_its_plain_timetable() -> None:
    plain = one("schedules: {a: {cron: '0 * * * *', class: A}}")
    assert not isinstance(plain.timetable, Bounded)
    assert (plain.max_runs, plain.jitter_s, plain.overlap) == (None, 0.0, "allow")
    assert "calendars" not in plain.definition


@pytest.mark.parametrize(("fields", "message"), [
    ("start_at: '2026-03-01T09:00:00'",
     "schedule 'a' (field 'start_at'): '2026-03-01T09:00:00' has no UTC offset; add 'Z' or "
     "'+hh:mm' (an ISO 8601 instant with its UTC offset, e.g. '2026-03-01T09:00:00+01:00' or "
     "'2026-03-01T08:00:00Z')"),
    ("end_at: tomorrow",
     "schedule 'a' (field 'end_at'): 'tomorrow' is not an ISO 8601 instant with its UTC "
     "offset, e.g. '2026-03-01T09:00:00+01:00' or '2026-03-01T08:00:00Z'"),
    ("start_at: '2026-03-02T00:00:00Z', end_at: '2026-03-01T00:00:00Z'",
     "schedule 'a' (field 'end_at'): '2026-03-01T00:00:00Z' is not after start_at "
     "'2026-03-02T00:00:00Z'"),
    ("max_runs: 0", "schedule 'a' (field 'max_runs'): 0 must be a whole number from 1 to "
                    "9007199254740992"),
    ("max_runs: true", "schedule 'a' (field 'max_runs'): True must be a whole number from 1 "
                       "to 9007199254740992"),
    ("overlap: skipp", "schedule 'a' (field 'overlap'): 'skipp' is not one of allow, skip, "
                       "buffer_one; did you mean 'skip'?"),
    ("jitter: 2d", "schedule 'a' (field 'jitter'): '2d' is longer than a day (1d); a longer "
                   "delay is not jitter but another schedule"),
    ("jitter: 2h",
     "schedule 'a' (field 'jitter'): '2h' (7200 s) is longer than the shortest gap between "
     "two of its ticks (3,600 s); at most that, so each job is delivered before the next "
     "tick's"),
    ("except: ['2026-02-30']",
     "schedule 'a' (field 'except'): '2026-02-30' is not a date: day is out of range for "
     "month"),
    ("except: [holidys]",
     "schedule 'a' (field 'except'): no calendar 'holidys'; did you mean 'holidays'? "
     "(calendars: holidays)"),
    ("except: 12", "schedule 'a' (field 'except'): 12 must be a list of dates (YYYY-MM-DD) "
                   "and calendar names, e.g. ['2026-12-25', 'holidays']"),
])
def test_a_bad_life_field_is_named_with_its_value_and_what_is_valid(
        fields: str, message: str) -> None:
    assert problems(f"""
        calendars: {{holidays: ['2026-12-25']}}
        schedules: {{a: {{cron: '0 * * * *', class: A, {fields}}}}}
    """) == [message]


def test_a_one_shot_refuses_the_fields_of_recurring_schedules() -> None:
    assert problems("schedules: {a: {at: '2026-03-01T09:00:00Z', class: A, max_runs: 2, "
                    "except: ['2026-03-01'], cron: '* * * * *'}}") == [
        "schedule 'a': has both 'cron' and 'at'; keep one"]
    assert problems("schedules: {a: {at: '2026-03-01T09:00:00Z', class: A, max_runs: 2, "
                    "end_at: '2026-03-02T00:00:00Z'}}") == [
        "schedule 'a': 'end_at', 'max_runs' cannot go with 'at', which has a single tick; "
        "use cron or every for a recurring schedule"]
    assert problems("schedules: {a: {at: '2026-03-01T09:00:00.5Z', class: A}}") == [
        "schedule 'a' (field 'at'): '2026-03-01T09:00:00.5Z' must be a whole second (ticks "
        "are)"]


def test_top_level_calendars_are_checked_with_their_name() -> None:
    assert problems("calendars: {holidays: ['2026-13-01']}\nschedules: {}") == [
        "field 'calendars': calendar 'holidays': '2026-13-01' is not a date: month must be "
        "in 1..12"]
    assert problems("calendars: {'2026': []}\nschedules: {}") == [
        "field 'calendars': calendar name '2026' must not start with a digit (it would read "
        "as a date in 'except')"]


def test_an_unknown_calendar_without_any_defined_says_where_to_define_them() -> None:
    assert problems("schedules: {a: {cron: '0 * * * *', class: A, except: [holidays]}}") == [
        "schedule 'a' (field 'except'): no calendar 'holidays' (calendars: none; define them "
        "under 'calendars:')"]
