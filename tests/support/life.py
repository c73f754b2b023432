"""The reference model of push.lua's rule for a group's due ticks (DESIGN §8; docs/store.md,
"In the push step"): which ticks a push step pushes, skips, holds or passes over, given the
schedule's run count, its pending skips and whether its previous job is still waiting.
Nothing in kiqbeat runs it: tests/unit/test_lifecycle.py states the rule with it (`max_runs`
never exceeded, whatever the interleaving of racing invocations) and
tests/integration/test_lifecycle.py checks the script against it on a real Redis."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from kiqbeat.core.lifecycle import runs_left


class Fate(StrEnum):
    """What the push step does with one due tick."""

    PUSH = "push"
    SKIPPED = "skipped"  # an operator's `schedules skip` (recorded in history, not missed)
    OVERLAP = "overlap"  # `overlap: skip` and a job still waiting (recorded as missed)
    # `overlap: buffer_one` and a job still waiting: held, pushed once that job has ended
    # (counted as a run when held; at most one per schedule).
    HELD = "held"
    LIMIT = "limit"  # `max_runs` reached: the schedule has ended


def fates(count: int, *, runs: int = 0, max_runs: int | None = None, skips: int = 0,
          overlap_busy: bool | None = None, buffer_one: bool = False,
          holding: bool = False) -> list[Fate]:
    """The fate of each of a group's `count` due ticks, oldest first.

    In this order: the schedule's pending `skips` take the first ticks (they are the next
    ones); with `overlap: skip` (`overlap_busy` not None) a tick is pushed only when no job
    of the schedule is waiting, so at most one per group, none if one was already waiting;
    with `buffer_one` too, the first tick that finds a job waiting is held instead, unless
    the schedule is `holding` one already (its held tick, when that job has ended, was
    pushed before these: then `overlap_busy`); `max_runs` then caps what is pushed or
    held, counting `runs` before. Skipped ticks do not count as runs.
    """
    out: list[Fate] = []
    left = runs_left(max_runs, runs)
    busy = bool(overlap_busy)
    for _ in range(count):
        if skips > 0:
            skips -= 1
            out.append(Fate.SKIPPED)
        elif left == 0:
            out.append(Fate.LIMIT)
        elif busy and buffer_one and not holding:
            out.append(Fate.HELD)
            holding = True
            left = None if left is None else left - 1
        elif busy:
            out.append(Fate.OVERLAP)
        else:
            out.append(Fate.PUSH)
            left = None if left is None else left - 1
            busy = overlap_busy is not None  # the job just pushed is now waiting
    return out


@dataclass(frozen=True)
class Ledger:
    """A schedule's state as the push step sees it: the watermark, the ticks pushed over its
    life, the skips still pending. `step` is one atomic push; racing invokers only change
    which ticks each step is offered."""

    watermark_ms: int = 0
    runs: int = 0
    skips: int = 0

    def step(self, ticks_ms: Sequence[int], *, max_runs: int | None = None
             ) -> tuple[Ledger, list[int]]:
        """The state after one push step offered `ticks_ms` (ascending), and the ticks it
        pushed: only ticks above the watermark count; the watermark passes all of them."""
        fresh = [t for t in ticks_ms if t > self.watermark_ms]
        if not fresh:
            return self, []
        decided = fates(len(fresh), runs=self.runs, max_runs=max_runs, skips=self.skips)
        pushed = [t for t, f in zip(fresh, decided, strict=True) if f is Fate.PUSH]
        skipped = sum(f is Fate.SKIPPED for f in decided)
        return replace(self, watermark_ms=fresh[-1], runs=self.runs + len(pushed),
                       skips=self.skips - skipped), pushed
