"""The DST policy (`dst:`, core/dst.py) against the brute-force reference, at the offset
changes of every IANA zone from 1970 to 2037, and case by case where the answer is worked
out by hand.

The changes are found with zoneinfo alone (a day-by-day walk, then a bisection to the
second), never with kiqbeat's own scan. By default one change of each zone (in the first
year with any, from a year chosen by its name) is checked with one cron and one policy,
rotating, so the whole runs in seconds; KIQBEAT_LONG=1 walks every year of every zone and
checks every change with four crons under every policy.
"""

from __future__ import annotations

import os
import textwrap
import zlib
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

import pytest

from kiqbeat.core.cron import fire_times, parse_cron
from kiqbeat.core.dst import CRON, FUGIT, REPEATED, SKIPPED, DstPolicy, dst_policy
from kiqbeat.core.fugit import fugit_dst_differences
from kiqbeat.core.payload import jid as jid_for
from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text
from kiqbeat.document.validate import encode_definition, read_definition
from kiqbeat.errors import ConfigError

from .cron_reference import reference_fire_times

LONG = os.environ.get("KIQBEAT_LONG") == "1"
POLICIES = [DstPolicy(r, s) for r in REPEATED for s in SKIPPED]
FIRST_YEAR, LAST_YEAR = 1970, 2037
_DAY = timedelta(days=1)


def _offset(tz: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(tz).utcoffset()
    assert offset is not None
    return offset


@cache
def zone_changes(name: str, years: tuple[int, ...]) -> list[tuple[datetime, int, int]]:
    """(instant, offset before s, offset after s) of each change in `years`, from zoneinfo."""
    tz = ZoneInfo(name)
    found = []
    for year in years:
        day = datetime(year, 1, 1, tzinfo=UTC)
        end = datetime(year + 1, 1, 1, tzinfo=UTC)
        before = _offset(tz, day)
        while day < end:
            nxt = day + _DAY
            after = _offset(tz, nxt)
            if after != before:
                lo, hi = day, nxt
                while hi - lo > timedelta(seconds=1):
                    mid = lo + (hi - lo) / 2
                    lo, hi = (mid, hi) if _offset(tz, mid) == before else (lo, mid)
                found.append((hi.replace(microsecond=0), before // timedelta(seconds=1),
                              after // timedelta(seconds=1)))
            day, before = nxt, after
    return found


def _first_changes(name: str) -> list[tuple[datetime, int, int]]:
    """The changes of the first year with any, trying the years from one chosen by the
    zone's name (and wrapping); a year is walked day by day only when its offsets on the
    first of each month differ ([] for a zone that never changed offset)."""
    tz = ZoneInfo(name)
    span = LAST_YEAR - FIRST_YEAR + 1
    start = zlib.crc32(name.encode()) % span
    for k in range(span):
        year = FIRST_YEAR + (start + k) % span
        monthly = {_offset(tz, datetime(year, m, 1, tzinfo=UTC)) for m in range(1, 13)}
        monthly.add(_offset(tz, datetime(year + 1, 1, 1, tzinfo=UTC)))
        if len(monthly) > 1:
            found = zone_changes(name, (year,))
            if found:
                return found
    return []


def _crons(instant: datetime, before_s: int, after_s: int, seed: int) -> list[str]:
    """Fixed-time crons naming wall times the change skips or repeats (and one wildcard)."""
    lo_s, hi_s = sorted((before_s, after_s))
    wall = (instant + timedelta(seconds=lo_s)).replace(tzinfo=None)
    inside = wall + timedelta(seconds=((hi_s - lo_s) // 2) // 60 * 60)
    crons = [
        f"{inside.minute} {inside.hour} * * *",  # one wall time the change touches
        f"{inside.minute},{(inside.minute + 29) % 60} {wall.hour},{inside.hour} * * *",
        f"0 {wall.hour} * * *",  # the change's own wall hour
        f"*/30 {inside.hour} * * *",  # a wildcard: no policy changes it
    ]
    return crons if LONG else [crons[seed % len(crons)]]


def _cases() -> list[tuple[str, datetime, int, int]]:
    cases = []
    for name in sorted(available_timezones()):
        if LONG:
            changes = zone_changes(name, tuple(range(FIRST_YEAR, LAST_YEAR + 1)))
        else:
            changes = _first_changes(name)
            changes = changes[zlib.crc32(name.encode()) % len(changes):][:1] if changes else []
        cases.extend((name, when, before, after) for when, before, after in changes)
    return cases


def test_every_zone_s_changes_fire_as_the_reference_says_under_each_policy() -> None:
    cases = _cases()
    zones = {c[0] for c in cases}
    assert len(zones) > 400  # the others (UTC, Etc/GMT+5, Asia/Kolkata ...) never changed
    failures = []
    for i, (name, when, before, after) in enumerate(cases):
        reach = timedelta(seconds=abs(after - before)) + timedelta(hours=2)
        lo, hi = when - reach, when + reach
        policies = POLICIES if LONG else [POLICIES[i % len(POLICIES)]]
        for expr in _crons(when, before, after, i):
            for policy in policies:
                ours = parse_cron(expr, name, policy).between(lo, hi)
                theirs = reference_fire_times(expr, name, lo, hi, policy.repeated,
                                              policy.skipped)
                if ours != theirs:
                    failures.append(f"{name} {when} {expr!r} {policy}: {ours} != {theirs}")
    assert failures == []


# ---------------------------------------------------------------- by hand (New York, 2024)

SPRING = (datetime(2024, 3, 10, 4, tzinfo=UTC), datetime(2024, 3, 10, 9, tzinfo=UTC))
FALL = (datetime(2024, 11, 3, 3, tzinfo=UTC), datetime(2024, 11, 3, 9, tzinfo=UTC))


def z(hm: str, day: int) -> datetime:
    month = 3 if day == 10 else 11
    return datetime(2024, month, day, int(hm[:2]), int(hm[3:]), tzinfo=UTC)


@pytest.mark.parametrize(("policy", "spring", "fall"), [
    # 02:30 EST does not exist on 10 March (the gap ends at 07:00Z); 01:30 happens at
    # 05:30Z (EDT) and again at 06:30Z (EST) on 3 November.
    (CRON, [z("07:00", 10)], [z("05:30", 3)]),
    (DstPolicy("last", "shift"), [z("07:00", 10)], [z("06:30", 3)]),
    (DstPolicy("both", "shift"), [z("07:00", 10)], [z("05:30", 3), z("06:30", 3)]),
    (DstPolicy("first", "skip"), [], [z("05:30", 3)]),
    (FUGIT, [], [z("05:30", 3), z("06:30", 3)]),
])
def test_each_policy_fires_a_new_york_job_at_the_instants_worked_out_by_hand(
        policy: DstPolicy, spring: list[datetime], fall: list[datetime]) -> None:
    assert fire_times("30 2 * * *", tz="America/New_York", after=SPRING[0], until=SPRING[1],
                      dst=policy) == spring
    assert fire_times("30 1 * * *", tz="America/New_York", after=FALL[0], until=FALL[1],
                      dst=policy) == fall


def test_a_wildcard_cron_fires_alike_under_every_policy() -> None:
    walls = {tuple(parse_cron("*/30 1 * * *", "America/New_York", p).between(*FALL))
             for p in POLICIES}
    assert len(walls) == 1 and len(next(iter(walls))) == 4  # both passes of 01:00, 01:30


def test_the_policy_is_part_of_a_fixed_time_cron_s_key_only() -> None:
    assert parse_cron("30 1 * * *", "UTC", FUGIT).key != parse_cron("30 1 * * *").key
    assert parse_cron("*/5 * * * *", "UTC", FUGIT).key == parse_cron("*/5 * * * *").key


def test_next_after_and_between_agree_under_both() -> None:
    cron = parse_cron("30 1 * * *", "America/New_York", DstPolicy("both", "shift"))
    first = cron.next_after(FALL[0])
    assert (first, cron.next_after(first)) == (z("05:30", 3), z("06:30", 3))


@pytest.mark.parametrize(("policy", "tick", "note"), [
    (CRON, z("05:30", 3), "repeated hour: first pass; the second pass does not fire "
                          "(dst: first)"),
    (DstPolicy("last"), z("06:30", 3), "repeated hour: second pass; the first pass did not "
                                       "fire (dst: last)"),
    (FUGIT, z("05:30", 3), "repeated hour: first pass; fires again in the second pass "
                           "(dst: both)"),
    (FUGIT, z("06:30", 3), "repeated hour: second pass; fired in the first pass too "
                           "(dst: both)"),
])
def test_a_fired_tick_s_note_names_the_policy_s_outcome(policy: DstPolicy, tick: datetime,
                                                         note: str) -> None:
    assert parse_cron("30 1 * * *", "America/New_York", policy).dst_note(tick) == note


def test_what_a_policy_leaves_unfired_is_listed_with_a_note() -> None:
    assert parse_cron("30 2 * * *", "America/New_York", FUGIT).dst_withheld(*SPRING) == [
        (z("07:00", 10), "02:30 skipped by DST; not fired that day (dst: skip)")]
    assert parse_cron("30 1 * * *", "America/New_York").dst_withheld(*FALL) == [
        (z("06:30", 3), "repeated hour: 01:30 in the second pass does not fire (dst: first)")]
    assert parse_cron("30 1 * * *", "America/New_York", FUGIT).dst_withheld(*FALL) == []
    assert parse_cron("*/30 1 * * *", "America/New_York", FUGIT).dst_withheld(*FALL) == []


@pytest.mark.parametrize(("value", "policy"), [
    ("cron", CRON), ("fugit", FUGIT), ({"repeated": "both"}, DstPolicy("both", "shift")),
    ({"skipped": "skip"}, DstPolicy("first", "skip")),
    ({"repeated": "last", "skipped": "skip"}, DstPolicy("last", "skip")),
])
def test_a_dst_value_is_a_preset_or_a_mapping(value: object, policy: DstPolicy) -> None:
    assert dst_policy(value) == policy
    assert dst_policy(policy.written) == policy


@pytest.mark.parametrize(("value", "message"), [
    ("fugitt", "'fugitt' is not a preset; did you mean 'fugit'?"),
    ({"repeat": "both"}, "unknown key 'repeat'; did you mean 'repeated'?"),
    ({"repeated": "twice"}, "repeated 'twice' is not one of first, last, both"),
    ({"skipped": "shifted"}, "skipped 'shifted' is not one of shift, skip; did you mean"),
    (3, "3 must be a preset"),
    ({}, "{} must be a preset"),
])
def test_a_bad_dst_value_says_what_is_valid(value: object, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        dst_policy(value)
    assert message in str(caught.value)


# ---------------------------------------------------------------- the document field


def load(text: str) -> Config:
    return load_config_text(textwrap.dedent(text), source="test.yaml")


def test_a_schedule_s_dst_policy_decides_its_ticks_and_is_stored_with_it() -> None:
    config = load("""
        time_zone: America/New_York
        dst: fugit
        schedules:
          settle: {cron: "30 1 * * *", class: SettleJob, dst: {repeated: last}}
          close: {cron: "30 1 * * *", class: CloseJob}
          poll: {every: 15m, class: PollJob}
        """)
    s = {x.name: x for x in config.schedules}
    assert s["settle"].timetable.between(*FALL) == [z("06:30", 3)]
    assert s["close"].timetable.between(*FALL) == [z("05:30", 3), z("06:30", 3)]
    # The document-wide policy is written into the stored form of the crons that rely on it.
    assert s["close"].definition["dst"] == "fugit"
    assert s["settle"].definition["dst"] == {"repeated": "last"}
    assert "dst" not in s["poll"].definition
    assert "dst fugit" in s["close"].timing
    for name in ("settle", "close"):
        data = encode_definition(s[name].definition)
        assert read_definition(name, data).timetable.between(*FALL) == \
            s[name].timetable.between(*FALL)


def test_a_stored_definition_s_dst_is_part_of_its_checked_timing() -> None:
    # Two definitions alike but for dst: the cache of checked timings keeps them apart.
    plain = read_definition("a", b'{"args":[],"class":"J","cron":"30 1 * * * America/New_York"}')
    both = read_definition("b", b'{"args":[],"class":"J","cron":"30 1 * * * America/New_York",'
                                b'"dst":{"repeated":"both"}}')
    assert len(plain.timetable.between(*FALL)) == 1
    assert len(both.timetable.between(*FALL)) == 2


def test_a_bad_dst_is_refused_naming_the_schedule_field_and_value() -> None:
    with pytest.raises(ConfigError) as caught:
        load("""
            schedules:
              a: {cron: "30 1 * * *", class: J, dst: fugitt}
              b: {every: 15m, class: J, dst: fugit}
              c: {cron: "30 1 * * *", class: J, dst: {repeated: twice}}
            """)
    problems = caught.value.problems
    assert problems[0].startswith("schedule 'a' (field 'dst'): 'fugitt' is not a preset; "
                                  "did you mean 'fugit'?")
    assert problems[1].startswith("schedule 'b' (field 'dst'): applies to a cron only; "
                                  "'every' counts in UTC")
    assert problems[2].startswith("schedule 'c' (field 'dst'): repeated 'twice' is not one of")


def test_a_dst_on_a_wildcard_cron_is_warned_about() -> None:
    config = load("""
        schedules:
          a: {cron: "*/5 * * * *", class: J, dst: fugit}
        """)
    (warning,) = config.warnings
    assert warning.startswith("schedule 'a' (field 'dst'): has no effect on '*/5 * * * *'")


def test_both_gives_two_distinct_jids_for_the_two_passes() -> None:
    (s,) = load("""
        schedules:
          a: {cron: "30 1 * * * America/New_York", class: J, dst: {repeated: both}}
        """).schedules
    ticks = s.timetable.between(*FALL)
    assert len({jid_for(s.name, t) for t in ticks}) == 2


# ---------------------------------------------------------------- the fugit preset


@pytest.mark.parametrize("zone_name", ["America/New_York", "Europe/London", "America/Santiago",
                                       "Australia/Lord_Howe", "Pacific/Chatham",
                                       "America/St_Johns", "Asia/Tehran", "Africa/Casablanca"])
@pytest.mark.parametrize("expr", ["30 2 * * *", "0 1 * * *", "30 1 * * *", "0 0 * * *",
                                  "15,45 1,2,3 * * *", "0 2 * * 0", "0 23 * * *"])
def test_the_fugit_preset_fires_as_fugit_reads_the_cron(expr: str, zone_name: str) -> None:
    # core/fugit.py models fugit's TimeCursor on its own (every real instant whose wall time
    # matches) and warns wherever kiqbeat fires otherwise: under dst: fugit, nowhere. Under
    # the default, the warnings are the nights the preset changes.
    after = datetime(2018, 1, 1, tzinfo=UTC)
    fugit = parse_cron(expr, zone_name, FUGIT)
    assert fugit_dst_differences(fugit, after) == []
    default = parse_cron(expr, zone_name)
    year = (after, after + timedelta(days=366))
    changed = fugit.between(*year) != default.between(*year)
    assert bool(fugit_dst_differences(default, after)) == changed
