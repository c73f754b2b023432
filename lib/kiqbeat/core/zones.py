"""Time zones and their UTC offset changes, found once per zone and year and cached.

The one reader of a zone name, wherever one is written (`tz:`, `time_zone`, `--app-zone`,
the end of a cron or of a natural-language schedule, an import). Three kinds are read:

- an IANA name ('America/New_York', 'UTC'), which follows daylight saving;
- a Rails name, ActiveSupport::TimeZone::MAPPING's ('Eastern Time (US & Canada)',
  'Tokyo'; the table is rails_zones.tsv, from ActiveSupport's source), read as the IANA
  zone it maps to and shown as both: 'Eastern Time (US & Canada) (America/New_York)';
- a fixed UTC offset ('+05:30', '-0800', 'UTC+9'), a zone without daylight saving, kept
  as '+05:30' and shown as '+05:30 (fixed offset, no DST)'. 'GMT+9' is refused: POSIX's
  'Etc/GMT+9' is 9 hours *west*, so its sign cannot be trusted; a bare '+5' too (fugit
  reads offsets with minutes only: '+05:00').

A *wall time* is an integer of local seconds counted as if the zone were UTC; `_Segments`
maps one to its real instants by arithmetic: one normally, two in a repeated hour, none
in a gap (DESIGN §3).
"""

from __future__ import annotations

import importlib.util
import os
import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from functools import lru_cache
from pathlib import Path

from kiqbeat.core.limits import MAX_PLANNABLE_MS
from kiqbeat.errors import ConfigError, did_you_mean, shown

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY_S = 86_400
# The end of time here (DESIGN §3): the last whole second kiqbeat plans, 9999-12-31T23:59:59Z
# in epoch seconds, and, read as a wall time, the last local second a `date` holds. No tick
# lies past it as an instant or as a wall time (one in a zone east of UTC would fall in the
# year 10000 as a date), so a walk over ticks ends there: the cron core clamps to it, and a
# zone's offsets are looked up no further than a day before it (_offset_s).
LAST_S = MAX_PLANNABLE_MS // 1000
# Offset changes within this distance of a window are taken into account; any real DST
# shift (at most 2 h today, 24 h when Samoa crossed the date line) is smaller.
_NEAR_S = 2 * _DAY_S
# Offsets are sampled a day apart when a zone's year is scanned for changes, and this often
# within a day whose two ends differ: two changes closer together than this, or two within
# one day that return to the first offset, would be missed (none exists in the tz database;
# tests/unit/test_zones.py checks every zone's transitions). A year costs ~400 samples, not
# ~8,800: the first plan of each zone in a new process pays it.
_SCAN_STEP_S = 3600



# A fixed UTC offset: '+05:30', '-0800', '+09', 'UTC+9', 'UTC-03:30' ('\u2212' is a minus).
_OFFSET = re.compile(r"(utc|gmt)?([+\-\u2212])([0-9]{1,2})(?::?([0-9]{2}))?", re.IGNORECASE)


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) | {"UTC"}


def _is_iana(name: str) -> bool:
    """`name in _zone_names()`; 'UTC' (every schedule's zone unless it names one), and a name
    that `_listed_alone` can tell, answered without listing the zone database, which opens
    each of its files (30-190 ms of a cold process's first plan here). Any other name is
    looked up in the listing: every answer is the listing's."""
    if name == "UTC":
        return True
    listed = _listed_alone(name)
    return name in _zone_names() if listed is None else listed


@lru_cache(maxsize=1024)
def _listed_alone(name: str) -> bool | None:
    """Whether `zoneinfo.available_timezones()` lists `name`, told from its own path: True
    for a TZif file under a TZPATH folder, reached through real folders (the listing's walk
    follows no linked one), its key normalized, outside the `right/` and `posix/` folders
    and not `posixrules` (which the listing leaves out), each part spelled as its folder
    lists it; False when no TZPATH folder holds
    anything by that name and no `tzdata` package is installed (the listing's two sources);
    None when only the listing can tell."""
    parts = name.split("/")
    if (os.path.isabs(name) or os.path.normpath(name) != name or ".." in parts
            or parts[0] in ("right", "posix") or name == "posixrules"):
        return None
    found = False
    for root in zoneinfo.TZPATH:
        path = os.path.join(root, name)
        if not os.path.lexists(path):  # (False for a name holding a NUL too)
            continue
        found = True
        folders = [os.path.join(root, *parts[:depth]) for depth in range(1, len(parts))]
        if not all(os.path.isdir(f) and not os.path.islink(f) for f in folders):
            continue
        try:
            # Spelled as the walk spells it: a case-insensitive file system (macOS) opens
            # 'america/new_york' too, which the listing does not hold.
            if not all(part in os.listdir(os.path.join(root, *parts[:depth]))
                       for depth, part in enumerate(parts)):
                continue
            with open(path, "rb") as file:
                if file.read(4) == b"TZif":
                    return True
        except OSError:  # a folder, unreadable: the next root, as the listing's walk
            continue
    if found or importlib.util.find_spec("tzdata") is not None:
        return None
    return False


@lru_cache(maxsize=1)
def rails_zones() -> dict[str, str]:
    """ActiveSupport::TimeZone::MAPPING: each Rails zone name and the IANA zone it maps to."""
    # Read once, by the first Rails name met, as a file beside this module (importlib.resources
    # loads tempfile, shutil, bz2 and lzma: ~10 ms of a cold process).
    text = Path(__file__).with_name("rails_zones.tsv").read_text("utf-8")
    return dict(line.split("\t") for line in text.splitlines()
                if line and not line.startswith("#"))


@lru_cache(maxsize=1)
def _spaced_rails_names() -> tuple[str, ...]:
    """The Rails names with a space in them, longest first."""
    return tuple(sorted((n for n in rails_zones() if " " in n), key=len, reverse=True))


# How no Rails name ends: an expression ending so ('0 9 * * *', '*/5 * * * 1-5', the most
# of them) has no trailing Rails zone, found without reading the table (rails_zones: a
# file read and parsed). tests/unit/test_zones.py checks.
_NO_RAILS_END = frozenset("0123456789*?/,-")


def trailing_rails_zone(text: str) -> tuple[str, str] | None:
    """(what comes before, the name) when `text` ends with a blank and a Rails zone name
    holding spaces ('0 9 * * * Eastern Time (US & Canada)'); else None."""
    if text[-1:] in _NO_RAILS_END:
        return None
    for name in _spaced_rails_names():
        head = text[: -len(name)]
        if text.endswith(name) and head[-1:].isspace():
            return head.rstrip(), name
    return None


def offset_problem(name: str) -> str:
    """Why `name`, written as a UTC offset, is refused ('' when it is not one or is fine)."""
    match = _OFFSET.fullmatch(name)
    if match is None:
        return ""
    hours, minutes = int(match[3]), int(match[4] or 0)
    if match[1] and match[1].lower() == "gmt":
        east = match[2] == "+"
        return (f"{shown(name, 40)} is ambiguous: POSIX's 'Etc/GMT{match[2]}{hours}' is"
                f" {hours} hours {'west' if east else 'east'} of UTC; write"
                f" '{match[2].replace(chr(0x2212), '-')}{hours:02d}:{minutes:02d}' for"
                f" {hours} hours {'east' if east else 'west'}")
    if not match[1] and match[4] is None:
        return (f"{shown(name, 40)} has no minutes; write a UTC offset with them, as fugit"
                f" reads it: '{match[2].replace(chr(0x2212), '-')}{hours:02d}:00'")
    if hours > 23 or minutes > 59:
        return f"{shown(name, 40)} is not a UTC offset (at most 23:59 either way)"
    return ""


def _fixed(name: str) -> str | None:
    """'+05:30' for a fixed-offset zone written '+05:30', '+0530' or 'UTC+5:30'; else None."""
    match = _OFFSET.fullmatch(name)
    if match is None or offset_problem(name):
        return None
    sign = "-" if match[2] in "-\u2212" else "+"
    hours, minutes = int(match[3]), int(match[4] or 0)
    return f"{'+' if hours == minutes == 0 else sign}{hours:02d}:{minutes:02d}"


def is_zone_name(name: str) -> bool:
    """True when `name` is a zone name kiqbeat reads (IANA, Rails or a fixed offset)."""
    if not (name[:1].isalpha() or name[:1] in "+-\u2212"):
        return False  # a cron field ('*', '5', '1-5'): every zone name starts so (test_zones)
    return _is_iana(name) or name in rails_zones() or _fixed(name) is not None


def canonical_zone(name: str) -> str:
    """The zone name kept for `name`: an IANA or Rails name as written, a fixed offset as
    '+05:30'; ConfigError (naming the nearest known names) when it is none of them."""
    fixed = _fixed(name)
    if fixed is not None:
        return fixed
    zone(name)
    return name


def zone_key(name: str) -> str:
    """The IANA name (or fixed offset '+05:30') a known zone name stands for: equal for
    names of the same zone, and what fugit (sidekiq-scheduler's UI) reads."""
    if _is_iana(name):  # 'UTC' is a Rails name too ('Etc/UTC')
        return name
    return rails_zones().get(name) or _fixed(name) or name


def zone_label(name: str) -> str:
    """A zone name as shown: 'Tokyo (Asia/Tokyo)', '+05:30 (fixed offset, no DST)', or the
    IANA name itself."""
    if not _is_iana(name) and name in rails_zones():
        return f"{name} ({rails_zones()[name]})"
    fixed = _fixed(name)
    return f"{fixed} (fixed offset, no DST)" if fixed else name


@lru_cache(maxsize=1024)
def zone(name: str) -> tzinfo:
    """The time zone `name` (IANA, Rails or a fixed offset: see the module docstring);
    ConfigError (with a did-you-mean hint) when unknown."""
    if _is_iana(name):
        return zoneinfo.ZoneInfo(name)
    if name in rails_zones():
        return zoneinfo.ZoneInfo(rails_zones()[name])
    fixed = _fixed(name)
    if fixed is not None:
        minutes = int(fixed[1:3]) * 60 + int(fixed[4:])
        return timezone(timedelta(minutes=-minutes if fixed[0] == "-" else minutes))
    problem = offset_problem(name)
    if problem:
        raise ConfigError(f"time zone {problem}")
    hint = (did_you_mean(name, _zone_names() | set(rails_zones())) if len(name) <= 40
            else "")
    kinds = ("; write an IANA name such as 'America/New_York', a Rails name such as 'Eastern"
             " Time (US & Canada)', or a fixed offset such as '+05:30'")
    raise ConfigError(f"unknown time zone {shown(name, 40)}{hint or kinds}")


def _offset_s(tz: tzinfo, instant_s: int) -> int:
    """The zone's UTC offset at `instant_s`; past LAST_S - 1 day, the offset then (its local
    time may not be a date; no zone changes offset in the last days of 9999: test_zones)."""
    offset = datetime.fromtimestamp(min(instant_s, LAST_S - _DAY_S), tz).utcoffset()
    return 0 if offset is None else offset // _SECOND


# A change of UTC offset: (instant it takes effect, offset before, offset after).
_Change = tuple[int, int, int]


@lru_cache(maxsize=4096)
def _changes_in_year(zone_name: str, year: int) -> tuple[_Change, ...]:
    """Offset changes taking effect in (1 Jan, next 1 Jan] (UTC) of `year`, to the second
    (the year 9999's up to LAST_S)."""
    tz = zone(zone_name)
    start = (date(year, 1, 1).toordinal() - _EPOCH_ORDINAL) * _DAY_S
    end = min((date(year, 12, 31).toordinal() + 1 - _EPOCH_ORDINAL) * _DAY_S, LAST_S)
    changes: list[_Change] = []
    day, day_off = start, _offset_s(tz, start)
    while day < end:
        day_end = min(day + _DAY_S, end)
        day_end_off = _offset_s(tz, day_end)
        t, off = day, day_off
        while t < day_end and day_end_off != day_off:  # the hours of a day that changed
            nxt = min(t + _SCAN_STEP_S, day_end)
            nxt_off = day_end_off if nxt == day_end else _offset_s(tz, nxt)
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
        day, day_off = day_end, day_end_off
    return tuple(changes)


def _year_of(instant_s: int) -> int:
    return date.fromordinal(_EPOCH_ORDINAL + min(instant_s, LAST_S) // _DAY_S).year


def _changes(zone_name: str, lo_s: int, hi_s: int) -> list[_Change]:
    """Offset changes taking effect in (lo_s, hi_s], ascending."""
    if zone_name == "UTC" or _fixed(zone_name) is not None:
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

