"""Every nominal tick of a span, each with exactly one outcome (`kiqbeat report`, the API,
the console): the pure join of a schedule's timetable with what kiqbeat and the worker
recorded.

A tick is exactly one of (docs/operations.md, "Every tick accounted for"; seams-27 §5):

- `succeeded`, `failed` (error, attempts), `running`, `expired`: the worker middleware said
  so (the outcome record, kiqbeat.core.outcomes);
- `waiting`: pushed, no outcome yet, and its job is still in its queue or the `schedule` set
  (found by jid, a bounded look);
- `held`: `overlap: buffer_one` held it while the previous job waited or ran; it is pushed
  once that job ends (then `waiting`, and its outcome);
- `backfilled`: pushed by `kiqbeat backfill`, no outcome reported;
- `pushed`: pushed by an invocation, no outcome reported (no middleware, or the job vanished);
- `skipped`, with its reason: `overlap`, `except` (an excluded date), `paused` (passed over
  while paused or disabled), `skip` (`kiqbeat schedules skip`), `catch_up` (the schedule's
  catch_up policy);
- `missed`, reason `window`: older than the missed-jobs window when an invocation came;
- `pending`: not yet pushed (not yet due, or due and not yet planned).

What kiqbeat keeps is bounded (the last N pushes and outcomes, at most 100 missed ranges),
so the list starts where its knowledge starts (`known_after_ms`): after the later of when
kiqbeat first saw the schedule (no earlier tick is ever its) and, once the history is full,
just before its oldest push.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import islice
from typing import Any

from kiqbeat.core.instants import from_ms, to_ms
from kiqbeat.core.lifecycle import Bounded
from kiqbeat.core.outcomes import Outcomes
from kiqbeat.core.pause import Pause
from kiqbeat.core.records import Push, Range, ticks_in
from kiqbeat.core.schedule import Timetable

# The outcomes of the vocabulary (seams-27 §5), in the order the counts are shown.
TICK_OUTCOMES = ("succeeded", "failed", "running", "expired", "waiting", "held",
                 "backfilled", "pushed", "skipped", "missed", "pending")
# A recorded missed range's reason -> (outcome, reason) in the report's words.
_RANGE_REASONS = {"window": ("missed", "window"), "policy": ("skipped", "catch_up"),
                  "catch_up": ("skipped", "catch_up"), "paused": ("skipped", "paused"),
                  "overlap": ("skipped", "overlap"), "except": ("skipped", "except"),
                  "skip": ("skipped", "skip")}
# At most this many ticks are listed (an every-second schedule's day has 86,400).
MAX_REPORTED_TICKS = 10_000


@dataclass(frozen=True)
class ClassifiedTick:
    """One nominal tick and its one outcome, with what is known of its job."""

    tick_ms: int
    outcome: str
    reason: str | None = None
    jid: str | None = None
    attempts: int | None = None
    duration_ms: int | None = None
    error: str | None = None
    started_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: `tick` (ISO), `outcome`, `jid`, and the rest where known."""
        found: dict[str, Any] = {"tick": from_ms(self.tick_ms).isoformat(),
                                 "outcome": self.outcome, "jid": self.jid}
        for key, value in (("reason", self.reason), ("attempts", self.attempts),
                           ("duration_ms", self.duration_ms), ("error", self.error)):
            if value is not None:
                found[key] = value
        if self.started_ms is not None:
            found["started"] = from_ms(self.started_ms).isoformat()
        return found

    def line(self) -> str:
        """One line for a person."""
        text = f"{from_ms(self.tick_ms).isoformat(timespec='seconds')}  {self.outcome}"
        if self.reason:
            text += f" ({self.reason})"
        if self.attempts and self.attempts > 1:
            text += f", attempt {self.attempts}"
        if self.duration_ms is not None:
            text += f", {self.duration_ms / 1000:.3f} s"
        if self.error:
            text += f": {self.error}"
        if self.jid:
            text += f"  jid {self.jid}"
        return text


@dataclass(frozen=True)
class TickReport:
    """A schedule's ticks in (since, until], classified, after `known_after_ms`."""

    name: str
    since_ms: int
    until_ms: int
    known_after_ms: int | None  # ticks after it are known; None: nothing is (never seen)
    ticks: tuple[ClassifiedTick, ...]
    truncated: bool = False  # more than MAX_REPORTED_TICKS: the oldest are listed
    counts: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """`{"schedule", "since", "until", "known_after", "ticks": [...], "counts",
        "truncated"}`."""
        return {"schedule": self.name, "since": from_ms(self.since_ms).isoformat(),
                "until": from_ms(self.until_ms).isoformat(),
                "known_after": (None if self.known_after_ms is None
                                else from_ms(self.known_after_ms).isoformat()),
                "ticks": [t.as_dict() for t in self.ticks], "counts": dict(self.counts),
                "truncated": self.truncated}

    def lines(self) -> list[str]:
        """Lines for a person: where knowledge starts, each tick, the counts."""
        known = ("nothing recorded yet" if self.known_after_ms is None else
                 "known after "
                 f"{from_ms(self.known_after_ms).isoformat(timespec='milliseconds')}")
        out = [f"{self.name}: ticks in ({from_ms(self.since_ms).isoformat(timespec='seconds')}"
               f", {from_ms(self.until_ms).isoformat(timespec='seconds')}], {known}"]
        out += ["  " + t.line() for t in self.ticks]
        if self.truncated:
            out.append(f"  ... (the first {MAX_REPORTED_TICKS:,} ticks; narrow --since/--until)")
        out.append("  " + ", ".join(f"{n} {k}" for k, n in self.counts.items()) if self.counts
                   else "  no ticks")
        return out


def known_after_ms(first_seen_ms: int | None, history: Sequence[Push], keep: int
                   ) -> int | None:
    """The instant after which a schedule's ticks are known: when kiqbeat first saw it (no
    tick at or before it is ever pushed), or, once its history holds `keep` entries (full:
    older ones were dropped), just before the oldest."""
    if history and keep and len(history) >= keep:
        oldest = min(to_ms(p.tick) for p in history) - 1
        return oldest if first_seen_ms is None else max(oldest, first_seen_ms)
    return first_seen_ms


def nominal_ticks(timetable: Timetable, since_ms: int, until_ms: int, limit: int
                  ) -> tuple[list[tuple[int, bool]], bool]:
    """The timetable's ticks in (since, until] as (epoch ms, on an excluded date), ascending,
    at most `limit` (and whether there were more). A bounded timetable's excluded dates are
    nominal ticks too (skipped, reason except); its start and end bound them."""
    def first(timetable: Timetable, after_ms: int, until_ms: int) -> list[int]:
        return [to_ms(t) for t in islice(ticks_in(timetable, after_ms, until_ms), limit + 1)]

    if isinstance(timetable, Bounded) and timetable.excluded:
        start, end = timetable.start, timetable.end
        lo = max(since_ms, to_ms(start - timedelta(milliseconds=1))) if start else since_ms
        hi = min(until_ms, to_ms(end)) if end else until_ms
        kept = set(first(timetable, since_ms, until_ms))
        ticks = [(t, t not in kept) for t in first(timetable.inner, lo, hi)]
    else:
        ticks = [(t, False) for t in first(timetable, since_ms, until_ms)]
    return ticks[:limit], len(ticks) > limit


def classify_ticks(
    name: str, timetable: Timetable, *, since_ms: int, until_ms: int, now_ms: int,
    mark_ms: int | None, first_seen_ms: int | None, history: Sequence[Push], keep: int,
    outcomes: Outcomes | None, last_error: str | None, missed: Sequence[Range],
    pause: Pause | None, enabled: bool, waiting: Collection[str],
    jid_of: Any, limit: int = MAX_REPORTED_TICKS, held_ms: int | None = None,
) -> TickReport:
    """Every nominal tick of schedule `name` in (since, until] from where knowledge starts,
    each with exactly one outcome (module docstring). `history`: its pushes (`keep` the
    history length); `outcomes` and `last_error`: its outcome record; `missed`: its recorded
    ranges; `pause`: its pause record; `waiting`: the jids found still waiting in their queue
    or the `schedule` set; `jid_of(name, tick_ms)`: a tick's jid (core.payload.jid_ms);
    `held_ms`: the tick `overlap: buffer_one` holds (None: none)."""
    known = known_after_ms(first_seen_ms, history, keep)
    if outcomes is not None and outcomes.ticks and known is not None:
        # Outcomes kept further back than the pushes (a longer `history` of its own).
        oldest = outcomes.ticks[-1].tick_ms - 1
        if oldest < known:
            known = oldest if first_seen_ms is None else max(oldest, first_seen_ms)
    start_ms = since_ms if known is None else max(since_ms, known)
    listed, truncated = (([], False) if known is None and mark_ms is None
                         else nominal_ticks(timetable, start_ms, until_ms, limit))
    pushes = {to_ms(p.tick): p for p in history if p.kind in ("tick", "backfill", "skipped")}
    reported = {t.tick_ms: t for t in (outcomes.ticks if outcomes else ()) if not t.manual}
    error_tick, _, error_text = (last_error or "").partition("\t")
    ticks: list[ClassifiedTick] = []
    counts = dict.fromkeys(TICK_OUTCOMES, 0)
    for tick_ms, excluded in listed:
        jid = jid_of(name, tick_ms)
        found = (ClassifiedTick(tick_ms, "held", None, jid) if tick_ms == held_ms
                 else _classified(tick_ms, jid, excluded, now_ms, mark_ms, pushes, reported,
                                  missed, pause, enabled, waiting))
        if found.outcome == "failed" and error_tick == str(tick_ms):
            found = ClassifiedTick(**{**found.__dict__, "error": error_text})
        ticks.append(found)
        counts[found.outcome] += 1
    return TickReport(name, since_ms, until_ms, known, tuple(ticks), truncated,
                      {k: n for k, n in counts.items() if n})


def _classified(tick_ms: int, jid: str, excluded: bool, now_ms: int, mark_ms: int | None,
                pushes: dict[int, Push], reported: dict[int, Any], missed: Sequence[Range],
                pause: Pause | None, enabled: bool, waiting: Collection[str]
                ) -> ClassifiedTick:
    if excluded:
        return ClassifiedTick(tick_ms, "skipped", "except")
    outcome = reported.get(tick_ms)
    if outcome is not None:
        return ClassifiedTick(tick_ms, outcome.state, None, jid, outcome.attempt,
                              outcome.duration_ms, None, outcome.started_ms)
    push = pushes.get(tick_ms)
    if push is not None:
        if push.kind == "skipped":
            return ClassifiedTick(tick_ms, "skipped", "skip")
        if jid in waiting:
            return ClassifiedTick(tick_ms, "waiting", None, jid)
        return ClassifiedTick(tick_ms, "backfilled" if push.kind == "backfill" else "pushed",
                              None, jid)
    for r in missed:
        if r.after_ms < tick_ms <= r.through_ms:
            outcome_word, reason = _RANGE_REASONS.get(r.reason, ("missed", r.reason))
            return ClassifiedTick(tick_ms, outcome_word, reason)
    if tick_ms > now_ms:
        return ClassifiedTick(tick_ms, "pending", None, jid)
    if mark_ms is None or tick_ms > mark_ms:
        # Due, not yet planned: the next invocation passes it over if paused or disabled.
        held = not enabled or (pause is not None and tick_ms <= pause.through_ms)
        return (ClassifiedTick(tick_ms, "skipped", "paused") if held
                else ClassifiedTick(tick_ms, "pending", None, jid))
    # Passed over by the watermark, never pushed and not recorded as missed: only a pause
    # or a disabled schedule does that (core/pause.py: nothing is recorded).
    return ClassifiedTick(tick_ms, "skipped", "paused")
