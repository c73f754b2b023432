"""A pause with a note and an end (DESIGN §8), as a record of its own and a pure rule.

The promise:

- A pause is a record beside the definition (`Pause`: note, who, when, until), never part
  of it, so a document that rewrites the schedule's definition leaves it paused; only
  resume, the end of the pause or removing the schedule end it.
- While paused, every tick at or before `until` (every tick, without one) is passed over
  as a disabled schedule's are: the watermark moves over it, nothing is pushed and nothing
  is recorded as missed, so resuming never backfills the paused span. Ticks not yet pushed
  when the pause was written are passed over too.
- At `until` the schedule resumes by itself: the first tick after `until` is pushed as any
  tick is (caught up within the window; never early; once).
- A record that cannot be read (written by hand) still means "paused", without an end.

`planned` is the rule the planner applies per schedule; the record's JSON is what other
languages read and write (docs/store.md, "Pausing").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from kiqbeat.core import json_text
from kiqbeat.core.instants import ENDED_MS, from_ms, to_ms, z_text
from kiqbeat.core.limits import MAX_PAUSE_NOTE_CHARS, MAX_SHOWN_CHARS
from kiqbeat.core.schedule import Schedule
from kiqbeat.errors import ConfigError, shown


@dataclass(frozen=True)
class Pause:
    """One schedule's pause: why (`note`), who (`by`), when (`at_ms`, epoch ms) and until when
    (`until_ms`, epoch ms; None: until resumed)."""

    note: str = ""
    by: str = ""
    at_ms: int = 0
    until_ms: int | None = None

    @property
    def through_ms(self) -> int:
        """The last instant whose ticks it passes over (ENDED_MS without an end)."""
        return ENDED_MS if self.until_ms is None else self.until_ms

    def holds_at(self, now_ms: int) -> bool:
        """True while it is in force at `now_ms` (its end, if any, not yet passed)."""
        return self.through_ms >= now_ms

    def encode(self) -> bytes:
        """Its stored form: compact JSON {"note", "by", "at", "until"} (ms; until null)."""
        return json.dumps({"note": self.note, "by": self.by, "at": self.at_ms,
                           "until": self.until_ms}, separators=(",", ":"),
                          ensure_ascii=False).encode(errors="surrogateescape")

    @classmethod
    def decode(cls, data: bytes | str) -> Pause:
        """The pause a stored record says; one that cannot be read is a pause without an end
        (a record present always means "paused"), its note saying so."""
        try:
            value: Any = json_text.loads(data)
        except (ValueError, RecursionError):
            value = None
        if not isinstance(value, dict):
            return cls(note=f"(unreadable pause record: {shown(data)})")
        note, by, at, until = (value.get(k) for k in ("note", "by", "at", "until"))
        return cls(note=note[:MAX_PAUSE_NOTE_CHARS] if isinstance(note, str) else "",
                   by=by[:MAX_SHOWN_CHARS] if isinstance(by, str) else "",
                   at_ms=_ms(at) or 0, until_ms=_ms(until))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form for the API and `--json` outputs: instants as ISO 8601 UTC."""
        return {"note": self.note, "by": self.by, "at": z_text(from_ms(self.at_ms)),
                "until": None if self.until_ms is None else z_text(from_ms(self.until_ms))}

    def line(self) -> str:
        """Its words for a person: 'paused by alice@host at ... until ...: note'."""
        until = "" if self.until_ms is None else f" until {z_text(from_ms(self.until_ms))}"
        by = f" by {self.by}" if self.by else ""
        at = f" at {z_text(from_ms(self.at_ms))}" if self.at_ms else ""
        note = f": {self.note}" if self.note else ""
        return f"paused{by}{at}{until}{note}"


def _ms(value: object) -> int | None:
    """A whole epoch-ms number from a record, or None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= ENDED_MS:
        return None
    return value


def until_iso(pause: Pause) -> str:
    """The pause's end as ISO 8601 UTC ('' without one)."""
    return "" if pause.until_ms is None else z_text(from_ms(pause.until_ms))


def pause_of(note: str, by: str, at_ms: int, until: datetime | None) -> Pause:
    """A new pause written at `at_ms` (the Redis clock); ConfigError for a note over
    MAX_PAUSE_NOTE_CHARS or an `until` not after `at_ms` (a past end would pause nothing)."""
    if not isinstance(note, str):
        raise ConfigError(f"pause note: {shown(note)} must be text")
    if len(note) > MAX_PAUSE_NOTE_CHARS:
        raise ConfigError(f"pause note: {len(note):,} characters, over the limit of "
                          f"{MAX_PAUSE_NOTE_CHARS:,} (kiqbeat.core.limits."
                          "MAX_PAUSE_NOTE_CHARS): {shown(note)}")
    until_ms = None
    if until is not None:
        if until.tzinfo is None:
            raise ConfigError(f"pause until: {shown(until.isoformat())} has no UTC offset; "
                              "add 'Z' or '+hh:mm'")
        until_ms = to_ms(until)
        if until_ms <= at_ms:
            raise ConfigError(f"pause until: {until.isoformat()} is not in the future (the "
                              f"Redis clock reads {z_text(from_ms(at_ms))}); nothing was paused")
        if until_ms >= ENDED_MS:
            raise ConfigError(f"pause until: {until.isoformat()} is beyond any instant "
                              "kiqbeat plans; pause without --until instead")
    return Pause(note, by[:MAX_SHOWN_CHARS], at_ms, until_ms)


def planned(schedule: Schedule, mark_ms: int | None, pause: Pause | None,
            now_ms: int) -> tuple[Schedule, int | None]:
    """The schedule and mark the planner plans with, given its pause at `now_ms`: while the
    pause holds, the schedule as disabled (its ticks passed over, the mark moving); once
    its end has passed, the mark moved up to the end, so the paused span is passed over
    and the ticks after it are planned as any are (a new schedule is left as it is: it
    registers at `now`, after the end)."""
    if pause is None:
        return schedule, mark_ms
    if pause.holds_at(now_ms):
        return (schedule if not schedule.enabled else replace(schedule, enabled=False)), mark_ms
    if mark_ms is None:
        return schedule, None
    return schedule, max(mark_ms, pause.through_ms)
