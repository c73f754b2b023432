"""A schedule's life around its ticks (DESIGN §8), as pure rules of the definition and the tick.

- `Bounded` wraps a timetable: no tick before `start_at` or after `end_at`, none on an
  excluded date (`except:`, in the schedule's zone, DST days included). Its `between` and
  `next_after` already apply them, so a planner that asks it for ticks never sees an
  excluded one (and never records one as missed).
- `OneShot` is the timetable of an `at` schedule: one tick.
- A timetable with no tick left answers `next_after` with `ENDED`, the last instant Python
  represents (9999-12-31T23:59:59.999999Z). In epoch ms it is `instants.ENDED_MS` =
  `limits.MAX_PLANNABLE_MS`: a due index entry scored exactly there is never due (no clock
  reaches it), is not "beyond what kiqbeat plans" (so never warned about as unplannable),
  and `ZRANGEBYSCORE due ENDED_MS ENDED_MS` lists the ended schedules. No tick can equal it:
  ticks are whole seconds, and it is not.
- `jitter_offset_ms` is a tick's delivery delay: a hash of the name and the tick, so every
  invoker computes the same one.
- `runs_left` is what `max_runs` leaves of a schedule's pushes. Which of a group's ticks the
  push step pushes is push.lua's rule; tests/support/life.py holds the reference model it is
  checked against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import cached_property
from hashlib import blake2b
from itertools import pairwise

from kiqbeat.core.cron import Cron, Every
from kiqbeat.core.instants import ENDED as ENDED  # re-exported: where the life rules read it
from kiqbeat.core.instants import to_ms, z_text
from kiqbeat.core.limits import MAX_PLANNABLE_MS
from kiqbeat.core.schedule import Schedule, Timetable
from kiqbeat.core.zones import zone

_MS = timedelta(milliseconds=1)
_TINY = timedelta(microseconds=1)
_DAY = timedelta(days=1)


# ---------------------------------------------------------------------------- timetables


@dataclass(frozen=True)
class Bounded:
    """A timetable's ticks within [start, end] and off the excluded dates (read in
    `dates_zone`); past the last one, `next_after` answers ENDED."""

    inner: Timetable
    start: datetime | None = None
    end: datetime | None = None
    excluded: frozenset[date] = frozenset()
    dates_zone: str = "UTC"
    # Calendar name -> its dates, for messages and previews ("excluded: holidays").
    calendars: tuple[tuple[str, frozenset[date]], ...] = field(default=(), compare=False)

    @cached_property
    def key(self) -> str:
        """The inner key with the bounds and a digest of the excluded dates (computed once:
        planning asks it for each due schedule)."""
        dates = ",".join(sorted(d.isoformat() for d in self.excluded))
        digest = blake2b(dates.encode(), digest_size=8).hexdigest() if dates else ""
        start = "" if self.start is None else to_ms(self.start)
        end = "" if self.end is None else to_ms(self.end)
        return f"{self.inner.key}|{start}|{end}|{digest}|{self.dates_zone if dates else ''}"

    @property
    def zone_name(self) -> str:
        """The inner timetable's zone."""
        return self.inner.zone_name

    @property
    def has_seconds(self) -> bool:
        """As the inner timetable."""
        return self.inner.has_seconds

    def local_date(self, tick: datetime) -> date:
        """The tick's date in the zone the excluded dates are read in."""
        return tick.astimezone(zone(self.dates_zone)).date()

    def excluded_by(self, day: date) -> str:
        """What excludes `day`: the calendars naming it, else 'except' (a date of its own)."""
        names = [name for name, dates in self.calendars if day in dates]
        return ", ".join(names) or "except"

    def fate(self, tick: datetime) -> str:
        """'' when the inner tick stands, else why not: 'before start_at', 'after end_at',
        'excluded'."""
        if self.start is not None and tick < self.start:
            return "before start_at"
        if self.end is not None and tick > self.end:
            return "after end_at"
        # excluded: the tick falls on an excluded date (read in `dates_zone`)
        return "excluded" if self.excluded and self.local_date(tick) in self.excluded else ""

    def between(self, after: datetime, until: datetime) -> list[datetime]:
        """Every standing tick in (after, until], aware UTC, ascending."""
        if self.start is not None and after < self.start:
            after = self.start - _TINY
        if self.end is not None and until > self.end:
            until = self.end
        if until <= after:
            return []
        return [t for t in self.inner.between(after, until) if not self.fate(t)]

    def next_after(self, after: datetime) -> datetime:
        """The first standing tick strictly after `after`, or ENDED when none is left."""
        cursor = after
        if self.start is not None and cursor < self.start:
            cursor = self.start - _TINY
        while True:
            try:
                tick = self.inner.next_after(cursor)
            except ValueError:  # the inner one never fires again
                if self.end is not None:
                    return ENDED
                raise
            if tick >= ENDED or (self.end is not None and tick > self.end):
                return ENDED
            why = self.fate(tick)
            if not why:
                return tick
            # Excluded (or just before start): go on from the end of that local day, where
            # the next tick may stand; a whole excluded day costs one step, not one per tick.
            cursor = max(tick, self._day_end(tick)) if why == "excluded" else tick

    def _day_end(self, tick: datetime) -> datetime:
        """The last instant of the tick's local date (before the next day's first)."""
        tz = zone(self.dates_zone)
        following = datetime.combine(self.local_date(tick) + _DAY, time(), tzinfo=tz)
        return following.astimezone(UTC) - _TINY


@dataclass(frozen=True)
class OneShot:
    """The timetable of an `at` schedule: one tick at `at` (whole seconds), then ENDED."""

    at: datetime
    zone_name: str = "UTC"  # the zone its instant is shown in

    @cached_property
    def key(self) -> str:
        """Equal for one-shots at the same instant."""
        return f"at:{to_ms(self.at)}"

    @property
    def has_seconds(self) -> bool:
        """True unless the instant is on a minute boundary."""
        return self.at.second != 0

    def between(self, after: datetime, until: datetime) -> list[datetime]:
        """[at] when it is in (after, until], else []."""
        return [self.at] if after < self.at <= until else []

    def next_after(self, after: datetime) -> datetime:
        """`at` when it is after `after`, else ENDED."""
        return self.at if after < self.at else ENDED


def base(timetable: Timetable) -> Timetable:
    """The cron or interval under any lifecycle wrapper (itself for a one-shot)."""
    return timetable.inner if isinstance(timetable, Bounded) else timetable


def shortest_period_s(timetable: Timetable) -> int | None:
    """The fewest seconds between two consecutive ticks on a day without a DST change;
    None for a one-shot or when it is more than a day."""
    inner = base(timetable)
    if isinstance(inner, Every):
        return inner.seconds
    if not isinstance(inner, Cron):
        return None
    times = sorted(h * 3600 + m * 60 + s
                   for h in inner.hours for m in inner.minutes for s in inner.seconds)
    gaps = [b - a for a, b in pairwise(times)]
    if _fires_on_consecutive_days(inner):
        gaps.append(times[0] + 86_400 - times[-1])
    return min(gaps) if gaps and min(gaps) <= 86_400 else None


def _fires_on_consecutive_days(cron: Cron) -> bool:
    """True when two consecutive dates both match (looked for over eight years, a leap
    cycle and every weekday of every date)."""
    day = date(2024, 1, 1)
    previous = False
    for _ in range(8 * 366):
        fires = day.month in cron.months and cron._day_matches(day)
        if fires and previous:
            return True
        previous, day = fires, day + _DAY
    return False


# ---------------------------------------------------------------------------- per tick


def jitter_offset_ms(name: str, tick_ms: int, jitter_ms: int) -> int:
    """A tick's delivery delay, in [0, jitter_ms): uniform, and a function of the schedule's
    name and the tick alone (so every invoker, in any language, computes the same); never
    past the last instant kiqbeat plans (a tick of 9999-12-31 is delivered by its end)."""
    if jitter_ms <= 0:
        return 0
    digest = blake2b(f"{name}\x00{tick_ms}".encode(), digest_size=8,
                     person=b"kiqbeat-jitter").digest()
    # Multiply-shift maps 64 uniform bits onto [0, jitter_ms) without modulo's bias.
    return min((int.from_bytes(digest, "big") * jitter_ms) >> 64, MAX_PLANNABLE_MS - tick_ms)


def runs_left(max_runs: int | None, runs: int) -> int | None:
    """How many more ticks the schedule may push (None: no limit)."""
    return None if max_runs is None else max(0, max_runs - runs)


def has_ended(schedule: Schedule, after: datetime, runs: int = 0) -> bool:
    """True when the schedule pushes nothing after `after`: past its end, its one-shot
    done, or its `max_runs` reached."""
    if schedule.max_runs is not None and runs >= schedule.max_runs:
        return True
    return schedule.timetable.next_after(after) >= ENDED


# ---------------------------------------------------------------------------- preview


@dataclass(frozen=True)
class Upcoming:
    """One line of a preview: a tick and what becomes of it: pushed (fate ''), or withheld
    as 'before start_at', 'excluded', 'after end_at', 'paused', 'skipped' or 'run limit';
    or 'dst': an instant the schedule's DST policy leaves unfired (no tick)."""

    tick: datetime
    fate: str = ""  # empty when pushed; else why not (see `upcoming`)
    note: str = ""  # DST move or repeat, what excluded it
    delivery: datetime | None = None  # with jitter: when the job is released


def upcoming(schedule: Schedule, after: datetime, *, count: int,
             until: datetime | None = None, runs: int = 0, skips: int = 0,
             paused_through: datetime | None = None) -> list[Upcoming]:
    """The schedule's next `count` ticks after `after` (up to `until`) that it pushes or an
    operator withholds, each rule applied and every tick it withholds listed: one line for
    the span before start_at, one per excluded date, and the tick past the end or the run
    limit, which ends the list. Each instant its DST policy leaves unfired on a DST night
    (a pass of a repeated hour, a skipped wall time: `Cron.dst_withheld`) is a line too,
    fate 'dst', not one of the `count`.

    The stored state applies as the invocations apply it (DESIGN §8), in this order: a
    pause in force (`paused_through`: its end, ENDED without one) passes over each tick at
    or before its end ('paused'); then the `skips` pending take the next standing ticks
    ('skipped', not counted as runs); then `runs` (pushed before) count towards `max_runs`
    ('run limit'). Paused and skipped ticks are lines of the `count`."""
    timetable = schedule.timetable
    inner = base(timetable)
    bounded = timetable if isinstance(timetable, Bounded) else None
    jitter_ms = round(schedule.jitter_s * 1000)
    left = runs_left(schedule.max_runs, runs)
    pause_note = ("" if paused_through is None else "until resumed"
                  if paused_through >= ENDED else f"until {z_text(paused_through)}")
    out: list[Upcoming] = []
    cursor = after
    shown = skipped = 0
    while shown < count:
        try:
            tick = inner.next_after(cursor)
        except ValueError:  # does not fire again
            break
        if tick >= ENDED or (until is not None and tick > until):
            break
        note = inner.dst_note(tick) if isinstance(inner, Cron) else ""
        if isinstance(inner, Cron):
            out.extend(Upcoming(t, "dst", n) for t, n in inner.dst_withheld(cursor, tick)
                       if bounded is None or not bounded.fate(t))
        why = bounded.fate(tick) if bounded is not None else ""
        if bounded is not None and bounded.start is not None and why == "before start_at":
            out.append(Upcoming(tick, why, f"starts at {z_text(bounded.start)}"))
            cursor = max(tick, bounded.start - _TINY)
            continue
        if bounded is not None and why == "excluded":
            day = bounded.local_date(tick)
            out.append(Upcoming(tick, why, f"{day.isoformat()} ({bounded.excluded_by(day)})"))
            cursor = max(tick, bounded._day_end(tick))
            continue
        if why:
            out.append(Upcoming(tick, why, note))
            break
        cursor = tick
        shown += 1
        if paused_through is not None and tick <= paused_through:
            out.append(Upcoming(tick, "paused", pause_note))
            continue
        if skipped < skips:
            skipped += 1
            out.append(Upcoming(tick, "skipped", f"{skipped:,} of {skips:,} pending"))
            continue
        if left == 0:
            out.append(Upcoming(tick, "run limit", f"max_runs {schedule.max_runs} reached"))
            break
        offset = jitter_offset_ms(schedule.name, to_ms(tick), jitter_ms)
        out.append(Upcoming(tick, "", note, tick + offset * _MS if jitter_ms else None))
        left = None if left is None else left - 1
    return out
