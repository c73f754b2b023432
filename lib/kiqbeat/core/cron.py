"""When schedules fire: cron expressions and epoch-anchored intervals, with cron's DST rules.

Everything here is pure: instants in, instants out. Internally an instant is an integer of
epoch seconds (UTC) and a *wall time* is an integer of local seconds counted as if the zone
were UTC; each zone's offset changes are found once per year and cached, so mapping a wall
time to its real instants is arithmetic (DESIGN §3):

- wildcard jobs (minute or hour field starts with '*') fire at every real instant whose
  wall time matches: both passes of a repeated hour, nothing in a gap;
- fixed-time jobs follow the schedule's DST policy (`dst`): by default (cron's rule) once
  per matching wall time, in the first pass of a repeated hour, and a wall time that does
  not exist fires once, at the instant the gap ends; `last`, `both` and `skip` choose
  otherwise (core/dst.py).

The cron field grammar lives in `cron_fields`, zones and their offset changes in `zones`,
and how fugit (sidekiq-cron, sidekiq-scheduler) reads the same expression in `fugit`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache

from kiqbeat.core.cron_fields import day_fits, read_fields
from kiqbeat.core.dst import CRON, DstPolicy, dst_policy
from kiqbeat.core.durations import duration_s
from kiqbeat.core.instants import ENDED
from kiqbeat.core.zones import (
    _DAY_S,
    _EPOCH,
    _EPOCH_ORDINAL,
    _SECOND,
    LAST_S,
    _changes,
    _Segments,
    _segments,
)
from kiqbeat.errors import ConfigError, shown

# next_after gives up past this horizon (a cron that fires only on 29 Feb of a Monday
# still fires within 28 years; one that cannot fire is rejected by parse_cron).
_NEXT_HORIZON_S = 400 * 366 * _DAY_S


# ---------------------------------------------------------------------------- instants


def _epoch_s(instant: datetime, name: str) -> int:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {instant!r}")
    return (instant - _EPOCH) // _SECOND


def _utc(instant_s: int) -> datetime:
    return datetime.fromtimestamp(instant_s, UTC)


def _month_days(day: date) -> int:
    """How many days the month of `day` has (calendar.monthrange's, without loading
    calendar and locale in every process)."""
    if day.month == 12:
        return 31
    return (date(day.year, day.month + 1, 1) - date(day.year, day.month, 1)).days


def _hm(wall: int, seconds: bool) -> str:
    tod = wall % _DAY_S
    text = f"{tod // 3600:02d}:{tod // 60 % 60:02d}"
    return text + f":{tod % 60:02d}" if seconds else text


@dataclass(frozen=True)
class Cron:
    """A parsed cron expression in a zone: the instants it fires at, under cron's DST rules."""

    expr: str
    zone_name: str
    has_seconds: bool
    is_fixed_time: bool
    key: str
    seconds: tuple[int, ...] = field(repr=False)
    minutes: tuple[int, ...] = field(repr=False)
    hours: tuple[int, ...] = field(repr=False)
    days: frozenset[int] = field(repr=False)
    months: frozenset[int] = field(repr=False)
    weekdays: frozenset[int] = field(repr=False)  # 0 = Sunday
    days_or: bool = field(repr=False)  # both day fields restricted: either may match
    dst: DstPolicy = CRON  # what a fixed-time cron does when the clocks change
    # Days counted from the month's end (1 = the last, 'L'), and nth weekdays as pairs of
    # weekday and n (n from 1 to 5, or -1 to -5 from the end), as fugit reads them.
    from_end: frozenset[int] = field(default=frozenset(), repr=False)
    nth: frozenset[tuple[int, int]] = field(default=frozenset(), repr=False)
    # A natural-language schedule as written ('every day at 9am'; '' for a cron) and where
    # fugit's cron for it does not do what the words say ('' when it does): `expr` is the
    # cron it reads as.
    phrase: str = field(default="", compare=False)
    phrase_note: str = field(default="", compare=False, repr=False)

    @property
    def written(self) -> str:
        """The cron as shown: 'every day at 9am → 0 9 * * *' for a phrase, else `expr`."""
        return f"{self.phrase} → {self.expr}" if self.phrase else self.expr

    def _day_fits(self, dom: int, weekday: int, month_days: int = 31) -> bool:
        """`cron_fields.day_fits` of this cron's day fields."""
        return day_fits(self.days, self.from_end, self.weekdays, self.nth, self.days_or, dom,
                        weekday, month_days)

    def _day_matches(self, day: date) -> bool:
        """True when the day fields match `day`."""
        month_days = _month_days(day) if self.from_end or self.nth else 31
        return self._day_fits(day.day, (day.weekday() + 1) % 7, month_days)

    def _times(self, start: int, end: int) -> Iterator[int]:
        """Matching seconds-of-day in [start, end], ascending."""
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        h0, m0, s0 = start // 3600, start // 60 % 60, start % 60
        for h in hours[bisect_left(hours, h0) :]:
            first_hour = h == h0
            for m in minutes[bisect_left(minutes, m0) if first_hour else 0 :]:
                base = h * 3600 + m * 60
                if base > end:
                    return
                for s in seconds[bisect_left(seconds, s0) if first_hour and m == m0 else 0 :]:
                    if base + s > end:
                        return
                    yield base + s

    def _walls(self, lo: int, hi: int) -> Iterator[int]:
        """Matching wall times in [lo, hi], ascending; none past LAST_S (the last wall time
        that is a date: the walk ends there)."""
        hi = min(hi, LAST_S)
        day_n, last_n = lo // _DAY_S, hi // _DAY_S
        if day_n > last_n:
            return
        day = date.fromordinal(_EPOCH_ORDINAL + day_n)
        one_day = timedelta(days=1)
        while day_n <= last_n:
            if day.month not in self.months:
                if day.month == 12 and day.year == date.max.year:
                    return  # no month follows: the walk ends (LAST_S)
                nxt = date(day.year + day.month // 12, day.month % 12 + 1, 1)
                day_n += (nxt - day).days
                day = nxt
                continue
            if self._day_matches(day):
                start = lo - day_n * _DAY_S if day_n == lo // _DAY_S else 0
                end = hi - day_n * _DAY_S if day_n == last_n else _DAY_S - 1
                base = day_n * _DAY_S
                for tod in self._times(start, end):
                    yield base + tod
            day_n += 1
            if day_n <= last_n:  # the last day may be date.max's
                day += one_day

    def _fires(self, segs: _Segments, wall: int) -> list[int]:
        """The instants a matching wall time fires at, under DESIGN §3's DST rules."""
        found = segs.instants(wall)
        if len(found) == 1 or not self.is_fixed_time:
            return found
        if found:
            return self.dst.pick(found)
        end = segs.gap_end(wall) if self.dst.skipped == "shift" else None
        return [] if end is None else [end]

    def _between_s(self, a: int, b: int) -> list[int]:
        b = min(b, LAST_S)
        if b <= a:
            return []
        segs = _segments(self.zone_name, a, b)
        if not segs.changes:
            off = segs.first_offset
            return [w - off for w in self._walls(a + off + 1, b + off)]
        offs = segs.offsets
        found = {
            u
            for w in self._walls(a + min(offs) + 1, b + max(offs))
            for u in self._fires(segs, w)
            if a < u <= b
        }
        return sorted(found)

    def _first_after_s(self, a: int, b: int) -> int | None:
        """The first fire instant in (a, b], or None (always past LAST_S)."""
        b = min(b, LAST_S)
        if b <= a:
            return None
        segs = _segments(self.zone_name, a, b)
        offs = segs.offsets
        if not segs.changes:
            for w in self._walls(a + offs[0] + 1, b + offs[0]):
                return w - offs[0]
            return None
        spread = max(offs) - min(offs)
        best: int | None = None
        best_wall = 0
        for w in self._walls(a + min(offs) + 1, b + max(offs)):
            # Later walls can only give earlier instants within a repeat, never further.
            if best is not None and w > best_wall + spread:
                break
            for u in self._fires(segs, w):
                if a < u <= b and (best is None or u < best):
                    best, best_wall = u, w
        return best

    def between(self, after: datetime, until: datetime) -> list[datetime]:
        """Every fire instant in (after, until], aware UTC, ascending, without duplicates."""
        a, b = _epoch_s(after, "after"), _epoch_s(until, "until")
        return [_utc(u) for u in self._between_s(a, b)]

    def next_after(self, after: datetime) -> datetime:
        """The first fire instant strictly after `after` (aware UTC); ENDED when it would
        lie past the last instant kiqbeat plans (LAST_S)."""
        a = _epoch_s(after, "after")
        lo, width = a, 3600 if self.has_seconds or len(self.hours) > 1 else _DAY_S
        while lo - a < _NEXT_HORIZON_S:
            if lo >= LAST_S:
                return ENDED
            hi = lo + width
            found = self._first_after_s(lo, hi)
            if found is not None:
                return _utc(found)
            lo, width = hi, width * 8
        raise ValueError(f"cron {self.expr!r} does not fire within 400 years of {after}")

    def dst_note(self, instant: datetime) -> str:
        """'' normally; else a short note saying how DST moved or doubled this fire instant,
        and, for a fixed-time cron, what its policy made of the night."""
        u = _epoch_s(instant, "instant")
        segs = _segments(self.zone_name, u, u)
        if not segs.changes:
            return ""
        policy = self.dst
        if self.is_fixed_time and policy.skipped == "shift":
            for when, before, after in segs.changes:
                if when == u and after > before:
                    skipped = next(self._walls(when + before, when + after - 1), None)
                    if skipped is not None:
                        hm = _hm(skipped, self.has_seconds)
                        return f"{hm} skipped by DST; fired when the gap ended (dst: shift)"
        for off in set(segs.offsets):
            passes = segs.instants(u + off)
            if u in passes and len(passes) > 1:
                which = "first" if u == min(passes) else "second"
                if not self.is_fixed_time:
                    return f"repeated hour: {which} pass"
                other = {"first": "the second pass does not fire",
                         "last": "the first pass did not fire",
                         "both": ("fires again in the second pass" if which == "first"
                                  else "fired in the first pass too")}[policy.repeated]
                return f"repeated hour: {which} pass; {other} (dst: {policy.repeated})"
        return ""

    def dst_withheld(self, after: datetime, until: datetime) -> list[tuple[datetime, str]]:
        """The instants in (after, until] at which a matching wall time would fire under
        another DST policy but does not under this one, each with a note: the pass of a
        repeated hour `first` or `last` leaves out, the end of a gap `skip` leaves unfired
        ([] for a wildcard cron, which no policy changes)."""
        if not self.is_fixed_time:
            return []
        a, b = _epoch_s(after, "after"), _epoch_s(until, "until")
        out: dict[int, str] = {}
        for when, before, offset in _changes(self.zone_name, a - _DAY_S, b + _DAY_S):
            shift = abs(offset - before)
            lo, hi = when - shift - 3600, when + shift + 3600
            segs = _segments(self.zone_name, lo, hi)
            fired = set(self._between_s(lo, hi))
            for w in self._walls(lo + min(segs.offsets), hi + max(segs.offsets)):
                passes = segs.instants(w)
                hm = _hm(w, self.has_seconds)
                if len(passes) > 1:
                    for u in set(passes) - set(self.dst.pick(passes)):
                        if a < u <= b and u not in fired:
                            which = "first" if u == passes[0] else "second"
                            out.setdefault(u, f"repeated hour: {hm} in the {which} pass "
                                              f"does not fire (dst: {self.dst.repeated})")
                elif not passes and self.dst.skipped == "skip":
                    end = segs.gap_end(w)
                    if end is not None and a < end <= b and end not in fired:
                        out.setdefault(end, f"{hm} skipped by DST; not fired that day "
                                            "(dst: skip)")
        return [(_utc(u), note) for u, note in sorted(out.items())]


def fire_times(cron: str, *, tz: str = "UTC", after: datetime, until: datetime,
               dst: object = CRON) -> list[datetime]:
    """Every instant in (after, until] at which `cron` (in zone `tz`, under the DST policy
    `dst`: a DstPolicy, a preset's name or a mapping, as a document's `dst:`) fires, aware
    UTC."""
    _epoch_s(after, "after")
    _epoch_s(until, "until")
    return parse_cron(cron, tz, dst_policy(dst)).between(after, until)


# ---------------------------------------------------------------------------- intervals

@dataclass(frozen=True)
class Every:
    """A fixed interval, anchored to the Unix epoch in UTC so every instance agrees."""

    seconds: int

    def __post_init__(self) -> None:
        if self.seconds <= 0:
            raise ConfigError(f"interval must be at least 1 second, got {self.seconds}")

    @property
    def zone_name(self) -> str:
        """Intervals count in UTC."""
        return "UTC"

    @property
    def key(self) -> str:
        """Equal for intervals of the same length."""
        return f"every:{self.seconds}"

    @property
    def has_seconds(self) -> bool:
        """True unless the interval is a whole number of minutes."""
        return self.seconds % 60 != 0

    def between(self, after: datetime, until: datetime) -> list[datetime]:
        """Every multiple of the interval (since the epoch) in (after, until], aware UTC."""
        a, b = _epoch_s(after, "after"), _epoch_s(until, "until")
        first = (a // self.seconds + 1) * self.seconds
        return [_utc(u) for u in range(first, b + 1, self.seconds)]

    def next_after(self, after: datetime) -> datetime:
        """The first multiple of the interval strictly after `after`; ENDED when it would
        lie past the last instant kiqbeat plans (LAST_S)."""
        u = (_epoch_s(after, "after") // self.seconds + 1) * self.seconds
        return _utc(u) if u <= LAST_S else ENDED


def parse_every(text: str) -> Every:
    """An Every from a duration ('30s', '15m', '1h30m', '1.5h', '2d', '1w' or seconds, the
    grammar of `durations`): a whole number of seconds, at least 1; ConfigError if bad."""
    try:
        seconds = duration_s(text)
    except ConfigError as exc:
        raise ConfigError(f"every {exc}") from None
    if seconds < 1 or seconds != int(seconds):
        raise ConfigError(f"every {shown(text)} must be a whole number of seconds, at least 1")
    if seconds > MAX_EVERY_S:
        raise ConfigError(f"every {shown(text)} is longer than 100 years")
    return Every(int(seconds))


# Longer intervals would put ticks beyond the year 9999, which no clock here represents.
MAX_EVERY_S = 100 * 366 * 86_400


_PHRASE_WORDS = frozenset(("every", "at", "from", "on"))


@lru_cache(maxsize=8_192)  # about 4 KB each
def parse_cron(expr: str, tz: str = "UTC", dst: DstPolicy = CRON) -> Cron:
    """The Cron for `expr` in zone `tz` (a trailing zone name in `expr` wins) under the DST
    policy `dst`; ConfigError.

    `expr` may be natural language as fugit reads it ('every day at 9am', `core.natural`):
    the Cron is then its cron's, keeping the phrase (`Cron.phrase`) to show beside it."""
    first = expr.lstrip()[:6].split(maxsplit=1)
    if first and first[0].lower() in _PHRASE_WORDS:
        # Imported only here: a document of plain crons never loads the phrase reader.
        from kiqbeat.core.natural import is_natural, natural_cron

        if is_natural(expr):
            reading = natural_cron(expr)
            return replace(parse_cron(reading.cron, tz, dst), phrase=" ".join(expr.split()),
                           phrase_note=reading.note)
    f = read_fields(expr, tz)
    seconds, minutes, hours, days, months, weekdays = f.sets
    # The policy changes a fixed-time cron's instants only: it is part of its key.
    key = f"{f.key} dst={dst.text}" if f.is_fixed_time and dst != CRON else f.key
    return Cron(expr=f.expr, zone_name=f.zone_name, has_seconds=f.has_seconds,
                is_fixed_time=f.is_fixed_time, key=key, seconds=seconds, minutes=minutes,
                hours=hours, days=frozenset(days), months=frozenset(months),
                weekdays=frozenset(weekdays), days_or=f.days_or, dst=dst,
                from_end=frozenset(f.from_end), nth=frozenset(f.nth))
