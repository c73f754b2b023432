"""Properties of fire times, checked on random expressions around real DST transitions,
under each DST policy (`dst:` first/last/both x shift/skip, core/dst.py).

The central one (STYLE): ticks over (a, b] plus ticks over (b, c] equal ticks over (a, c].
The strongest: agreement with `cron_reference`, a brute-force reading of DESIGN §3 that
visits every wall-clock minute (or second) and shares no code with kiqbeat.core.cron.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

from hypothesis import assume, given
from hypothesis import strategies as st

from kiqbeat.core.cron import Cron, parse_cron
from kiqbeat.core.dst import CRON, DstPolicy
from kiqbeat.errors import ConfigError

from .cron_reference import DAYS, ReferenceCron, reference_fire_times
from .cron_strategies import (
    AND,
    END_DOM,
    END_OF_TIME,
    NTH_DOW,
    POLICIES,
    PROPERTY_SETTINGS,
    STAR,
    cron_field,
    crons,
    transitions,
    windows,
)


def test_the_chosen_zones_really_change_offset_in_the_test_years() -> None:
    assert len(transitions("America/New_York")) == 32
    assert len(transitions("Australia/Lord_Howe")) == 32
    assert transitions("Asia/Kolkata") == ()


# ---------------------------------------------------------------- expressions


def _parse(expr: str, zone_name: str, policy: DstPolicy = CRON) -> Cron:
    try:
        return parse_cron(expr, zone_name, policy)
    except ConfigError:
        assume(False)  # e.g. a day that no chosen month has: rejected, not a fire time
        raise


# ---------------------------------------------------------------- properties


@PROPERTY_SETTINGS
@given(data=st.data(), spec=crons())
def test_fire_times_agree_with_the_brute_force_reference(
    data: st.DataObject, spec: tuple[str, str, bool]
) -> None:
    expr, zone_name, seconds = spec
    policy = data.draw(POLICIES)
    cron = _parse(expr, zone_name, policy)
    after, until = data.draw(windows(zone_name, seconds))
    assert cron.between(after, until) == reference_fire_times(
        expr, zone_name, after, until, policy.repeated, policy.skipped)


@PROPERTY_SETTINGS
@given(data=st.data(), spec=crons())
def test_consecutive_windows_add_up(data: st.DataObject, spec: tuple[str, str, bool]) -> None:
    expr, zone_name, seconds = spec
    cron = _parse(expr, zone_name, data.draw(POLICIES))
    a, c = data.draw(windows(zone_name, seconds))
    b = a + (c - a) * data.draw(st.floats(0, 1))
    assert cron.between(a, b) + cron.between(b, c) == cron.between(a, c)


@PROPERTY_SETTINGS
@given(data=st.data(), spec=crons())
def test_ticks_are_ascending_unique_utc_and_inside_the_window(
    data: st.DataObject, spec: tuple[str, str, bool]
) -> None:
    expr, zone_name, seconds = spec
    cron = _parse(expr, zone_name, data.draw(POLICIES))
    after, until = data.draw(windows(zone_name, seconds))
    ticks = cron.between(after, until)
    assert all(x < y for x, y in pairwise(ticks))
    assert all(after < t <= until and t.tzinfo is UTC and t.microsecond == 0 for t in ticks)


@PROPERTY_SETTINGS
@given(data=st.data(), spec=crons())
def test_next_after_is_the_first_tick_of_between(
    data: st.DataObject, spec: tuple[str, str, bool]
) -> None:
    expr, zone_name, seconds = spec
    cron = _parse(expr, zone_name, data.draw(POLICIES))
    after, until = data.draw(windows(zone_name, seconds))
    first = cron.next_after(after)
    assert first > after
    if first == END_OF_TIME:  # no tick left before the end of time (DESIGN §3)
        assert cron.between(after, END_OF_TIME) == []
        return
    # Nothing fires in (after, first) and `first` fires: between(after, far)[0] == first.
    assert cron.between(after, first) == [first]
    ticks = cron.between(after, until)
    if ticks:
        assert ticks[0] == first


@PROPERTY_SETTINGS
@given(data=st.data(), spec=crons())
def test_what_a_policy_fires_and_leaves_unfired_is_what_both_and_shift_fire(
    data: st.DataObject, spec: tuple[str, str, bool]
) -> None:
    # `dst_withheld` (what `next` and the console show as not fired) is exactly what the
    # policy leaves out of the widest reading: every pass of a repeated time, every gap's end.
    expr, zone_name, seconds = spec
    policy = data.draw(POLICIES)
    cron = _parse(expr, zone_name, policy)
    after, until = data.draw(windows(zone_name, seconds))
    widest = parse_cron(expr, zone_name, DstPolicy("both", "shift")).between(after, until)
    withheld = [t for t, _ in cron.dst_withheld(after, until)]
    assert sorted(set(cron.between(after, until)) | set(withheld)) == widest
    assert not set(withheld) & set(cron.between(after, until))


@PROPERTY_SETTINGS
@given(dom=st.one_of(cron_field(1, 31), END_DOM), dow=st.one_of(STAR, NTH_DOW, cron_field(
    0, 7, DAYS, n_slash_s=False)), both=AND, month=st.integers(1, 12),
       year=st.integers(1990, 2040))
def test_the_day_fields_agree_with_the_reference_on_every_day_of_a_month(
    dom: str, dow: str, both: str, month: int, year: int
) -> None:
    """L, -N, day#n and '&' on whole months (a window near a DST change sees few days).

    The reference's own test of an instant (`ReferenceCron.matches`) on each day's noon: the
    one wall time the fixed minute and hour fields allow (visiting every minute of the month,
    as `reference_fire_times` does, cost ~0.13 s an example for the same answer)."""
    expr = f"0 12 {dom}{both} {month} {dow}"
    cron = _parse(expr, "UTC")
    after = datetime(year, month, 1, tzinfo=UTC) - timedelta(seconds=1)
    until = after + timedelta(days=31)
    reference = ReferenceCron(expr)
    noons = (datetime(year, month, 1, 12, tzinfo=UTC) + timedelta(days=d) for d in range(31))
    assert cron.between(after, until) == [
        noon for noon in noons if reference.matches(noon.replace(tzinfo=None))]
