"""What one invocation did: the numbers that logs, metrics, the CLI and the handler report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kiqbeat.core.instants import from_ms

if TYPE_CHECKING:
    from kiqbeat.core.outcomes import Health


# Why a tick was passed over, in every count (DESIGN §2): `missed` ticks are lost (older than
# the window); `skipped` ones were passed over on purpose, by the schedule's catch_up policy,
# its pause, its `except` dates, a `schedules skip`, its `max_runs` or `overlap: skip`.
SKIP_REASONS = ("catch_up", "paused", "except", "skip", "max_runs", "overlap")


def counted(count: int, noun: str, plural: str = "", *, more: bool = False) -> str:
    """`count` and `noun` as a sentence has them: "1 schedule", "2 schedules", "1,000+ ticks"
    (`more`: the count stopped at a cap); `plural` when adding "s" is not it."""
    return (f"{count:,}{'+' if more else ''} "
            f"{noun if count == 1 and not more else plural or noun + 's'}")


@dataclass(frozen=True)
class PushedJob:
    """A job this invocation pushed (not one found already pushed)."""

    schedule: str
    tick: datetime
    jid: str
    queue: str | None  # None: into the `schedule` set, released by the worker at `tick`


@dataclass
class Report:
    """The outcome of one invocation."""

    now: datetime
    schedules: int = 0
    pushed: int = 0
    already_pushed: int = 0
    missed: int = 0  # ticks lost: older than the missed-jobs window (reason "window")
    skipped: int = 0  # ticks passed over on purpose, split by reason in `skipped_by_reason`
    missed_recorded: int = 0  # missed ticks recorded for a backfill (reason "window")
    skipped_recorded: int = 0  # skipped ticks recorded for a backfill (catch_up, overlap)
    # Skipped ticks by why (SKIP_REASONS): catch_up, paused, except, skip,
    # max_runs, overlap.
    skipped_by_reason: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(SKIP_REASONS, 0))
    # True when a schedule's missed ticks were more than are counted
    # (limits.MAX_MISSED_COUNTED, the cap `kiqbeat missed` counts to as well): `missed` and
    # `missed_recorded` are then lower bounds, shown with "+".
    missed_capped: bool = False
    new_schedules: int = 0
    # Largest (push time - tick instant) among ticks pushed into a queue, but for held ticks
    # released (`overlap: buffer_one`): they waited on purpose, for their previous job.
    lag_s: float = 0.0
    chunks: int = 0
    unreplicated: int = 0  # pushed jobs that fewer than `wait_replicas` replicas acknowledged
    # Schedules left alone: their definition changed between read and push, or their
    # watermark went below the one they were planned from (the store lost writes: a failover).
    stale: int = 0
    set_aside: int = 0  # stored definitions refused (invalid) and set aside
    documents_applied: int = 0  # changed documents applied to the store as a diff
    alert_events: int = 0  # alert events decided (alerts/: failing, silent, recovered, paused)
    alerts_delivered: int = 0  # alert events a sink acknowledged
    # Worker outcome entries this invocation folded into the schedules' records (after its
    # pushes; kiqbeat.outcomes), those still waiting in the inbox, and the health of each
    # schedule whose record changed (what the alerts decide on: O(outcomes since the last
    # invocation), never a scan of every schedule).
    outcomes_folded: int = 0
    outcomes_waiting: int = 0
    changed_health: list[Health] = field(default_factory=list, repr=False, compare=False)
    round_trips: int = 0
    duration_s: float = 0.0
    # When the due index next comes due, epoch ms, as far as this invocation saw (the lowest
    # entry above its `now` when it read, and the entries its pushes moved); None: nothing
    # more is indexed. `kiqbeat run` invokes again then, if that is before the next minute.
    next_due_ms: int | None = None
    warnings: list[str] = field(default_factory=list)
    # What the push calls pushed, as they came back: per schedule (name, queue, ticks,
    # releases, flags), a job's release 0 for its queue and flag "1" when pushed; a held
    # tick released is a run of its own, ahead of its schedule's. `jobs` lists them as
    # objects, built only when asked: a 10,000-job minute builds none.
    pushed_runs: list[tuple[str, str, Sequence[int], Sequence[int], str]] = field(
        default_factory=list, repr=False)
    _jobs: list[PushedJob] = field(default_factory=list, repr=False, compare=False)

    @property
    def jobs(self) -> list[PushedJob]:
        """Every job this invocation pushed, in push order (built when first asked)."""
        if self.pushed_runs:
            from kiqbeat.core.payload import jid_ms  # loaded by whatever pushed them

            self._jobs += [
                PushedJob(name, datetime.fromtimestamp(tick / 1000, tz=UTC),
                          jid_ms(name, tick), None if release else queue)
                for name, queue, ticks, releases, flags in self.pushed_runs
                for tick, release, flag in zip(ticks, releases, flags, strict=True)
                if flag == "1"]
            self.pushed_runs = []
        return self._jobs

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary: every field its repr shows (not the per-job list), in their
        order, `now` and `next_due` (`next_due_ms`) as ISO 8601, the durations rounded."""
        found = {"next_due" if f.name == "next_due_ms" else f.name: getattr(self, f.name)
                 for f in fields(self) if f.repr}
        due_ms = self.next_due_ms
        found.update(now=self.now.isoformat(), skipped_by_reason=dict(self.skipped_by_reason),
                     lag_s=round(self.lag_s, 3), duration_s=round(self.duration_s, 4),
                     next_due=None if due_ms is None else from_ms(due_ms).isoformat(),
                     warnings=list(self.warnings))
        return found

    def summary(self) -> str:
        """One human-readable line; a count that stopped at the cap ends in "+"."""
        more = "+" if self.missed_capped else ""
        recorded = self.missed_recorded + self.skipped_recorded
        recorded_text = (f" ({recorded}{more} recorded for kiqbeat backfill)" if recorded
                         else "")
        why = ", ".join(f"{reason} {n}" for reason, n in self.skipped_by_reason.items() if n)
        folded = (f", {self.outcomes_folded} job outcome{'' if self.outcomes_folded == 1 else 's'}"
                  " folded" if self.outcomes_folded else "")
        return (
            f"{self.now.isoformat(timespec='seconds')}: {counted(self.schedules, 'schedule')} "
            f"due, {self.pushed} pushed, {self.already_pushed} already pushed, "
            f"{self.missed}{more} missed beyond the window, {self.skipped} skipped"
            f"{f' ({why})' if why else ''}{recorded_text}, "
            f"largest lag {self.lag_s:.1f} s{folded} "
            f"({counted(self.round_trips, 'round trip')}, {self.duration_s * 1000:.0f} ms)"
        )


@dataclass(frozen=True)
class ReportMetric:
    """One number of a `Report` published as a metric, under the same field by every
    deployment: the Lambda's CloudWatch metric (handler/app.py) and `kiqbeat run
    --metrics-port`'s Prometheus one (kiqbeat.entrypoints.metrics)."""

    field: str  # the key of `Report.as_dict` it carries
    cloudwatch: str  # Powertools metric name (unit Count, or Seconds when `seconds`)
    # Prometheus name: a counter summed over invocations (exposed with `_total`), or, for
    # seconds, a gauge holding the last invocation's value.
    prometheus: str
    help: str
    seconds: bool = False
    # The `reason` label of a counter split by reason (one Prometheus name, one CloudWatch
    # metric per reason); "" for none.
    reason: str = ""

    def value(self, numbers: dict[str, Any]) -> Any:
        """Its number in a report's `as_dict`."""
        found = numbers[self.field]
        return found[self.reason] if self.reason else found


# Every number an invocation reports as a metric: the one table both exporters read.
REPORT_METRICS: tuple[ReportMetric, ...] = (
    ReportMetric("pushed", "TicksPushed", "kiqbeat_ticks_pushed", "ticks pushed"),
    ReportMetric("already_pushed", "TicksAlreadyPushed", "kiqbeat_ticks_already_pushed",
                 "ticks another invocation had pushed"),
    ReportMetric("missed", "TicksMissed", "kiqbeat_ticks_missed",
                 "ticks older than the missed-jobs window"),
    ReportMetric("missed_recorded", "MissedRecorded", "kiqbeat_missed_recorded",
                 "ticks lost (older than the window) recorded for a backfill"),
    *(ReportMetric("skipped_by_reason", f"TicksSkipped{reason.title().replace('_', '')}",
                   "kiqbeat_ticks_skipped", "ticks skipped on purpose, by reason",
                   reason=reason)
      for reason in SKIP_REASONS),
    ReportMetric("lag_s", "LargestLag", "kiqbeat_largest_lag_seconds",
                 "the last invocation's largest push time - tick instant", seconds=True),
    ReportMetric("schedules", "Schedules", "kiqbeat_schedules_planned",
                 "schedules due, summed over invocations"),
    ReportMetric("set_aside", "DefinitionsSetAside", "kiqbeat_definitions_set_aside",
                 "stored definitions set aside (invalid)"),
)
