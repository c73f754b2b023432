"""Hypothesis strategies for cron expressions and the windows around real DST transitions
that the cron property tests (test_cron_properties, test_records, test_describe) draw from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from kiqbeat.core.dst import REPEATED, SKIPPED, DstPolicy

from .cron_reference import DAYS, MONTHS

ZONES = [
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Chatham",
    "America/St_Johns",
    "Asia/Kolkata",
    "UTC",
]


PROPERTY_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@cache
def transitions(zone_name: str) -> tuple[datetime, ...]:
    """Instants (to the minute) where the zone's UTC offset changes, 2020-2035."""
    tz = ZoneInfo(zone_name)
    found = []
    day = datetime(2020, 1, 1, tzinfo=UTC)
    end = datetime(2036, 1, 1, tzinfo=UTC)
    previous = day.astimezone(tz).utcoffset()
    while day < end:
        nxt = day + timedelta(days=1)
        offset = nxt.astimezone(tz).utcoffset()
        if offset != previous:
            lo, hi = day, nxt
            while hi - lo > timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(tz).utcoffset() == previous:
                    lo = mid
                else:
                    hi = mid
            found.append(hi.replace(second=0, microsecond=0))
        day, previous = nxt, offset
    return tuple(found)


def cron_field(
    low: int, high: int, names: list[str] | None = None, *, n_slash_s: bool = True
) -> st.SearchStrategy[str]:
    """One cron field's text: values in [low, high] (or `names`), ranges, steps, lists."""

    def number(v: int) -> str:
        if names and v - low < len(names):
            return names[v - low] if v % 2 else names[v - low].upper()
        return str(v)

    value = st.integers(low, high)
    step = st.integers(1, max(2, (high - low) // 2))
    forms = [
        st.just("*"),
        st.builds(lambda s: f"*/{s}", step),
        st.builds(number, value),
        st.builds(lambda a, b: f"{number(a)}-{number(b)}", value, value),
        st.builds(lambda a, b, s: f"{a}-{b}/{s}", value, value, step),
    ]
    if n_slash_s:
        forms.append(st.builds(lambda a, s: f"{a}/{s}", value, step))
    item = st.one_of(*forms)
    return st.lists(item, min_size=1, max_size=3).map(",".join)


# Day-of-week accepts 7 (Sunday again); names only cover 0-6; N/S is refused there.
SECOND = cron_field(0, 59)


MINUTE = st.one_of(st.sampled_from(["0", "30", "*", "*/15", "0,30"]), cron_field(0, 59))


HOUR = st.one_of(st.sampled_from(["*", "1", "2", "0", "23", "1-3"]), cron_field(0, 23))


# Day fields are mostly open (one_of picks each branch equally often), so windows see ticks.
STAR = st.sampled_from(["*", "*", "*", "*/2"])


_FROM_END = st.integers(1, 31).map(lambda n: "L" if n == 1 else f"-{n}")


_END_ITEM = st.one_of(
    st.sampled_from(["L", "l", "last", "-2", "-7-L", "1-L", "28-L", "-1--3", "-10--1/3"]),
    _FROM_END,
    st.builds(lambda a, b, s: f"{a}-{b}/{s}", _FROM_END, _FROM_END, st.integers(1, 9)),
    st.builds(lambda a, s: f"{a}-L/{s}", st.integers(1, 31), st.integers(1, 9)),
)


# fugit's forms counted from the month's end, alone or in lists with plain items.
END_DOM = st.lists(st.one_of(_END_ITEM, _END_ITEM, cron_field(1, 31)), min_size=1, max_size=3
                   ).map(",".join)


_NTH_ITEM = st.builds(lambda d, n, named: f"{DAYS[d % 7] if named else d}#{n}",
                      st.integers(0, 7), st.sampled_from(["1", "2", "3", "4", "5", "-1", "-2",
                                                           "-5", "L", "last"]), st.booleans())


NTH_DOW = st.lists(st.one_of(_NTH_ITEM, _NTH_ITEM, cron_field(0, 7, DAYS, n_slash_s=False)),
                   min_size=1, max_size=3).map(",".join)


AND = st.sampled_from(["", "", "", "&"])  # fugit's '&': both day fields must match


DOM = st.one_of(STAR, STAR, STAR, cron_field(1, 31), END_DOM)


MONTH = st.one_of(STAR, STAR, STAR, cron_field(1, 12, MONTHS))


DOW = st.one_of(STAR, STAR, cron_field(0, 7, DAYS, n_slash_s=False), NTH_DOW)


@st.composite
def crons(draw: st.DrawFn) -> tuple[str, str, bool]:
    """(expression, zone, has_seconds) with mostly-open day fields, so windows see ticks."""
    zone_name = draw(st.sampled_from(ZONES))
    seconds = draw(st.integers(0, 4)) == 0
    fields = [draw(MINUTE), draw(HOUR), draw(DOM) + draw(AND), draw(MONTH),
              draw(DOW) + draw(AND)]
    if seconds:
        fields.insert(0, draw(SECOND))
    return " ".join(fields), zone_name, seconds


# The end of time (DESIGN §3: no tick past 9999-12-31T23:59:59Z, nor at a wall time past
# 9999-12-31T23:59:59 local) and the turn of the year before it, where a zone's offset
# changes of the year 9999 are first looked up: one window in eight is drawn near one.
END_OF_TIME = datetime.max.replace(tzinfo=UTC)
YEAR_ENDS = (datetime(9999, 1, 1, tzinfo=UTC), END_OF_TIME)


@st.composite
def windows(draw: st.DrawFn, zone_name: str, seconds: bool) -> tuple[datetime, datetime]:
    """An interval (after, until] placed near a real offset change of the zone, or near the
    end of time (until at most END_OF_TIME)."""
    changes = transitions(zone_name)
    reach_s = 2 * 3600 if seconds else 30 * 3600
    near_end = draw(st.integers(0, 7)) == 0
    if near_end:
        anchor = draw(st.sampled_from(YEAR_ENDS)) - timedelta(seconds=reach_s // 2)
    elif changes:
        anchor = draw(st.sampled_from(changes))
    else:
        anchor = datetime(2020, 1, 1, tzinfo=UTC) + timedelta(days=draw(st.integers(0, 5800)))
    after = anchor + timedelta(seconds=draw(st.integers(-reach_s, reach_s // 2)))
    after = min(after, END_OF_TIME - timedelta(seconds=1))  # a window, not the last instant
    after += timedelta(microseconds=draw(st.sampled_from([0, 0, 1, 500_000])))
    # Hypothesis favours small integers; a drawn scale keeps long windows common too.
    scale_s = draw(st.sampled_from([reach_s // 1000, reach_s // 4, reach_s, reach_s]))
    length_s = scale_s * draw(st.integers(1, 100)) // 100 + draw(st.integers(0, 59))
    length = min(timedelta(seconds=length_s), END_OF_TIME - after)
    return after, after + length


POLICIES = st.builds(DstPolicy, st.sampled_from(REPEATED), st.sampled_from(SKIPPED))
