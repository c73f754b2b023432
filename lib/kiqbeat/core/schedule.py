"""The validated, immutable model of a schedule document: what to push, where, and when."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

CatchUp = Literal["all", "latest", "none"]
TimestampFormat = Literal["s", "ms"]
Overlap = Literal["allow", "skip", "buffer_one"]


class Timetable(Protocol):
    """When a schedule fires: a cron expression in a zone, or an epoch-anchored interval."""

    @property
    def key(self) -> str:
        """A string equal for timetables that fire at the same instants (used to share work)."""
        ...

    @property
    def zone_name(self) -> str:
        """The IANA zone its wall times are read in ("UTC" for intervals)."""
        ...

    @property
    def has_seconds(self) -> bool:
        """True when the timetable can fire between minute boundaries."""
        ...

    def between(self, after: datetime, until: datetime) -> list[datetime]:
        """Every fire instant in (after, until], aware UTC, ascending, without duplicates."""
        ...

    def next_after(self, after: datetime) -> datetime:
        """The first fire instant strictly after `after` (aware UTC); `lifecycle.ENDED` when
        none is left (a schedule past its end_at, a one-shot done)."""
        ...


@dataclass(frozen=True)
class Expectations:
    """What a schedule's jobs are expected to do, and what kiqbeat does when they do not:
    `silent` when a tick's job has not succeeded within `success_within_ms` of the tick,
    `failing` after `alert_after` failed ticks in a row, paused after `pause_after`."""

    success_within_ms: int | None = None
    alert_after: int | None = None
    pause_after: int | None = None

    def encode(self) -> str:
        """The form the incident script reads: "WITHIN ALERT PAUSE", 0 for none."""
        return f"{self.success_within_ms or 0} {self.alert_after or 0} {self.pause_after or 0}"


@dataclass(frozen=True)
class Schedule:
    """One recurring job: its timetable and the Sidekiq job it becomes at each tick."""

    name: str
    timetable: Timetable
    job_class: str
    queue: str = "default"
    args: tuple[Any, ...] = ()
    enabled: bool = True
    description: str = ""
    catch_up: CatchUp = "all"
    include_metadata: bool = False
    # "" for a plain Sidekiq job; otherwise the ActiveJob wrapper class name.
    active_job_wrapper: str = ""
    # Sidekiq job options and custom `payload:` keys, merged into every job.
    extra: Mapping[str, Any] = field(default_factory=dict)
    lookahead_s: float = 0.0
    timestamp_format: TimestampFormat = "s"
    # A schedule's life (DESIGN §8; start_at, end_at, at and except live in its timetable,
    # core/lifecycle.py): ticks it may ever push (None: no limit), each job's delivery
    # delay window, and whether a tick is pushed while the previous job still waits.
    max_runs: int | None = None
    jitter_s: float = 0.0
    overlap: Overlap = "allow"
    # What its jobs are expected to do (alerts/, DESIGN §12): None when it expects nothing.
    expectations: Expectations | None = None
    # A job not started within this many seconds of its tick is not run (the worker
    # middleware records it `expired`); 0: no limit.
    expires_after_s: float = 0.0
    # Ticks whose outcomes its record keeps (None: the `history` setting).
    history: int | None = None
    # Human-readable source of the timetable ("0 * * * * Asia/Kolkata", "every 15m").
    timing: str = ""
    # The schedule's stored form (DESIGN §7): its document fields with the document-wide
    # defaults it relies on written in, so that it means the same on its own.
    definition: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Config:
    """A whole schedule document after validation."""

    schedules: tuple[Schedule, ...]
    time_zone: str = "UTC"
    missed_jobs_window_s: float = 3600.0
    namespace: str = ""
    sidekiq_scheduler_ui: bool = False
    # Durability: after each push call, wait until this many replicas hold it (Redis WAIT).
    wait_replicas: int = 0
    wait_timeout_s: float = 1.0
    # Where the document came from: its schedules are stored as this source's (DESIGN §7).
    source: str = ""
    # Valid but risky or meaning-changing settings, shown by `validate` and logged once.
    warnings: tuple[str, ...] = ()
