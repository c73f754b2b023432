"""IANA time zones and their UTC offset changes, found once per zone and year and cached.

A *wall time* is an integer of local seconds counted as if the zone were UTC; `_Segments`
maps one to its real instants by arithmetic: one normally, two in a repeated hour, none
in a gap (DESIGN §3).
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache

from kiqbeat.errors import ConfigError, did_you_mean, shown

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY_S = 86_400
# Offset changes within this distance of a window are taken into account; any real DST
# shift (at most 2 h today, 24 h when Samoa crossed the date line) is smaller.
_NEAR_S = 2 * _DAY_S
# Offsets are sampled this often when a zone's year is scanned for changes; two changes
# closer together than this would be missed (none exists in the tz database).
_SCAN_STEP_S = 3600



@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) | {"UTC"}


@lru_cache(maxsize=1024)
def zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone `name`; ConfigError (with a did-you-mean hint) when unknown."""
    if name not in _zone_names():
        hint = did_you_mean(name, _zone_names()) if len(name) <= 40 else ""
        raise ConfigError(f"unknown time zone {shown(name, 40)}{hint}")
    return zoneinfo.ZoneInfo(name)


def zone_key(name: str) -> str:
    """The IANA name (or fixed offset) a known zone name stands for: equal for names of the
    same zone."""
    return name


def _offset_s(tz: zoneinfo.ZoneInfo, instant_s: int) -> int:
    offset = datetime.fromtimestamp(instant_s, tz).utcoffset()
    return 0 if offset is None else offset // _SECOND


# A change of UTC offset: (instant it takes effect, offset before, offset after).
_Change = tuple[int, int, int]


@lru_cache(maxsize=4096)
def _changes_in_year(zone_name: str, year: int) -> tuple[_Change, ...]:
    """Offset changes taking effect in (1 Jan, next 1 Jan] (UTC) of `year`, to the second."""
    tz = zone(zone_name)
    start = (datetime(year, 1, 1, tzinfo=UTC) - _EPOCH) // _SECOND
    end = (datetime(year + 1, 1, 1, tzinfo=UTC) - _EPOCH) // _SECOND
    changes: list[_Change] = []
    t, off = start, _offset_s(tz, start)
    while t < end:
        nxt = min(t + _SCAN_STEP_S, end)
        nxt_off = _offset_s(tz, nxt)
        if nxt_off != off:
            lo, hi = t, nxt  # offset(lo) == off, offset(hi) != off: find the first instant
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _offset_s(tz, mid) == off:
                    lo = mid
                else:
                    hi = mid
            changes.append((hi, off, nxt_off))
        t, off = nxt, nxt_off
    return tuple(changes)


def _year_of(instant_s: int) -> int:
    return date.fromordinal(_EPOCH_ORDINAL + instant_s // _DAY_S).year


def _changes(zone_name: str, lo_s: int, hi_s: int) -> list[_Change]:
    """Offset changes taking effect in (lo_s, hi_s], ascending."""
    if zone_name == "UTC":
        return []
    found: list[_Change] = []
    for year in range(_year_of(lo_s), _year_of(hi_s) + 1):
        found.extend(c for c in _changes_in_year(zone_name, year) if lo_s < c[0] <= hi_s)
    return found


@dataclass(frozen=True)
class _Segments:
    """The zone's offsets around a stretch of time: a constant offset between changes."""

    changes: list[_Change]
    first_offset: int

    @property
    def offsets(self) -> list[int]:
        return [self.first_offset] + [c[2] for c in self.changes]

    def instants(self, wall: int) -> list[int]:
        """Real instants whose local wall time is `wall`: 1 normally, 2 in a repeat, 0 in a gap."""
        found = []
        start = None
        off = self.first_offset
        for i in range(len(self.changes) + 1):
            end = self.changes[i][0] if i < len(self.changes) else None
            u = wall - off
            if (start is None or u >= start) and (end is None or u < end):
                found.append(u)
            if end is not None:
                start, off = end, self.changes[i][2]
        return found

    def gap_end(self, wall: int) -> int | None:
        """The instant the gap containing `wall` ends, or None when `wall` is in no gap."""
        for when, before, after in self.changes:
            if when + before <= wall < when + after:
                return when
        return None


def _segments(zone_name: str, lo_s: int, hi_s: int) -> _Segments:
    changes = _changes(zone_name, lo_s - _NEAR_S, hi_s + _NEAR_S)
    if changes:
        return _Segments(changes, changes[0][1])
    if zone_name == "UTC":
        return _Segments([], 0)
    return _Segments([], _offset_s(zone(zone_name), lo_s))

