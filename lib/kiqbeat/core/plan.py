"""Deciding what one invocation pushes: pure, given the config, the stored marks and `now`.

The promise (DESIGN §1–2), per schedule, with `wm` its stored watermark:

- no watermark: the schedule is new; `now` becomes its first-seen and nothing before it is
  pushed (no backfill); with `lookahead`, its ticks in (now, now + lookahead] go to the
  `schedule` set at once and the mark covers them, so its first ticks are on time too;
- ticks in (wm, now - window] are *missed*: counted, never pushed, covered by the mark;
- ticks in (max(wm, now - window), now] are *due*, and with `lookahead` so are those up to
  now + lookahead (they go to the `schedule` set, scored by their instant);
- `catch_up: all` pushes every due tick, `latest` only the newest one at or before now,
  `none` only those less than `ON_TIME_S` old (two trigger periods: EventBridge fires
  anywhere within its minute, so consecutive invocations can be nearly 2 min apart
  without any being missed); the rest are *skipped*;
- missed and skipped ticks are recorded as ranges (`core.missed`) with the mark, for a
  later backfill: missed ones as (wm, now - window], skipped ones as the span from the
  lower bound to the last skipped tick (they come before every kept one);
- a disabled schedule pushes and records nothing, but its mark still moves over its ticks
  (those older than the window too), so re-enabling it does not backfill the paused period.

The mark sent with a group covers everything the group decided about; the push script
applies it only above the stored one, which is what makes concurrent plans safe. A group
planned for a new schedule says so: if another copy registered the schedule first, the
script leaves it alone, jobs included (its mark would otherwise jump over ticks the other
copy owes, and its ticks between the two copies' `now` would come from before first-seen).
Such a group is therefore never split across calls: a later part would meet the first
part's watermark, or the winner's, and could not tell them apart. Its jobs are capped to
what one call carries (200 jobs, 512 KiB); ticks beyond the cap go with the next
invocation, like any tick beyond the lookahead.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from kiqbeat.core.limits import MAX_SHARDS
from kiqbeat.core.payload import JobTemplates, jid_ms
from kiqbeat.core.schedule import Config, Schedule, Timetable
from kiqbeat.errors import ConfigError

# `catch_up: none` still pushes ticks this fresh: one trigger period, the normal lag.
ON_TIME_S = 120.0
# Counting missed ticks stops here; a schedule firing every second that was down for a
# month would otherwise cost millions of steps just to print a number.
MISSED_COUNT_CAP = 10_000
# One push-script call carries at most this many jobs / payload bytes, so a large
# catch-up never blocks Redis for more than a few milliseconds at a time.
MAX_JOBS_PER_CALL = 200
MAX_BYTES_PER_CALL = 512 * 1024


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def to_ms(instant: datetime) -> int:
    """Epoch milliseconds of an aware datetime, rounded down: a mark taken at `now` must
    never cover a tick that comes after `now`."""
    return (instant - _EPOCH) // _MS


def to_ms_up(instant: datetime) -> int:
    """Epoch milliseconds of an aware datetime, rounded up: the first whole millisecond at or
    after it (a bound "at or after `instant`")."""
    return -((_EPOCH - instant) // _MS)


def from_ms(ms: int) -> datetime:
    """Aware UTC datetime of epoch milliseconds."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def check_shard(index: int, count: int) -> tuple[int, int]:
    """(index, count) when it names a shard; ConfigError otherwise (a count above MAX_SHARDS
    included: a typo such as 0/100000000 must not reach the store)."""
    if count > MAX_SHARDS:
        raise ConfigError(f"invalid shard {index}/{count}: at most {MAX_SHARDS:,} shards "
                          "(kiqbeat.core.limits.MAX_SHARDS)")
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"invalid shard {index}/{count}: expected INDEX/COUNT with "
                          "0 <= INDEX < COUNT")
    return index, count


def shard_of(name: str, count: int) -> int:
    """The shard (0..count-1) a schedule belongs to: a stable hash of its name only (of its
    bytes, as any language computes it, a name read from Redis that was not UTF-8 included)."""
    return zlib.crc32(name.encode(errors="surrogateescape")) % count


@dataclass(frozen=True)
class Job:
    """One tick of one schedule, ready to push."""

    schedule: str
    tick_ms: int
    queue: str | None  # None: the `schedule` set (lookahead), not a queue
    jid: str
    payload: str


@dataclass
class Group:
    """What one invocation decided for one schedule: its jobs and the mark covering them."""

    name: str
    mark_ms: int
    missed: int = 0
    skipped: int = 0
    jobs: list[Job] = field(default_factory=list)
    # No stored mark when planned: register the schedule (first-seen = the plan's now) and
    # push its jobs, all after that now; or, if a mark is found, do nothing at all.
    new: bool = False
    # The due index entry that goes with mark_ms (epoch ms it next needs planning; 0: at
    # once), and the SHA1 of the stored definition it was planned from.
    next_due_ms: int = 0
    sha: str = ""
    # Ticks passed over, to record for a backfill: (after_ms, through_ms, reason, count).
    ranges: list[tuple[int, int, str, int]] = field(default_factory=list)


@dataclass
class Plan:
    """Everything one invocation will push, in schedule order, ticks ascending."""

    now_ms: int
    groups: list[Group]
    # (schedule, definition SHA1, why) for schedules whose ticks could not be computed (a
    # timetable beyond the representable years): set aside, never sinking the others.
    failed: list[tuple[str, str, str]] = field(default_factory=list)

    def chunks(
        self, max_jobs: int = MAX_JOBS_PER_CALL, max_bytes: int = MAX_BYTES_PER_CALL
    ) -> Iterator[list[Group]]:
        """Split into push-script calls; a schedule's jobs may span calls, marks ascending.

        A call also holds at most `max_jobs` groups: registering 100,000 new schedules is
        100 calls, not one long one. A new schedule's group is never split (module
        docstring): it starts a call of its own when it does not fit in the current one.
        """
        chunk: list[Group] = []
        jobs = size = 0
        for group in self.groups:
            if len(chunk) >= max_jobs:
                yield chunk
                chunk, jobs, size = [], 0, 0
            rest = group
            while True:
                room_jobs = max_jobs - jobs
                take = 0
                taken_bytes = 0
                for job in rest.jobs:
                    # Only the first job of a call may exceed the byte cap on its own.
                    too_big = (jobs + take) > 0 and (
                        size + taken_bytes + len(job.payload) > max_bytes)
                    if take >= room_jobs or too_big:
                        break
                    take += 1
                    taken_bytes += len(job.payload)
                if take == len(rest.jobs) or (rest.new and not chunk):
                    chunk.append(rest)
                    jobs += len(rest.jobs)
                    size += sum(len(job.payload) for job in rest.jobs)
                    break
                if take and not rest.new:
                    # The head's index entry says "due": the rest is, if this call is the last.
                    head = replace(rest, mark_ms=rest.jobs[take - 1].tick_ms,
                                   jobs=rest.jobs[:take], next_due_ms=0)
                    chunk.append(head)
                    rest = replace(rest, missed=0, skipped=0, ranges=[],
                                   jobs=rest.jobs[take:])
                yield chunk
                chunk, jobs, size = [], 0, 0
        if chunk:
            yield chunk


class TickMemo:
    """Remembers, per timetable, the next fire instant after some instant, across invocations.

    Most schedules are not due in a given minute; with this a warm process answers that in
    O(1) instead of searching the cron fields again. Timetables are keyed by `key`, so
    schedules sharing an expression and zone share the entry.
    """

    def __init__(self) -> None:
        # timetable key -> (after, first): epoch ms; `first` is the first tick after any
        # instant in [after, first).
        self._next: dict[str, tuple[tuple[int, int], ...]] = {}
        self._templates = JobTemplates()  # job templates, by content

    def payload(self, schedule: Schedule, tick: datetime, job_id: str, now: datetime,
                *, scheduled: bool) -> str:
        """The job's JSON, from the template of the schedule's content where it has one."""
        return self._templates.job(schedule, tick, job_id, now, scheduled=scheduled)

    def forget_beyond(self, size: int) -> None:
        """Drop cached templates once they outnumber `size` (configs come and go)."""
        self._templates.forget_beyond(size)

    def next_ms(self, timetable: Timetable, after_ms: int) -> int:
        """The first fire instant after `after_ms` (epoch ms), mostly without a search."""
        windows = self._next.get(timetable.key, ())
        for after, first in windows:
            if after <= after_ms < first:
                return first
        first = to_ms(timetable.next_after(from_ms(after_ms)))
        # Two windows: planning asks about the old mark, then the new one (its index entry).
        self._next[timetable.key] = ((after_ms, first), *windows[:1])
        return first

    def ticks(self, timetable: Timetable, after: datetime, until: datetime) -> list[datetime]:
        """Every fire instant in (after, until] — `timetable.between`, short-cut when none."""
        if self.next_ms(timetable, to_ms(after)) > to_ms(until):
            return []
        return timetable.between(after, until)


def _count_missed(timetable: Timetable, after: datetime, until: datetime) -> int:
    count = 0
    tick = timetable.next_after(after)
    while tick <= until and count < MISSED_COUNT_CAP:
        count += 1
        tick = timetable.next_after(tick)
    return count


def _plan_new(schedule: Schedule, now: datetime, now_ms: int, memo: TickMemo) -> Group:
    """A schedule without a mark: register it at `now`; with `lookahead`, its next ticks too.

    Only ticks strictly after `now` (its first-seen): no pre-history. They are all in the
    future, so they all go to the `schedule` set and no catch-up policy applies. Capped to
    one call's jobs and bytes, since the group may not be split.
    """
    group = Group(schedule.name, now_ms, new=True)
    if not schedule.enabled or schedule.lookahead_s <= 0:
        return group
    horizon = now + timedelta(seconds=schedule.lookahead_s)
    size = 0
    for tick in memo.ticks(schedule.timetable, now, horizon):
        tick_ms = to_ms(tick)
        job_id = jid_ms(schedule.name, tick_ms)
        payload = memo.payload(schedule, tick, job_id, now, scheduled=True)
        if group.jobs and (len(group.jobs) >= MAX_JOBS_PER_CALL
                           or size + len(payload) > MAX_BYTES_PER_CALL):
            break
        group.jobs.append(Job(schedule.name, tick_ms, None, job_id, payload))
        size += len(payload)
    if group.jobs:
        group.mark_ms = max(now_ms, group.jobs[-1].tick_ms)
    return group


def _plan_schedule(
    schedule: Schedule,
    mark_ms: int | None,
    now: datetime,
    now_ms: int,
    window: timedelta,
    window_ms: int,
    memo: TickMemo,
    shared: dict[tuple[str, datetime, datetime], list[datetime]],
) -> Group | None:
    if mark_ms is None:
        return _plan_new(schedule, now, now_ms, memo)
    if mark_ms >= now_ms - window_ms:  # the common case, in integers: nothing due yet?
        horizon_ms = now_ms + int(schedule.lookahead_s * 1000) if schedule.enabled else now_ms
        if memo.next_ms(schedule.timetable, mark_ms) > horizon_ms:
            return None
    mark = from_ms(mark_ms)
    window_start = now - window
    group = Group(schedule.name, mark_ms)
    if mark < window_start and not schedule.enabled:
        group.mark_ms = to_ms(window_start)  # paused: passed over, owed nothing, not recorded
    elif mark < window_start:
        group.missed = _count_missed(schedule.timetable, mark, window_start)
        if group.missed:
            group.mark_ms = max(group.mark_ms, to_ms(window_start))
            group.ranges.append((mark_ms, group.mark_ms, "window", group.missed))
    lower = max(mark, window_start)
    horizon = now + timedelta(seconds=schedule.lookahead_s) if schedule.enabled else now
    key = (schedule.timetable.key, lower, horizon)
    due = shared.get(key)
    if due is None:
        due = shared[key] = memo.ticks(schedule.timetable, lower, horizon)
    if not due:
        return group if group.mark_ms != mark_ms else None

    past = [t for t in due if t <= now]
    future = due[len(past):]
    if not schedule.enabled:
        keep: list[datetime] = []
    elif schedule.catch_up == "latest":
        keep = past[-1:]
    elif schedule.catch_up == "none":
        keep = [t for t in past if (now - t).total_seconds() < ON_TIME_S]
    else:
        keep = past
    group.skipped = len(past) - len(keep)
    if group.skipped and schedule.enabled:
        group.ranges.append((max(mark_ms, to_ms(window_start)), to_ms(past[group.skipped - 1]),
                             "policy", group.skipped))
    group.mark_ms = max(group.mark_ms, to_ms(due[-1]))
    for tick in keep:
        tick_ms = to_ms(tick)
        job_id = jid_ms(schedule.name, tick_ms)
        group.jobs.append(Job(schedule.name, tick_ms, schedule.queue, job_id,
                              memo.payload(schedule, tick, job_id, now, scheduled=False)))
    for tick in future:
        tick_ms = to_ms(tick)
        job_id = jid_ms(schedule.name, tick_ms)
        group.jobs.append(Job(schedule.name, tick_ms, None, job_id,
                              memo.payload(schedule, tick, job_id, now, scheduled=True)))
    return group


def next_due_ms(schedule: Schedule, mark_ms: int, memo: TickMemo) -> int:
    """When a schedule whose mark is `mark_ms` next needs planning: its next tick, less its
    lookahead (a paused schedule's ticks are only passed over, when they come)."""
    lookahead_ms = int(schedule.lookahead_s * 1000) if schedule.enabled else 0
    return max(0, memo.next_ms(schedule.timetable, mark_ms) - lookahead_ms)


@dataclass(frozen=True)
class Entry:
    """A schedule read from the store to plan: its mark (None: new) and definition's SHA1."""

    schedule: Schedule
    mark_ms: int | None
    sha: str = ""


def plan_due(entries: Sequence[Entry], now: datetime, window_s: float,
             memo: TickMemo | None = None, *, reindex: bool = True) -> Plan:
    """Decide every push for these schedules from their stored marks and `now`.

    With `reindex`, every entry gets a group, one with nothing to push included: it carries
    the schedule's next index entry (it was read because its entry was due, or changed).
    """
    memo = memo or TickMemo()
    memo.forget_beyond(4 * len(entries) + 50_000)
    now_ms = to_ms(now)
    window = timedelta(seconds=window_s)
    window_ms = to_ms(_EPOCH + window)
    shared: dict[tuple[str, datetime, datetime], list[datetime]] = {}
    plan = Plan(now_ms, [])
    for entry in entries:
        schedule, mark = entry.schedule, entry.mark_ms
        try:
            group = _plan_schedule(schedule, mark, now, now_ms, window, window_ms, memo,
                                   shared)
            if group is None:
                if not reindex or mark is None:
                    continue
                group = Group(schedule.name, mark)
            group.sha = entry.sha
            group.next_due_ms = next_due_ms(schedule, group.mark_ms, memo)
        except (ValueError, OverflowError) as exc:  # datetime's range, for one schedule
            plan.failed.append((schedule.name, entry.sha, f"its ticks cannot be computed "
                                f"({exc}); its timetable reaches beyond the year 9999"))
            continue
        plan.groups.append(group)
    return plan


def plan_ticks(
    config: Config,
    marks: Mapping[str, int | None],
    now: datetime,
    memo: TickMemo | None = None,
) -> Plan:
    """Decide every push of a whole document from the stored marks (epoch ms) and `now`:
    only the schedules with something to do get a group."""
    entries = [Entry(s, marks.get(s.name)) for s in config.schedules]
    return plan_due(entries, now, config.missed_jobs_window_s, memo, reindex=False)
