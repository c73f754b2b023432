"""What a backfill would push, worked out without Redis: its count (exact up to
MAX_COUNTED_TICKS) and the parts of its push calls, one schedule's ranges at a time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from kiqbeat.core.instants import to_ms
from kiqbeat.core.limits import MAX_COUNTED_TICKS
from kiqbeat.core.plan import MAX_JOBS_PER_CALL
from kiqbeat.core.records import Range, last_tick_in, ticks_in
from kiqbeat.core.schedule import Schedule
from kiqbeat.redis.frames import Piece
from kiqbeat.store.results import Backfill


def count_scope(result: Backfill, scope: Sequence[tuple[Schedule, Sequence[Range]]],
                seen: Mapping[str, int], latest_only: bool, give_up: Callable[[], bool]) -> None:
    """Count a backfill's scope into `result` (planned, dropped, before_first_seen),
    exactly up to MAX_COUNTED_TICKS ticks in all (`seen`: each schedule's first-seen, epoch
    ms); `capped` when counting stopped there (or at the deadline, or a signal)."""
    budget = MAX_COUNTED_TICKS

    def count(schedule: Schedule, ranges: Iterable[Range]) -> int:
        nonlocal budget
        ticks = 0
        for r in ranges:
            for _ in ticks_in(schedule.timetable, r.after_ms, r.through_ms):
                if budget == 0 or (budget % 65_536 == 0 and give_up()):
                    result.capped = True
                    return ticks
                budget -= 1
                ticks += 1
        return ticks

    for schedule, ranges in scope:
        first_ms = seen.get(schedule.name)
        before = after = 0
        if first_ms is None:
            after = count(schedule, ranges)
        else:
            before = count(schedule, [c for r in ranges if (c := r.clip(None, first_ms))])
            after = count(schedule, [c for r in ranges if (c := r.clip(first_ms + 1, None))])
        ticks = before + after
        if latest_only:
            # The newest is pushed (from before first-seen only if all are), the older
            # taken out of the record.
            result.planned += 1 if ticks else 0
            result.dropped += max(0, ticks - 1)
            result.before_first_seen += 1 if before and not after else 0
        else:
            result.planned += ticks
            result.before_first_seen += before
        if result.capped:
            return


def pieces_of(schedule: Schedule, sha: str, ranges: Sequence[Range], latest_only: bool,
            job: Callable[[int], str]) -> Iterator[Piece]:
    """The backfill calls' parts for one schedule's ranges (ascending), at most
    MAX_JOBS_PER_CALL jobs each; each covers from where the last ended. A range (or, for
    `latest_only`, a scope) holding no tick gives none."""
    name, queue, timetable = schedule.name, schedule.queue, schedule.timetable
    limit = schedule.max_runs or 0  # backfilled ticks count as runs (backfill.lua)
    if schedule.overlap != "allow" and not latest_only:
        # One job at a time (backfill.lua): the oldest recorded tick, in a piece that ends
        # at it, so the later ticks stay recorded for a later backfill.
        for r in ranges:
            first = next(iter(ticks_in(timetable, r.after_ms, r.through_ms)), None)
            if first is not None:
                first_ms = to_ms(first)
                yield Piece(name, r.after_ms, first_ms, queue, sha, [(first_ms, job(first_ms))],
                            limit, overlap_skip=True)
                return
        return
    overlap = schedule.overlap != "allow"  # buffer_one backfills as skip does
    if latest_only:
        newest = next((t for r in reversed(ranges)
                       if (t := last_tick_in(timetable, r.after_ms, r.through_ms))), None)
        if newest is not None:
            # One piece a range (not one over the span: ranges of other reasons, out of
            # scope, may lie between them), the newest tick with its own.
            newest_ms = to_ms(newest)
            for r in ranges:
                held = r.after_ms < newest_ms <= r.through_ms
                yield Piece(name, r.after_ms, r.through_ms, queue, sha,
                            [(newest_ms, job(newest_ms))] if held else [], limit,
                            overlap_skip=overlap)
        return
    for r in ranges:
        after, any_tick = r.after_ms, False
        jobs: list[tuple[int, str]] = []
        for tick in ticks_in(timetable, r.after_ms, r.through_ms):
            if len(jobs) == MAX_JOBS_PER_CALL:
                yield Piece(name, after, jobs[-1][0], queue, sha, jobs, limit, overlap)
                after, jobs = jobs[-1][0], []
            tick_ms = to_ms(tick)
            jobs.append((tick_ms, job(tick_ms)))
            any_tick = True
        if any_tick:  # a scope without a tick leaves the record as it is (no split)
            yield Piece(name, after, r.through_ms, queue, sha, jobs, limit, overlap)
