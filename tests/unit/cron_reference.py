"""A slow, obviously-correct reading of DESIGN §3, to check kiqbeat.core.cron against.

It shares no code with kiqbeat.core.cron: each field item is tested against a value by plain
arithmetic (never expanded into sets), every minute (or second) of local wall time is
visited one by one, and wall times are mapped to instants with zoneinfo's `fold` and a
round trip, the gap's end found by stepping minute by minute.

The day fields also read fugit's forms: `L`/`last` and `-N` (counted from the month's end),
their ranges (wrapping from -1 to -31), `N-L`, `day#n` and a trailing `&` (both day fields
required); days are matched on (day, weekday, length of the month), by counting.
"""

from __future__ import annotations

import re
from calendar import monthrange
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# (low, high, names) per field; day of week is matched on 0-6 with 7 read as 0.
LIMITS = [(0, 59, []), (0, 59, []), (0, 23, []), (1, 31, []), (1, 12, MONTHS), (0, 6, DAYS)]

Matcher = Callable[[int], bool]


def _number(text: str, names: list[str], low: int) -> int:
    text = text.lower()
    return names.index(text) + low if text in names else int(text)


def _item_matcher(item: str, low: int, high: int, names: list[str], dow: bool) -> Matcher:
    base, _, step_text = item.partition("/")
    step = int(step_text) if step_text else 1
    if base == "*":
        return lambda v: (v - low) % step == 0
    if "-" in base:
        a_text, b_text = base.split("-")
        a, b = _number(a_text, names, low), _number(b_text, names, low)
    else:
        a = _number(base, names, low)
        if dow and step_text:
            raise ValueError(f"day-of-week {item!r}: kiqbeat refuses N/S here")
        b = high if step_text else a
    if dow and a == 7:
        a = 0
        b = 0 if b == 7 else b
    if a <= b:
        if dow and b == 7:
            # 7 is Sunday again: the sequence a, a+s, ... may land on 7.
            return lambda v: (
                (a <= v <= b and (v - a) % step == 0) or (v == 0 and (7 - a) % step == 0)
            )
        return lambda v: a <= v <= b and (v - a) % step == 0
    cycle = high - low + 1

    def wrapped(v: int) -> bool:
        if not (v >= a or v <= b):
            return False
        position = v - a if v >= a else (high - a + 1) + (v - low)
        return position % step == 0 and position < cycle

    return wrapped


def _field_matcher(text: str, index: int) -> Matcher:
    low, high, names = LIMITS[index]
    items = [_item_matcher(i, low, high, names, index == 5) for i in text.split(",")]
    return lambda v: any(m(v) for m in items)


# A day: (its number in the month, its weekday 0 = Sunday, the number of days in its month).
Day = tuple[int, int, int]
DayMatcher = Callable[[Day], bool]


def _end_bound(text: str) -> int:
    return -1 if text in ("l", "last") else int(text)


def _dom_item(item: str) -> DayMatcher:
    base, _, step_text = item.lower().partition("/")
    step = int(step_text) if step_text else 1
    if not ("l" in base or base.startswith("-")):
        plain = _item_matcher(item, 1, 31, [], False)
        return lambda d: plain(d[0])
    found = re.fullmatch(r"(-?\w+)(?:-(-?\w+))?", base)
    assert found is not None, item
    a = _end_bound(found[1])
    if found[2] is None:  # one day counted from the end: -1 is the last
        return lambda d: d[0] == d[2] + 1 + a
    b = _end_bound(found[2])
    if a > 0:  # N-L: N through the last day
        return lambda d: d[0] >= a and (d[0] - a) % step == 0
    length = (b - a) % 31 + 1  # -31..-1 is a cycle: -1 is followed by -31

    def counted_from_end(d: Day) -> bool:
        position = (d[0] - (d[2] + 1) - a) % 31
        return position < length and position % step == 0

    return counted_from_end


def _dow_item(item: str) -> DayMatcher:
    if "#" not in item:
        plain = _item_matcher(item, 0, 6, DAYS, True)
        return lambda d: plain(d[1])
    day_text, _, n_text = item.lower().partition("#")
    weekday = _number(day_text, DAYS, 0) % 7
    n = -1 if n_text in ("l", "last") else int(n_text)

    def nth(d: Day) -> bool:
        same_before = len(range(d[0], 0, -7))  # this day and the same weekdays before it
        same_after = len(range(d[0], d[2] + 1, 7))  # this day and those after it
        return d[1] == weekday and n in (same_before, -same_after)

    return nth


def _day_field(text: str, dow: bool) -> DayMatcher:
    items = [(_dow_item if dow else _dom_item)(i) for i in text.split(",")]
    return lambda d: any(m(d) for m in items)


class ReferenceCron:
    """A cron expression read the slow way."""

    def __init__(self, expr: str) -> None:
        text = MACROS.get(expr.strip().lower(), expr)
        fields = text.split()
        self.has_seconds = len(fields) == 6
        if not self.has_seconds:
            fields = ["0", *fields]
        self.both_days = any(fields[i].endswith("&") for i in (3, 5))
        fields = [f.removesuffix("&") for f in fields]
        self.fields = fields
        self.match = [_field_matcher(f, i) for i, f in enumerate(fields) if i not in (3, 5)]
        self.dom, self.dow = _day_field(fields[3], False), _day_field(fields[5], True)
        self.fixed = not (fields[1].startswith("*") or fields[2].startswith("*"))

    def matches(self, wall: datetime) -> bool:
        """Vixie's test: both day fields when either starts with '*' (or one ends with '&'),
        else either one."""
        second, minute, hour, month = self.match
        if not (second(wall.second) and minute(wall.minute) and hour(wall.hour)):
            return False
        if not month(wall.month):
            return False
        day = (wall.day, wall.isoweekday() % 7, monthrange(wall.year, wall.month)[1])
        dom_ok, dow_ok = self.dom(day), self.dow(day)
        if self.both_days or self.fields[3].startswith("*") or self.fields[5].startswith("*"):
            return dom_ok and dow_ok
        return dom_ok or dow_ok


def _real_instants(wall: datetime, tz: ZoneInfo) -> list[datetime] | None:
    """The instants whose local wall time is `wall`: found by a round trip per fold. None
    when one is no datetime (past 9999-12-31T23:59:59.999999Z): no tick, not a gap, as
    kiqbeat plans nothing past the year 9999 (DESIGN §3)."""
    found = []
    for fold in (0, 1):
        try:
            instant = wall.replace(tzinfo=tz, fold=fold).astimezone(UTC)
        except OverflowError:
            return None
        if instant.astimezone(tz).replace(tzinfo=None) == wall:
            found.append(instant)
    return sorted(set(found))


# The last and first wall times a datetime holds (naive on purpose: local wall times).
_LAST_WALL = datetime(9999, 12, 31, 23, 59, 59, 999_999)  # noqa: DTZ001
_FIRST_WALL = datetime(1, 1, 1)  # noqa: DTZ001


def _local(instant: datetime, tz: ZoneInfo) -> datetime:
    """The naive local time of `instant`, or the last wall time when that lies past the year 9999
    (the last hours of 9999 in a zone east of UTC)."""
    try:
        return instant.astimezone(tz).replace(tzinfo=None)
    except OverflowError:
        return _LAST_WALL


def _shifted(wall: datetime, by: timedelta) -> datetime:
    """`wall` + `by`, held within datetime's range (the walk stops at its ends)."""
    try:
        return wall + by
    except OverflowError:
        return _LAST_WALL if by > timedelta(0) else _FIRST_WALL


def _gap_end(wall: datetime, tz: ZoneInfo) -> datetime:
    """The first instant whose local wall time is past `wall` (wall lies in a gap)."""
    instant = wall.replace(tzinfo=tz, fold=1).astimezone(UTC).replace(second=0)
    while instant.astimezone(tz).replace(tzinfo=None) <= wall:
        instant += timedelta(minutes=1)
    # An offset of seconds (Monrovia's -00:44:30 until 1972) ends a gap between minutes.
    second = timedelta(seconds=1)
    while (instant - second).astimezone(tz).replace(tzinfo=None) > wall:
        instant -= second
    return instant


def reference_fire_times(
    expr: str, tz_name: str, after: datetime, until: datetime,
    repeated: str = "first", skipped: str = "shift",
) -> list[datetime]:
    """Every fire instant in (after, until], by visiting each wall-clock minute or second;
    a fixed-time cron under the DST policy (`repeated`: first, last or both pass of a
    repeated wall time; `skipped`: shift to the gap's end, or skip)."""
    tz = ZoneInfo(tz_name)
    cron = ReferenceCron(expr)
    step = timedelta(seconds=1) if cron.has_seconds else timedelta(minutes=1)
    margin = timedelta(hours=3)
    # Near the year 9999 a local time may be no datetime: the walk stops at _LAST_WALL. A
    # wall time past 9999-12-31T23:59:59 is never visited: it is no date (DESIGN §3).
    wall = _shifted(_local(after, tz), -margin).replace(microsecond=0)
    if not cron.has_seconds:
        wall = wall.replace(second=0)
    end = _shifted(_local(until, tz), margin)
    fired: set[datetime] = set()
    while wall <= end:
        if cron.matches(wall):
            instants = _real_instants(wall, tz)
            if instants is None:
                pass  # past the end of time
            elif not instants:
                if cron.fixed and skipped == "shift":
                    fired.add(_gap_end(wall, tz))
            elif cron.fixed and repeated != "both":
                fired.add(instants[0] if repeated == "first" else instants[-1])
            else:
                fired.update(instants)
        if wall > _LAST_WALL - step:
            break
        wall += step
    return sorted(t for t in fired if after < t <= until)
