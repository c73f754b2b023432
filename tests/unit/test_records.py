"""The missed-ticks record's reading (core/records.py) against independent references.

A recorded range names instants, not ticks: the ticks in (after_ms, through_ms] are the
timetable's, listed lazily in steps. Here they are checked against `cron_reference` (a
brute-force reading of DESIGN §3 that visits every wall-clock minute or second) on random
expressions around real DST transitions, against the timetable's own `between` over ranges
too long to brute-force, and against epoch arithmetic for `every`. Garbled records are
refused with ValueError, never read as something else.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kiqbeat.core.cron import Cron, Every, parse_cron
from kiqbeat.core.instants import LAST_INSTANT
from kiqbeat.core.limits import MAX_MISSED_COUNTED
from kiqbeat.core.payload import jid_ms
from kiqbeat.core.plan import from_ms, to_ms
from kiqbeat.core.records import (
    Range,
    count_ticks,
    last_tick_in,
    parse_ranges,
    ticks_in,
)
from kiqbeat.errors import ConfigError
from kiqbeat.redis import progress
from tests.support.history import history_bytes

from .cron_reference import reference_fire_times
from .cron_strategies import PROPERTY_SETTINGS, crons, windows

YEAR_MS = 366 * 86_400_000


def _cron(expr: str, zone_name: str) -> Cron:
    try:
        return parse_cron(expr, zone_name)
    except ConfigError:
        assume(False)  # e.g. a day no chosen month has: refused, not a timetable
        raise


@st.composite
def cron_ranges(draw: st.DrawFn) -> tuple[str, str, Cron, int, int]:
    """(expression, zone, cron, after_ms, through_ms): a range near a DST transition, in
    whole milliseconds as the record holds them, sometimes ending exactly on a tick."""
    expr, zone_name, seconds = draw(crons())
    cron = _cron(expr, zone_name)
    after, until = draw(windows(zone_name, seconds))
    after_ms, through_ms = to_ms(after), to_ms(until)
    edge = draw(st.sampled_from(["none", "after on a tick", "through on a tick"]))
    tick_ms = to_ms(cron.next_after(after))
    if edge != "none" and tick_ms < through_ms:  # a tick inside: the brute force stays short
        if edge == "after on a tick":
            after_ms = tick_ms
        else:
            through_ms = tick_ms
    return expr, zone_name, cron, after_ms, through_ms


# The reference visits every wall-clock second or minute of each range: fewer examples than
# test_cron_properties, which checks the timetables themselves against it.
REFERENCE_SETTINGS = settings(PROPERTY_SETTINGS, max_examples=60)


@REFERENCE_SETTINGS
@given(spec=cron_ranges())
def test_ticks_in_a_range_are_the_reference_fire_times(
    spec: tuple[str, str, Cron, int, int],
) -> None:
    expr, zone_name, cron, after_ms, through_ms = spec
    expected = reference_fire_times(expr, zone_name, from_ms(after_ms), from_ms(through_ms))
    assert list(ticks_in(cron, after_ms, through_ms)) == expected


@REFERENCE_SETTINGS
@given(spec=cron_ranges(), cap=st.integers(0, 40))
def test_count_and_last_tick_agree_with_the_reference(
    spec: tuple[str, str, Cron, int, int], cap: int
) -> None:
    expr, zone_name, cron, after_ms, through_ms = spec
    expected = reference_fire_times(expr, zone_name, from_ms(after_ms), from_ms(through_ms))
    assert count_ticks(cron, after_ms, through_ms) == (len(expected), False)
    assert count_ticks(cron, after_ms, through_ms, cap=cap) == (
        min(cap, len(expected)), len(expected) > cap)
    assert last_tick_in(cron, after_ms, through_ms) == (expected[-1] if expected else None)


SPARSE = ["0 0 29 2 *", "0 0 1 1 *", "30 2 * * 0", "0 12 13 * 5", "15 1 1 */3 *",
          "30 0 0 31 12 *"]


@PROPERTY_SETTINGS
@given(expr=st.sampled_from(SPARSE),
       zone_name=st.sampled_from(["America/New_York", "Australia/Lord_Howe", "UTC"]),
       start_ms=st.integers(to_ms(datetime(2020, 1, 1, tzinfo=UTC)),
                            to_ms(datetime(2030, 1, 1, tzinfo=UTC))),
       length_ms=st.integers(1, 9 * YEAR_MS))
def test_ranges_of_years_with_sparse_ticks_list_what_between_lists(
    expr: str, zone_name: str, start_ms: int, length_ms: int
) -> None:
    """Ranges far longer than a listing step, mostly empty steps: nothing skipped or
    repeated, the newest found however far back it lies."""
    cron = parse_cron(expr, zone_name)
    after_ms, through_ms = start_ms, start_ms + length_ms
    expected = cron.between(from_ms(after_ms), from_ms(through_ms))
    assert list(ticks_in(cron, after_ms, through_ms)) == expected
    assert count_ticks(cron, after_ms, through_ms) == (len(expected), False)
    assert last_tick_in(cron, after_ms, through_ms) == (expected[-1] if expected else None)


def _every_ms(seconds: int, after_ms: int, through_ms: int) -> list[int]:
    """Multiples of the interval since the epoch, in ms, in (after_ms, through_ms]."""
    step = seconds * 1000
    return list(range((after_ms // step + 1) * step, through_ms // step * step + 1, step))


@PROPERTY_SETTINGS
@given(seconds=st.one_of(st.integers(1, 120), st.integers(1, 10**7)),
       after_ms=st.integers(0, 4_000_000_000_000), ticks=st.integers(0, 3_000),
       extra_ms=st.integers(-1_000, 1_000), cap=st.integers(0, 3_000))
def test_every_ranges_hold_the_interval_multiples_since_the_epoch(
    seconds: int, after_ms: int, ticks: int, extra_ms: int, cap: int
) -> None:
    through_ms = max(after_ms + 1, after_ms + ticks * seconds * 1000 + extra_ms)
    every = Every(seconds)
    expected = _every_ms(seconds, after_ms, through_ms)
    assert [to_ms(t) for t in ticks_in(every, after_ms, through_ms)] == expected
    assert count_ticks(every, after_ms, through_ms, cap=cap) == (
        min(cap, len(expected)), len(expected) > cap)
    last = last_tick_in(every, after_ms, through_ms)
    assert (to_ms(last) if last else None) == (expected[-1] if expected else None)


def test_a_range_of_a_century_every_second_is_listed_lazily_and_counted_up_to_the_cap() -> None:
    """3 billion ticks: listing starts at once, counting stops at the cap."""
    every = Every(1)
    after_ms, through_ms = 0, 100 * YEAR_MS
    assert [to_ms(t) for t in islice(ticks_in(every, after_ms, through_ms), 3)] == [
        1000, 2000, 3000]
    assert count_ticks(every, after_ms, through_ms) == (MAX_MISSED_COUNTED, True)
    assert last_tick_in(every, after_ms, through_ms) == from_ms(100 * YEAR_MS)


def test_a_range_ending_on_a_tick_holds_it_and_one_starting_on_it_does_not() -> None:
    cron = parse_cron("*/5 * * * *")
    tick_ms = to_ms(datetime(2026, 3, 8, 7, 5, tzinfo=UTC))
    assert [to_ms(t) for t in ticks_in(cron, tick_ms - 1, tick_ms)] == [tick_ms]
    assert list(ticks_in(cron, tick_ms, tick_ms + 299_999)) == []
    assert count_ticks(cron, tick_ms - 300_000, tick_ms) == (1, False)
    assert last_tick_in(cron, tick_ms, tick_ms + 300_000) == from_ms(tick_ms + 300_000)
    assert last_tick_in(cron, tick_ms, tick_ms) is None


# ---------------------------------------------------------------- Range.clip


def test_clip_keeps_the_ticks_at_or_after_since_and_at_or_before_until() -> None:
    """A tick exactly at `since` or at `until` stays in; one a millisecond outside does
    not; what is left is None when nothing of the range is in scope."""
    every = Every(1)
    r = Range(10_000, 20_000, "window")

    def kept(since_ms: int | None, until_ms: int | None) -> list[int]:
        part = r.clip(since_ms, until_ms)
        if part is None:
            return []
        assert part.reason == "window"
        assert r.after_ms <= part.after_ms < part.through_ms <= r.through_ms
        return [to_ms(t) for t in ticks_in(every, part.after_ms, part.through_ms)]

    assert r.clip(None, None) == r
    assert kept(None, None) == list(range(11_000, 20_001, 1000))
    assert kept(15_000, None) == list(range(15_000, 20_001, 1000))
    assert kept(15_001, None) == list(range(16_000, 20_001, 1000))
    assert kept(None, 15_000) == list(range(11_000, 15_001, 1000))
    assert kept(None, 14_999) == list(range(11_000, 14_001, 1000))
    assert kept(15_000, 15_000) == [15_000]
    assert kept(20_000, None) == [20_000]
    assert kept(None, 11_000) == [11_000]
    assert kept(0, 99_999) == kept(None, None)
    for since, until in [(20_001, None), (None, 10_000), (None, 0), (16_000, 15_000),
                         (15_500, 15_600)]:
        assert kept(since, until) == [], (since, until)
    for since, until in [(20_001, None), (None, 10_000), (16_000, 15_000)]:
        assert r.clip(since, until) is None, (since, until)


@PROPERTY_SETTINGS
@given(after=st.integers(0, 10**6), length=st.integers(1, 10**6),
       since=st.none() | st.integers(-10, 2 * 10**6), until=st.none() | st.integers(-10, 2 * 10**6))
def test_clip_is_the_range_intersected_with_the_scope(
    after: int, length: int, since: int | None, until: int | None
) -> None:
    """Every millisecond instant of (after, through] is in the clipped range exactly when
    it is at or after `since` and at or before `until` (checked at the edges)."""
    r = Range(after, after + length, "policy")
    part = r.clip(since, until)

    def scoped(t: int) -> bool:
        return ((since is None or t >= since) and (until is None or t <= until)
                and after < t <= after + length)

    candidates = {after, after + 1, after + length, after + length + 1}
    candidates |= {v + d for v in (since, until) if v is not None for d in (-1, 0, 1)}
    for t in candidates:
        inside = part is not None and part.after_ms < t <= part.through_ms
        assert inside == scoped(t), t


# ---------------------------------------------------------------- parsing


def test_a_record_reads_as_its_ranges_in_order() -> None:
    assert parse_ranges("") == []
    assert parse_ranges("1000 5000 window\n5000 9000 policy") == [
        Range(1000, 5000, "window"), Range(5000, 9000, "policy")]


@pytest.mark.parametrize("text", [
    "1000 5000", "1000 5000 window extra", "1000  5000 window", "x 5000 window",
    "1000 5.5 window", "1000 5000 window\ngarbage", "1000\t5000\twindow", " 1000 5000 window",
    "1000 5000 bogus", "1000 5000 WINDOW", "1000 5000 ",
])
def test_a_garbled_record_is_refused_with_value_error(text: str) -> None:
    """Anything but "AFTER THROUGH REASON" lines, REASON window or policy, is refused, not
    read as ranges a listing or a backfill would then act on."""
    with pytest.raises(ValueError):
        parse_ranges(text)


def test_a_history_reads_as_its_pushes_with_tick_jids_derived() -> None:
    """Entries KIND TICK DELAY [JID], DELAY the push instant less the tick in ms (negative
    for a job placed ahead in the schedule set); only a manual run's jid is stored."""
    tick_ms, when_ms = 1_700_000_000_000, 1_700_000_000_250
    manual = "manual" + "ab" * 9
    blob = history_bytes([("t", tick_ms, -4000, ""), ("b", tick_ms, 250, ""),
                          ("m", when_ms, 3, manual)])
    pushes = progress.decode_history("nightly", blob)
    assert [(p.kind, to_ms(p.tick), p.jid, to_ms(p.when)) for p in pushes] == [
        ("manual", when_ms, manual, when_ms + 3),
        ("backfill", tick_ms, jid_ms("nightly", tick_ms), when_ms),
        ("tick", tick_ms, jid_ms("nightly", tick_ms), tick_ms - 4000)]
    assert progress.decode_history("nightly", b"") == []
    assert progress.decode_history("nightly", blob, 1) == pushes[:1]
    assert pushes[1].as_dict() == {"kind": "backfill", "tick": from_ms(tick_ms).isoformat(),
                                   "jid": jid_ms("nightly", tick_ms),
                                   "when": from_ms(when_ms).isoformat()}
    assert "backfill" in pushes[1].line() and pushes[1].jid in pushes[1].line()


def _history(newest_ms: int, *entries: bytes) -> bytes:
    """A history part by hand: NEWEST, COUNT, the entries (docs/store.md "Encodings")."""
    return newest_ms.to_bytes(6, "big") + bytes([len(entries)]) + b"".join(entries)


NOW_MS = 1_700_000_000_000
GARBLED_HISTORIES = {
    "cut short": _history(NOW_MS, b"\x00")[:-1] + b"\x80",
    "fewer entries than its count": _history(NOW_MS, b"\x00\x00")[:-2],
    "a tick past the year 9999": _history(2**48 - 1, b"\x00\x00"),
    "pushed before 1970": _history(0, b"\x00\x01"),
    "an older tick before 1970": _history(5, b"\x00\x00", b"\xc0\x01\x00"),  # D 6 ms
    "a manual jid with a space": _history(NOW_MS, b"\x02\x00\x03a b"),
    "a manual jid with a line break": _history(NOW_MS, b"\x02\x00\x03a\nb"),
}


@pytest.mark.parametrize("what", sorted(GARBLED_HISTORIES))
def test_a_garbled_history_is_refused_with_value_error(what: str) -> None:
    with pytest.raises(ValueError):
        progress.decode_history("nightly", GARBLED_HISTORIES[what])


def test_reading_the_newest_push_only_passes_over_an_older_garbled_one() -> None:
    """The console's last push (`limit` 1) reads the newest entry; the older ones are walked
    (a history cut short is refused whatever the limit), not read."""
    blob = GARBLED_HISTORIES["an older tick before 1970"]  # the newest at 5 ms, then -1
    with pytest.raises(ValueError):
        progress.decode_history("nightly", blob)
    (newest,) = progress.decode_history("nightly", blob, 1)
    assert (newest.kind, to_ms(newest.tick), to_ms(newest.when)) == ("tick", 5, 5)
    with pytest.raises(ValueError):
        progress.decode_history("nightly", GARBLED_HISTORIES["cut short"], 1)


def test_a_listing_step_boundary_inside_a_dst_gap_loses_no_tick() -> None:
    """New York's spring-forward night, every minute: ticks on both sides of the skipped
    hour, listed across several steps, are exactly those of `between`."""
    cron = parse_cron("* * * * *", "America/New_York")
    after = datetime(2026, 3, 8, 5, 30, tzinfo=UTC)
    through = after + timedelta(hours=3, seconds=30)
    expected = cron.between(after, through)
    assert len(expected) == 180
    assert list(ticks_in(cron, to_ms(after), to_ms(through))) == expected


@pytest.mark.parametrize("expr", SPARSE)
def test_ranges_up_to_the_last_instant_a_person_gives_list_what_between_lists(
    expr: str,
) -> None:
    """A range ending at the last instant a person may give (`report --until`, a record
    written by hand): its ticks are listed and counted; a next tick past the year 9999 ends
    the listing (it raised "year 10000 is out of range" from the search for it)."""
    cron = parse_cron(expr)  # UTC: a zone's changes are not found past 9999 (zones.py)
    through_ms = to_ms(LAST_INSTANT)
    after_ms = through_ms - 3 * YEAR_MS
    expected = cron.between(from_ms(after_ms), from_ms(through_ms))
    assert list(ticks_in(cron, after_ms, through_ms)) == expected
    assert count_ticks(cron, after_ms, through_ms) == (len(expected), False)
    assert last_tick_in(cron, after_ms, through_ms) == (expected[-1] if expected else None)
