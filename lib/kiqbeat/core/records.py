"""What kiqbeat records per schedule for its operators: missed ticks and recent pushes.

Pure: the push, backfill and trigger scripts write these records (redis/lua); this module
reads them and finds the ticks they name, for `missed`, `backfill` and `history`.

Missed ticks.

A schedule's missed ticks are recorded (by the push script, in the same step that moves
its watermark over them) as ranges `(after, through]` of epoch milliseconds with a reason:

- "window": older than `missed_jobs_window` when an invocation came (Redis unreachable,
  triggers stopped for longer than the window);
- "policy": passed over by `catch_up: latest` or `none`;
- "paused": due but not yet pushed when the schedule was paused (write.lua records them in
  the step that pauses it);
- "overlap": passed over by `overlap: skip` while the schedule's previous job still waited
  or ran (push.lua). A backfill leaves these alone unless asked for them by reason
  (`backfill --reason overlap`): running them late would be the overlap they avoided; and
  by `overlap: buffer_one` beyond the one tick it holds.

Held ticks. An `overlap: buffer_one` schedule holds at most one tick while its previous job
waits or runs (push.lua, life.lua's held hash: "TICK RELEASE N\\n", the N bytes of its
queue's name, the job's JSON); `held_tick_ms` reads which.

A range names instants, not ticks: the ticks in it are those of the schedule's timetable,
so a schedule firing every second and down for a month is one range, and the record of a
schedule stays small. Ticks that fall while a schedule is paused are never recorded
(pausing is asking for them not to run). The record keeps at most `MAX_RANGES` ranges.

Every recorded tick lies at or below the watermark, which only ever rises, so an invocation
never pushes it; a backfill pushes it and removes it from the record in one atomic step, so
it is pushed at most once however many backfills race (backfill.lua).

History. Each schedule's last `history` pushes (default `limits.DEFAULT_HISTORY`), newest first:
its tick, its jid, when it was pushed (Redis clock) and by what: an invocation ("tick"), a
backfill, a manual run (`trigger`), or an operator's skip (`schedules skip`: "skipped",
not pushed, never recorded as missed), whose jid is "manual" and 18 hex digits — never a
tick's 24 hex digits. `redis/progress.py` reads a history into `Push`es.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice

from kiqbeat.core.instants import from_ms, to_ms
from kiqbeat.core.limits import MAX_MISSED_COUNTED, MAX_PLANNABLE_MS
from kiqbeat.core.schedule import Timetable
from kiqbeat.errors import shown_name

KINDS = {"t": "tick", "b": "backfill", "m": "manual", "s": "skipped"}

REASONS = {"window": "older than the missed-jobs window",
           "policy": "skipped by the schedule's catch_up policy",
           "paused": "due but not yet pushed when the schedule was paused",
           "overlap": "passed over while its previous job still waited or ran "
                      "(overlap: skip, or buffer_one beyond the tick it held)"}
# What a backfill takes when not asked for reasons: every one but "overlap".
BACKFILLED_BY_DEFAULT = frozenset(REASONS) - {"overlap"}
# Ranges kept per schedule (records.lua drops the oldest "policy" one beyond, else the
# oldest): `catch_up: latest` on a schedule firing every second records one each invocation.
MAX_RANGES = 100
# Ticks are listed in steps of this much time; an empty step is skipped with next_after.
_STEP = timedelta(hours=1)


@dataclass(frozen=True)
class Range:
    """Recorded missed ticks of one schedule: those in (after_ms, through_ms]."""

    after_ms: int
    through_ms: int
    reason: str

    def clip(self, since_ms: int | None, until_ms: int | None) -> Range | None:
        """The part with ticks at or after `since_ms` and at or before `until_ms`."""
        after = self.after_ms if since_ms is None else max(self.after_ms, since_ms - 1)
        through = self.through_ms if until_ms is None else min(self.through_ms, until_ms)
        return Range(after, through, self.reason) if after < through else None


def parse_ranges(text: str) -> list[Range]:
    """The ranges of a record ("AFTER THROUGH REASON" lines); ValueError when garbled."""
    ranges = []
    for line in text.splitlines():
        after, through, reason = line.split(" ")
        if reason not in REASONS:
            raise ValueError(f"unknown reason {reason!r}")
        ranges.append(Range(_ms(after), _ms(through), reason))
    return ranges


def _ms(text: str) -> int:
    """Epoch ms as the scripts write them: ASCII digits, at most MAX_PLANNABLE_MS (a number
    written by hand beyond it is garbled: no instant kiqbeat shows or counts ticks to lies
    there)."""
    if not (text.isascii() and text.isdigit()) or len(text) > 15:
        raise ValueError(f"not a number of milliseconds: {text[:40]!r}")
    value = int(text)
    if value > MAX_PLANNABLE_MS:
        raise ValueError(f"{text!r} ms is past the year 9999")
    return value


def ticks_in(timetable: Timetable, after_ms: int, through_ms: int) -> Iterator[datetime]:
    """The timetable's ticks in (after_ms, through_ms], ascending, lazily (a range can hold
    millions)."""
    cursor, through = from_ms(after_ms), from_ms(through_ms)
    while True:
        first = timetable.next_after(cursor)  # ENDED, past any `through`, when none is left
        if first > through:
            return
        end = through if through - first <= _STEP else first + _STEP  # no datetime past 9999
        yield from timetable.between(cursor, end)
        cursor = end


def count_ticks(timetable: Timetable, after_ms: int, through_ms: int,
                cap: int = MAX_MISSED_COUNTED) -> tuple[int, bool]:
    """How many ticks (after_ms, through_ms] holds, counting at most `cap` (by default the
    cap an invocation's count stops at too, so `kiqbeat missed` and the report agree); and
    whether there are more."""
    count = sum(1 for _ in islice(ticks_in(timetable, after_ms, through_ms), cap + 1))
    return min(count, cap), count > cap


def last_tick_in(timetable: Timetable, after_ms: int, through_ms: int) -> datetime | None:
    """The newest tick in (after_ms, through_ms], found by looking back in doubling steps."""
    step = timedelta(minutes=1)
    through = from_ms(through_ms)
    end_ms = through_ms
    while end_ms > after_ms:
        start_ms = max(after_ms, to_ms(through - step))
        ticks = timetable.between(from_ms(start_ms), from_ms(end_ms))
        if ticks:
            return ticks[-1]
        end_ms, step = start_ms, step * 2
    return None


@dataclass(frozen=True)
class Push:
    """One push in a schedule's history."""

    kind: str  # "tick", "backfill", "manual" or "skipped" (KINDS)
    tick: datetime  # the tick instant (a manual run's: when it was asked for)
    jid: str
    when: datetime  # when it was pushed, by the Redis clock

    def line(self) -> str:
        """One line for a person (a manual run's jid as stored, escaped: `shown_name`)."""
        return (f"{self.when.isoformat(timespec='milliseconds')} {self.kind:8} tick "
                f"{self.tick.isoformat(timespec='seconds')} jid {shown_name(self.jid)}")

    def as_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"kind": self.kind, "tick": self.tick.isoformat(), "jid": self.jid,
                "when": self.when.isoformat()}


def held_tick_ms(raw: bytes | None) -> int | None:
    """The tick (epoch ms) a schedule's held record names; None when there is none or it is
    not one (push.lua sets such a schedule aside)."""
    head = (raw or b"").partition(b"\n")[0].split(b" ")
    if len(head) != 3 or not all(part.isdigit() and len(part) <= 15 for part in head):
        return None
    tick = int(head[0])
    return tick if tick <= MAX_PLANNABLE_MS else None
