"""A schedule's life as pure rules: bounds, exclusions, one-shots, jitter, run limits, skips."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from hashlib import blake2b
from itertools import pairwise
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from kiqbeat.core.cron import Every, parse_cron
from kiqbeat.core.instants import ENDED_MS
from kiqbeat.core.lifecycle import (
    ENDED,
    Bounded,
    OneShot,
    jitter_offset_ms,
    runs_left,
    shortest_period_s,
    upcoming,
)
from kiqbeat.core.limits import MAX_PLANNABLE_MS
from kiqbeat.core.plan import to_ms
from kiqbeat.core.schedule import Schedule
from tests.support.life import Fate, Ledger, fates

T0 = datetime(2026, 3, 1, tzinfo=UTC)
PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


# ---------------------------------------------------------------------------- ended


def test_ended_is_scored_at_the_last_plannable_instant_which_no_tick_can_be() -> None:
    assert to_ms(ENDED) == ENDED_MS == MAX_PLANNABLE_MS
    assert ENDED_MS % 1000 != 0  # ticks are whole seconds: none scores there


# ---------------------------------------------------------------------------- start / end


def test_no_tick_before_start_at_or_after_end_at_and_both_bounds_are_inclusive() -> None:
    hourly = Bounded(parse_cron("0 * * * *"), start=utc("2026-03-01T10:00:00Z"),
                     end=utc("2026-03-01T13:00:00Z"))
    assert hourly.between(T0, T0 + timedelta(days=1)) == [
        utc(f"2026-03-01T{h}:00:00Z") for h in (10, 11, 12, 13)]
    assert hourly.next_after(T0) == utc("2026-03-01T10:00:00Z")
    assert hourly.next_after(utc("2026-03-01T12:59:59Z")) == utc("2026-03-01T13:00:00Z")


def test_a_start_between_seconds_excludes_the_tick_just_before_it() -> None:
    every_second = Bounded(Every(1), start=utc("2026-03-01T10:00:00.500000Z"))
    assert every_second.next_after(T0) == utc("2026-03-01T10:00:01Z")
    assert every_second.between(T0, utc("2026-03-01T10:00:02Z")) == [
        utc("2026-03-01T10:00:01Z"), utc("2026-03-01T10:00:02Z")]


def test_past_its_end_a_schedule_answers_ended() -> None:
    hourly = Bounded(parse_cron("0 * * * *"), end=utc("2026-03-01T13:30:00Z"))
    assert hourly.next_after(utc("2026-03-01T13:00:00Z")) is ENDED
    assert hourly.between(utc("2026-03-01T13:00:00Z"), utc("2027-01-01T00:00:00Z")) == []


def test_a_cron_that_never_fires_again_within_its_end_is_ended_not_an_error() -> None:
    leap_monday = Bounded(parse_cron("0 0 29 2 1"), end=utc("2027-01-01T00:00:00Z"))
    assert leap_monday.next_after(T0) is ENDED


# ---------------------------------------------------------------------------- exclusions


def test_excluded_dates_are_read_in_the_schedules_zone() -> None:
    # 00:30 in Paris on the 25th is 23:30 UTC on the 24th: excluded all the same.
    cron = parse_cron("30 0,23 * * *", "Europe/Paris")
    christmas = Bounded(cron, excluded=frozenset({date(2026, 12, 25)}),
                        dates_zone="Europe/Paris")
    ticks = christmas.between(utc("2026-12-24T00:00:00Z"), utc("2026-12-26T12:00:00Z"))
    assert [t.astimezone(PARIS).strftime("%d %H:%M") for t in ticks] == [
        "24 23:30", "26 00:30"]


def test_a_whole_excluded_day_is_stepped_over_at_once() -> None:
    every_second = Bounded(parse_cron("* * * * * *"), excluded=frozenset(
        {date(2026, 3, 2), date(2026, 3, 3)}))
    assert every_second.next_after(utc("2026-03-01T23:59:59Z")) == utc("2026-03-04T00:00:00Z")


def test_an_excluded_dst_day_is_excluded_whole_in_local_time() -> None:
    # 2026-03-08 is 23 hours long in New York; its last tick and the next day's first stand.
    cron = parse_cron("0 * * * *", "America/New_York")
    day = Bounded(cron, excluded=frozenset({date(2026, 3, 8)}), dates_zone="America/New_York")
    after = datetime(2026, 3, 7, 23, 0, tzinfo=NEW_YORK)
    nxt = day.next_after(after)
    assert nxt.astimezone(NEW_YORK) == datetime(2026, 3, 9, 0, 0, tzinfo=NEW_YORK)
    assert day.between(after, nxt) == [nxt]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["*/7 * * * *", "0 2 * * *", "30 1 * * 0", "*/20 * * * * *"]),
       st.sampled_from(["UTC", "Europe/London", "America/New_York", "Australia/Lord_Howe"]),
       st.sets(st.dates(date(2026, 1, 1), date(2026, 12, 31)), max_size=40),
       st.integers(0, 350 * 86_400),
       st.integers(1, 3 * 86_400), st.integers(1, 3 * 86_400))
def test_bounded_ticks_over_two_spans_equal_the_ticks_over_their_union_and_next_after_agrees(
        expr: str, zone_name: str, excluded: set[date], start_s: int, first_s: int,
        second_s: int) -> None:
    a = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=start_s)
    timetable = Bounded(parse_cron(expr, zone_name), start=a + timedelta(hours=5),
                        excluded=frozenset(excluded), dates_zone=zone_name)
    b, c = a + timedelta(seconds=first_s), a + timedelta(seconds=first_s + second_s)
    ticks = timetable.between(a, c)
    assert timetable.between(a, b) + timetable.between(b, c) == ticks
    assert not any(t.astimezone(ZoneInfo(zone_name)).date() in excluded for t in ticks)
    if ticks:
        assert timetable.next_after(a) == ticks[0]
        assert all(timetable.next_after(x) == y for x, y in pairwise(ticks))


# ---------------------------------------------------------------------------- one-shot


def test_a_one_shot_has_one_tick_then_ends() -> None:
    once = OneShot(utc("2026-03-01T17:00:00+01:00"))
    assert once.next_after(T0) == utc("2026-03-01T16:00:00Z")
    assert once.between(T0, T0 + timedelta(days=1)) == [utc("2026-03-01T16:00:00Z")]
    assert once.next_after(utc("2026-03-01T16:00:00Z")) is ENDED
    assert once.between(utc("2026-03-01T16:00:00Z"), T0 + timedelta(days=9)) == []
    assert once.key != OneShot(utc("2026-03-01T17:00:01+01:00")).key


# ---------------------------------------------------------------------------- jitter


@given(st.text(min_size=1, max_size=40), st.integers(0, 2**43), st.integers(1, 86_400_000))
def test_jitter_offsets_are_within_the_window_and_the_same_every_time(
        name: str, tick_ms: int, jitter_ms: int) -> None:
    offset = jitter_offset_ms(name, tick_ms, jitter_ms)
    assert 0 <= offset < jitter_ms
    assert jitter_offset_ms(name, tick_ms, jitter_ms) == offset


def test_no_jitter_is_no_offset() -> None:
    assert jitter_offset_ms("a", 1000, 0) == 0


def test_jitter_offsets_are_pinned_so_other_languages_can_compute_them() -> None:
    # blake2b(name NUL tick_ms, 8 bytes, person "kiqbeat-jitter"), big-endian, times the
    # window, shifted right 64 bits; at most MAX_PLANNABLE_MS - tick_ms.
    assert [jitter_offset_ms("report", 1_772_352_000_000, 300_000),
            jitter_offset_ms("tenant:42", 1_772_352_000_000, 3_600_000)] == [8_116, 3_486_372]


@given(st.text(min_size=1, max_size=40), st.integers(0, 86_400), st.integers(1, 86_400_000))
def test_a_jittered_tick_of_the_last_day_is_delivered_by_the_last_instant_kiqbeat_plans(
        name: str, before_end_s: int, jitter_ms: int) -> None:
    tick_ms = MAX_PLANNABLE_MS - 999 - before_end_s * 1000  # a whole second of 9999-12-31
    offset = jitter_offset_ms(name, tick_ms, jitter_ms)
    assert 0 <= offset < jitter_ms and tick_ms + offset <= MAX_PLANNABLE_MS
    if tick_ms + jitter_ms <= MAX_PLANNABLE_MS:  # the window fits: the hash's own offset
        assert offset == (int.from_bytes(blake2b(
            f"{name}\x00{tick_ms}".encode(), digest_size=8, person=b"kiqbeat-jitter"
        ).digest(), "big") * jitter_ms) >> 64


def test_a_preview_with_jitter_lists_the_last_ticks_and_their_deliveries() -> None:
    """`next` on a jittered schedule of the last days once ended in 'date value out of
    range' (delivery past 9999); the ticks run to the end, delivered by then."""
    for expr, zone_name in (("59 59 23 * * *", "UTC"), ("0 23 * * *", "Asia/Tokyo")):
        schedule = Schedule(name="late", timetable=parse_cron(expr, zone_name),
                            job_class="W", jitter_s=43_200)
        lines = upcoming(schedule, datetime(9999, 12, 28, tzinfo=UTC), count=10)
        assert [u.tick.day for u in lines] == [28, 29, 30, 31][-len(lines):]
        assert all(u.delivery is not None and u.tick <= u.delivery < ENDED for u in lines)


def test_ten_thousand_tenants_on_one_tick_spread_evenly_over_the_window() -> None:
    buckets = Counter(jitter_offset_ms(f"tenant:{i}", 1_772_352_000_000, 60_000) // 6_000
                      for i in range(10_000))
    # Ten buckets of 1,000 expected; chi-square with 9 degrees of freedom, p = 0.001: 27.9.
    chi_square = sum((n - 1_000) ** 2 / 1_000 for n in buckets.values())
    assert len(buckets) == 10 and chi_square < 27.9


def test_a_schedules_shortest_period_bounds_its_jitter() -> None:
    assert shortest_period_s(parse_cron("*/15 * * * *")) == 900
    assert shortest_period_s(parse_cron("0 9,17 * * *")) == 8 * 3600
    assert shortest_period_s(parse_cron("55 23 * * *")) == 86_400
    assert shortest_period_s(parse_cron("0 9 * * 1")) is None  # weekly: more than a day
    assert shortest_period_s(parse_cron("*/10 * * * * *")) == 10
    assert shortest_period_s(Every(90)) == 90
    assert shortest_period_s(OneShot(T0)) is None
    assert shortest_period_s(Bounded(parse_cron("0 * * * *"), end=T0)) == 3600


# ---------------------------------------------------------------------------- run limits, skips


def test_runs_left_counts_down_to_zero() -> None:
    assert runs_left(None, 7) is None
    assert runs_left(5, 3) == 2
    assert runs_left(5, 9) == 0


def test_fates_apply_skips_then_the_run_limit_and_overlap_pushes_one_a_group() -> None:
    assert fates(4, runs=3, max_runs=5) == [Fate.PUSH, Fate.PUSH, Fate.LIMIT, Fate.LIMIT]
    assert fates(3, skips=1, max_runs=1) == [Fate.SKIPPED, Fate.PUSH, Fate.LIMIT]
    assert fates(3, overlap_busy=False) == [Fate.PUSH, Fate.OVERLAP, Fate.OVERLAP]
    assert fates(2, overlap_busy=True) == [Fate.OVERLAP, Fate.OVERLAP]
    assert fates(2) == [Fate.PUSH, Fate.PUSH]


def test_buffer_one_holds_the_first_tick_that_finds_a_job_waiting_and_no_more() -> None:
    # Push, then hold the next (due while the job just pushed waits), skip the rest.
    assert fates(4, overlap_busy=False, buffer_one=True) == [
        Fate.PUSH, Fate.HELD, Fate.OVERLAP, Fate.OVERLAP]
    assert fates(2, overlap_busy=True, buffer_one=True) == [Fate.HELD, Fate.OVERLAP]
    # One held already (its job still waiting): every new tick is skipped.
    assert fates(2, overlap_busy=True, buffer_one=True, holding=True) == [
        Fate.OVERLAP, Fate.OVERLAP]
    # A held tick is a run: with one run left, nothing more is held or pushed after it.
    assert fates(3, overlap_busy=True, buffer_one=True, runs=4, max_runs=5) == [
        Fate.HELD, Fate.LIMIT, Fate.LIMIT]


@settings(max_examples=200)
@given(st.integers(1, 8), st.integers(0, 3),
       st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=12))
def test_max_runs_is_never_exceeded_under_any_interleaving_of_racing_invocations(
        max_runs: int, skips: int, offers: list[tuple[int, int]]) -> None:
    # Each invocation planned its group from whatever mark it read: some span of ticks,
    # stale or fresh; the push steps run one at a time (atomic), in any order.
    ledger = Ledger(skips=skips)
    pushed: list[int] = []
    for lo, hi in offers:
        ledger, done = ledger.step(list(range(min(lo, hi) + 1, max(lo, hi) + 1)),
                                   max_runs=max_runs)
        pushed += done
    assert len(pushed) == len(set(pushed)) <= max_runs
    assert pushed == sorted(pushed)
    assert ledger.runs == len(pushed)
    # What was pushed is exactly the ticks after the skipped ones, up to the limit.
    offered = sorted({t for lo, hi in offers for t in range(min(lo, hi) + 1, max(lo, hi) + 1)
                      if t <= ledger.watermark_ms})
    assert set(pushed) <= set(offered)


def test_changing_max_runs_keeps_the_count() -> None:
    ledger, pushed = Ledger().step([1, 2, 3], max_runs=2)
    assert pushed == [1, 2] and ledger.runs == 2
    ledger, pushed = ledger.step([4, 5, 6], max_runs=4)
    assert pushed == [4, 5] and ledger.runs == 4


# ---------------------------------------------------------------------------- preview


_PREVIEWED = {Fate.PUSH: "", Fate.SKIPPED: "skipped", Fate.LIMIT: "run limit"}


@settings(max_examples=200)
@given(st.integers(1, 12), st.integers(0, 6), st.none() | st.integers(1, 8),
       st.integers(0, 6), st.integers(0, 4))
def test_a_preview_withholds_what_the_push_step_would_and_a_pause_uses_no_skip(
        count: int, runs: int, max_runs: int | None, skips: int, paused: int) -> None:
    hourly = Schedule("h", parse_cron("0 * * * *"), "W", max_runs=max_runs)
    through = T0 + timedelta(hours=paused) if paused else None
    lines = upcoming(hourly, T0, count=count, runs=runs, skips=skips, paused_through=through)
    assert [line.fate for line in lines[:paused]] == ["paused"] * min(paused, len(lines))
    rest = [line.fate for line in lines[paused:]]
    expected = [_PREVIEWED[f] for f in fates(max(0, count - paused), runs=runs,
                                             max_runs=max_runs, skips=skips)]
    if "run limit" in expected:  # the list ends at the run limit
        expected = expected[:expected.index("run limit") + 1]
    assert rest == expected
    assert [line.tick for line in lines] == [T0 + timedelta(hours=h + 1)
                                             for h in range(len(lines))]


def test_a_pause_without_end_passes_over_every_tick_previewed() -> None:
    hourly = Schedule("h", parse_cron("0 * * * *"), "W", max_runs=1)
    lines = upcoming(hourly, T0, count=3, skips=1, paused_through=ENDED)
    assert [(line.fate, line.note) for line in lines] == [("paused", "until resumed")] * 3
