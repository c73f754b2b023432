"""What the operator's commands answer: missed ranges, a backfill's account, a manual run
(each with a line for a person and a JSON-ready form)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kiqbeat.core.records import REASONS
from kiqbeat.core.report import PushedJob
from kiqbeat.errors import json_name, shown_name

MAX_LISTED = 1000  # pushed jobs a Backfill lists


@dataclass(frozen=True)
class MissedRange:
    """Recorded missed ticks of one schedule: those in (after, through]."""

    name: str
    after: datetime
    through: datetime
    reason: str  # "window", "policy", "paused" or "overlap" (core/records.py REASONS)
    ticks: int | None  # counted with the current definition (None: there is none)
    capped: bool  # counting stopped at limits.MAX_MISSED_COUNTED: there are more

    def line(self) -> str:
        """One line for a person (`kiqbeat missed`)."""
        count = ("? ticks (no valid definition)" if self.ticks is None else
                 f"{self.ticks:,}{'+' if self.capped else ''} tick(s)")
        return (f"{shown_name(self.name)}: {count} after "
                f"{self.after.isoformat(timespec='seconds')} through "
                f"{self.through.isoformat(timespec='seconds')}: {REASONS[self.reason]}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**json_name(self.name), "after": self.after.isoformat(),
                "through": self.through.isoformat(), "reason": self.reason,
                "ticks": self.ticks, "capped": self.capped}


@dataclass
class Backfill:
    """What a backfill did (or, dry, would do)."""

    schedules: int = 0  # schedules with recorded ticks in scope
    planned: int = 0  # ticks it meant to push (a dry run counts at most MAX_MISSED_COUNTED a range)
    capped: bool = False  # a dry run's count stopped at MAX_COUNTED_TICKS: there are more
    dropped: int = 0  # a latest-only dry run: older ticks it would take out unpushed
    before_first_seen: int = 0  # a dry run: ticks it would push from before first-seen
    pushed: int = 0
    already: int = 0  # pushed by another backfill first
    stale: int = 0  # ticks left alone: the definition changed meanwhile (run it again)
    finished: bool = True  # False: stopped early (`stopped`); run it again for the rest
    stopped: str = ""  # why it stopped early: "deadline", "signal" or "max_jobs"
    last: PushedJob | None = None  # the last job pushed
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (name, why): not touched
    # (name, why): of those skipped, set aside for a stored value kiqbeat cannot read (its
    # missed record, run count or progress record written by hand): fix it, backfill again
    aside: list[tuple[str, str]] = field(default_factory=list)
    jobs: list[PushedJob] = field(default_factory=list)  # the first MAX_LISTED pushed

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        def job(j: PushedJob) -> dict[str, Any]:
            return {**json_name(j.schedule, "schedule"), "tick": j.tick.isoformat(),
                    "jid": j.jid, "queue": j.queue}
        return {"schedules": self.schedules, "planned": self.planned, "capped": self.capped,
                "dropped": self.dropped, "before_first_seen": self.before_first_seen,
                "pushed": self.pushed, "already": self.already, "stale": self.stale,
                "finished": self.finished, "stopped": self.stopped or None,
                "last": job(self.last) if self.last else None,
                "skipped": [{**json_name(n), "why": w} for n, w in self.skipped],
                "aside": [{**json_name(n), "why": w} for n, w in self.aside],
                "jobs": [job(j) for j in self.jobs]}


@dataclass(frozen=True)
class Triggered:
    """A manual run: the job pushed now."""

    name: str
    jid: str
    queue: str
    at: datetime

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**json_name(self.name), "jid": self.jid, "queue": self.queue,
                "at": self.at.isoformat()}
