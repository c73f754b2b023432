"""Backfills (DESIGN §2): the recorded missed ticks of schedules pushed, each at most once
whatever runs at the same time, counted first when asked, stopped by a deadline, a signal
or a job budget."""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import cast

from kiqbeat.core.instants import from_ms, to_ms, to_ms_up
from kiqbeat.core.payload import jid_ms
from kiqbeat.core.plan import MAX_BYTES_PER_CALL, MAX_JOBS_PER_CALL, TickMemo
from kiqbeat.core.records import BACKFILLED_BY_DEFAULT, Range
from kiqbeat.core.report import PushedJob
from kiqbeat.core.schedule import Schedule
from kiqbeat.errors import ConfigError, KiqbeatError
from kiqbeat.redis.definitions import definition_sha
from kiqbeat.redis.frames import Piece
from kiqbeat.redis.operator_reads import read_first_seen, read_missed
from kiqbeat.redis.pauses import read_pauses
from kiqbeat.store.backfill_plan import count_scope, pieces_of
from kiqbeat.store.context import StoreContext
from kiqbeat.store.operations import recorded_ranges
from kiqbeat.store.results import MAX_LISTED, Backfill

OVERLAP_HELD = ("overlap: skip: its previous job still waits or runs; its ticks stay recorded "
                "(backfill again once that job has run: one job a backfill)")



class Backfills:
    """One store's backfills."""

    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    def backfill(self, names: Sequence[str] = (), *, since: datetime | None = None,
                 until: datetime | None = None, latest_only: bool = False,
                 dry_run: bool = False, progress: Callable[[int], None] | None = None,
                 deadline: float | None = None, stop: Callable[[], bool] | None = None,
                 max_jobs: int | None = None, confirm_above: int | None = None,
                 pre_history: bool = True, reasons: Collection[str] = (),
                 must_exist: bool = False) -> Backfill:
        """Push the recorded missed ticks of `names` (default: every schedule with some) at
        or after `since` and at or before `until`, and take them out of the record.
        Only ranges recorded for one of `reasons` (default: every reason but "overlap",
        `BACKFILLED_BY_DEFAULT`: ticks an `overlap: skip` schedule passed over stay
        recorded unless asked for) are in scope; the others are left as they are.

        Each recorded tick is pushed at most once whatever runs at the same time (other
        backfills, invocations, a backfill killed half-way and run again): backfill.lua
        pushes a tick only while it is still recorded, and takes it out in the same step.
        The job is the tick's own (its jid, `include_metadata`'s `scheduled_at`) into the
        schedule's queue. `latest_only` pushes only the newest tick in scope per schedule
        and takes the rest out of the record unpushed. Paused schedules, and those without a
        valid definition, are left as they are (`skipped` says why). `progress(n)` follows
        each call: n ticks handled.

        `overlap: skip` (issue 26): while the schedule's previous job still waits or runs, a
        backfill pushes none of its ticks (`skipped` says so, OVERLAP_HELD); otherwise it
        pushes one, the oldest in scope, and only ticks up to it leave the record: at most
        one job of such a schedule a backfill, the rest for later backfills.

        Counting: `dry_run` pushes nothing and counts what would be, exactly up to
        MAX_COUNTED_TICKS (then `capped`). With `confirm_above`, a backfill that would push
        more jobs than that is refused (ConfigError, nothing pushed) after the same count;
        with `pre_history` False, so is one that would push a tick at or before its
        schedule's first-seen (DESIGN §2 "No pre-history": such ticks were never owed).

        Stopping: `max_jobs` pushes at most that many, oldest first per schedule, schedules
        in name order (what is left stays recorded for the next run). Past `deadline`
        (time.monotonic()) no call starts but the first, and once `stop()` is true none
        starts at all; each of the three ends it with `finished` False and `stopped` saying
        which. What was pushed is out of the record (`pushed`, `last`), and running it again
        pushes the rest, each tick once.

        A name with neither a definition nor a record is skipped ("no schedule of that
        name"), or, with `must_exist`, refused before anything is pushed
        (ScheduleNotFoundError naming each such name: the HTTP API's 404).
        """
        result = self._backfill(names, since_ms=None if since is None else to_ms_up(since),
                                until_ms=None if until is None else to_ms(until),
                                latest_only=latest_only, dry_run=dry_run, progress=progress,
                                deadline=deadline, stop=stop, max_jobs=max_jobs,
                                confirm_above=confirm_above, pre_history=pre_history,
                                reasons=frozenset(reasons) or BACKFILLED_BY_DEFAULT,
                                must_exist=must_exist)
        if not dry_run:
            scope = (f" of {len(names)} schedules" if len(names) > 1 else "" if names
                     else " (all)")
            self.ctx.audit("backfill", names[0] if len(names) == 1 else "",
                        f"{result.pushed} pushed{scope}")
        return result

    def _backfill(self, names: Sequence[str], *, since_ms: int | None, until_ms: int | None,
                  latest_only: bool, dry_run: bool, progress: Callable[[int], None] | None,
                  deadline: float | None, stop: Callable[[], bool] | None,
                  max_jobs: int | None, confirm_above: int | None,
                  pre_history: bool, reasons: frozenset[str], must_exist: bool) -> Backfill:
        # Every record parsed before the first push: a garbled one (written by hand) is
        # skipped, named with why, and costs only its schedule (definitions are checked one
        # by one below, within the deadline).
        result = Backfill()
        recorded: dict[str, builtins.list[Range]] = {}
        for name, text in read_missed(self.ctx.client, self.ctx.namespace, names):
            try:
                recorded[name] = recorded_ranges(name, text)
            except ConfigError as exc:  # that schedule only: the others are backfilled
                result.aside.append((name, str(exc)))
        result.skipped += result.aside
        definitions = self.ctx.side.read_present(builtins.list(names)
                                   or builtins.list(recorded))
        # Named, with neither definition nor record (one with a record is skipped below; a
        # garbled one is set aside above, named with its record).
        garbled = {n for n, _ in result.aside}
        missing = [n for n in names
                   if n not in definitions and n not in recorded and n not in garbled]
        if missing and must_exist:  # a typo: nothing is backfilled, not the rest
            raise self.ctx.no_schedule(missing)
        result.skipped += [(n, "no schedule of that name") for n in missing]
        clock, started = self.ctx.side.clock(), time.monotonic()
        memo = TickMemo()

        def late() -> bool:  # past the deadline, after a first call (which always goes)
            return deadline is not None and calls > 0 and time.monotonic() > deadline

        def stopping() -> str:
            if stop is not None and stop():
                return "signal"
            return "deadline" if late() else ""

        # The schedules in scope, and their ranges, in name order.
        scope: builtins.list[tuple[Schedule, builtins.list[Range]]] = []
        paused = read_pauses(self.ctx.client, self.ctx.namespace, builtins.list(recorded))
        for name, record in sorted(recorded.items()):
            schedule = self.ctx.schedule(name, definitions.get(name))
            if isinstance(schedule, str):
                result.skipped.append((name, schedule))
                continue
            pause = paused.get(name)
            if not schedule.enabled or (pause is not None and pause.holds_at(to_ms(clock))):
                result.skipped.append((name, "paused: resume it to backfill its missed ticks"))
                continue
            ranges = [c for r in record
                      if r.reason in reasons and (c := r.clip(since_ms, until_ms))]
            if ranges:
                scope.append((schedule, ranges))
        result.schedules = len(scope)

        def give_up() -> bool:  # counting: a signal, or the deadline (before any call)
            return ((stop is not None and stop())
                    or (deadline is not None and time.monotonic() > deadline))

        calls = 0
        if dry_run or confirm_above is not None or not pre_history:
            first_seen = read_first_seen(self.ctx.client, self.ctx.namespace,
                                         [s.name for s, _ in scope])
            count_scope(result, scope, first_seen, latest_only, give_up)
            if dry_run:
                return result
            if not pre_history and result.before_first_seen:
                raise ConfigError(
                    f"this backfill would push {result.before_first_seen:,}"
                    f"{'+' if result.capped else ''} tick(s) from before their schedule was "
                    "first seen, which were never owed (no pre-history): leave them out with "
                    "--since (`kiqbeat status NAME` shows first-seen), or confirm with --yes "
                    "(an event's \"yes\": true); nothing was pushed")
            if confirm_above is not None and result.planned > confirm_above:
                raise ConfigError(
                    f"this backfill would push {result.planned:,}{'+' if result.capped else ''}"
                    f" jobs of {result.schedules:,} schedule(s), more than "
                    f"{confirm_above:,} without confirmation: push them all with --yes, or at "
                    "most N (the oldest first; run it again for the next N) with --max-jobs N "
                    "(an event's \"yes\": true or \"max_jobs\": N); nothing was pushed")
            result.planned = result.dropped = 0
            result.before_first_seen, result.capped = 0, False

        batch: builtins.list[Piece] = []
        batch_jobs = batch_bytes = 0

        def flush() -> None:
            nonlocal calls, batch_jobs, batch_bytes
            try:
                call = self.ctx.side.push_backfill(batch, self.ctx.keep_history)
            except KiqbeatError as exc:
                if not calls:
                    raise
                raise type(exc)(f"{exc}; before this, {result.pushed:,} tick(s) were pushed by "
                                f"{calls} earlier call(s) and taken out of the record (running "
                                "the backfill again pushes the rest)") from exc
            result.pushed += call.pushed
            result.already += call.already
            result.stale += call.stale
            aside = [(name, f"left alone: {why}") for name, why in call.aside]
            result.skipped += aside
            result.aside += aside
            result.skipped += [(name, OVERLAP_HELD) for name in call.held]
            jobs = ((piece, tick) for piece in batch for tick, _ in piece.jobs)
            for (piece, tick), flag in zip(jobs, call.flags, strict=True):
                if flag == "1":
                    job = PushedJob(piece.name, from_ms(tick), jid_ms(piece.name, tick),
                                    piece.queue)
                    result.last = job
                    if len(result.jobs) < MAX_LISTED:
                        result.jobs.append(job)
            if progress is not None:
                progress(len(call.flags))
            batch.clear()
            calls, batch_jobs, batch_bytes = calls + 1, 0, 0

        def pieces() -> Iterator[Piece]:
            for schedule, ranges in scope:
                sha = definition_sha(cast(bytes, definitions[schedule.name]))  # Oversized: skipped

                def job(tick_ms: int, schedule: Schedule = schedule) -> str:
                    now = clock + timedelta(seconds=time.monotonic() - started)
                    return memo.payload(schedule, from_ms(tick_ms),
                                        jid_ms(schedule.name, tick_ms), now, scheduled=False)

                yield from pieces_of(schedule, sha, ranges, latest_only, job)

        for piece in pieces():
            why = stopping()
            if not why and max_jobs is not None and result.planned >= max_jobs:
                why = "max_jobs"
            if why:
                result.finished, result.stopped = False, why
                if why != "max_jobs":
                    return result  # the batch is not sent: it stays recorded
                break
            cut = False
            if max_jobs is not None and result.planned + len(piece.jobs) > max_jobs:
                # Cut after the last job allowed: the rest of the range stays recorded.
                jobs = piece.jobs[:max_jobs - result.planned]
                piece = replace(piece, through_ms=jobs[-1][0], jobs=jobs)
                result.finished, result.stopped, cut = False, "max_jobs", True
            result.planned += len(piece.jobs)
            size = sum(len(j) for _, j in piece.jobs)
            if batch and (len(batch) >= MAX_JOBS_PER_CALL
                          or batch_jobs + len(piece.jobs) > MAX_JOBS_PER_CALL
                          or batch_bytes + size > MAX_BYTES_PER_CALL):
                flush()
            batch.append(piece)
            batch_jobs, batch_bytes = batch_jobs + len(piece.jobs), batch_bytes + size
            if cut:
                break
        if batch:
            why = stopping()
            if why:
                result.finished, result.stopped = False, why
            else:
                flush()
        return result
