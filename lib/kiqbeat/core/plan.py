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
- with `jitter`, a due tick's job is released at tick + `jitter_offset_ms(name, tick)`
  (core/lifecycle.py): into the `schedule` set scored at that instant when it is after
  `now`, else straight into its queue; a lookahead tick's likewise, always into the set.
  Which ticks are due, the jid, the watermark and `include_metadata`'s `scheduled_at` are
  the tick's; only the delivery moves (and a scheduled job's `enqueued_at`: core/payload.py);
- a disabled schedule pushes and records nothing, but its mark still moves over its ticks
  (those older than the window too), so re-enabling it does not backfill the paused period.

The mark sent with a group covers everything the group decided about; the push script
applies it only above the stored one, which is what makes concurrent plans safe, and only
when the stored one is not below the one the group was planned from (STORED: its jobs start
above that one, so a store that lost writes since the due read, a failover, would have ticks
jumped over; each later part of a split group carries its head's mark as STORED). A group
planned for a new schedule says so: if another copy registered the schedule first, the
script leaves it alone, jobs included (its mark would otherwise jump over ticks the other
copy owes, and its ticks between the two copies' `now` would come from before first-seen).
Such a group is therefore never split across calls: a later part would meet the first
part's watermark, or the winner's, and could not tell them apart. Its jobs are capped to
what one call carries (200 jobs, 512 KiB); ticks beyond the cap go with the next
invocation, like any tick beyond the lookahead.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import NamedTuple

from kiqbeat.core.instants import from_ms, to_ms, to_ms_up
from kiqbeat.core.lifecycle import Bounded, jitter_offset_ms
from kiqbeat.core.limits import (
    MAX_MISSED_COUNTED,
    PUSH_CALL_BUDGET_US,
    PUSH_US_PER_GROUP,
    PUSH_US_PER_JOB,
)
from kiqbeat.core.pause import Pause, planned
from kiqbeat.core.payload import JobTemplates, jid_ms
from kiqbeat.core.schedule import Schedule, Timetable

# `catch_up: none` still pushes ticks this fresh: one trigger period, the normal lag.
ON_TIME_S = 120.0
ON_TIME_MS = int(ON_TIME_S * 1000)
# A new schedule's group (never split) and a backfill call carry at most this many jobs; a
# push call carries at most MAX_BYTES_PER_CALL of jobs, and is otherwise sized by time
# (`Plan.chunks`), so a large catch-up never blocks Redis for more than a few milliseconds.
MAX_JOBS_PER_CALL = 200
# A warm process keeps what it derived from a schedule (its parsed definition in the engine,
# its args' JSON here) only when the schedule comes due again within this: an every-minute
# schedule is planned again from what was kept; an hourly or daily one, which a large
# store's due set rotates through, would be pushed out before then, and keeping it meanwhile
# costs memory and garbage collections.
KEEP_WARM_MS = 10 * 60 * 1000
MAX_BYTES_PER_CALL = 512 * 1024


@dataclass(frozen=True)
class Job:
    """One tick of one schedule, ready to push: a view of a group's lists (`Group.jobs`),
    for tests and reports; planning and pushing keep no object per job."""

    schedule: str
    tick_ms: int
    queue: str | None  # None: the `schedule` set (lookahead), not a queue
    jid: str
    payload: str
    release_ms: int = 0  # into the `schedule` set: the instant it is released (epoch ms)


@dataclass(slots=True)
class Group:
    """What one invocation decided for one schedule: its jobs and the mark covering them.

    Its jobs are three aligned lists, ticks ascending: the tick (epoch ms, which names the
    jid and the watermark), where the job goes (`releases`: 0, into `queue` now; an instant,
    epoch ms, into the `schedule` set, released then) and the job's JSON bytes.
    """

    name: str
    mark_ms: int
    missed: int = 0
    skipped: int = 0
    # The stored mark it was planned from (epoch ms): the push applies it only onto that
    # mark or a later one, never onto an earlier one (its jobs start above this one: the
    # ticks between would be jumped over). None: no stored mark (`new`).
    stored_ms: int | None = None
    # The due index entry that goes with mark_ms (epoch ms it next needs planning; 0: at
    # once), and the SHA1 of the stored definition it was planned from.
    next_due_ms: int = 0
    sha: str = ""
    # Ticks passed over, to record for a backfill: (after_ms, through_ms, reason, count).
    ranges: list[tuple[int, int, str, int]] = field(default_factory=list)
    queue: str = "default"
    # The schedule's life rules the push step applies (redis/lua/push.lua, core/lifecycle.py
    # `fates`): its `max_runs` (0: none) and its `overlap` (OVERLAP_CODES: 0 allow, 1 skip,
    # 2 buffer_one).
    max_runs: int = 0
    overlap: int = 0
    ticks: list[int] = field(default_factory=list)
    releases: list[int] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    # Why its `skipped` ticks were passed over (report.SKIP_REASONS): "catch_up" (its policy), or
    # "paused" (a pause record or `enabled: false`); and the ticks its `except` dates took
    # in what its mark covers (counted, never recorded: nothing is owed for them).
    skip_reason: str = "catch_up"
    excepted: int = 0

    @property
    def new(self) -> bool:
        """No stored mark when planned: register the schedule (first-seen = the plan's now)
        and push its jobs, all after that now; or, if a mark is found, do nothing at all."""
        return self.stored_ms is None

    def add(self, tick_ms: int, release_ms: int, payload: bytes) -> None:
        """Append a job (after every job it holds)."""
        self.ticks.append(tick_ms)
        self.releases.append(release_ms)
        self.payloads.append(payload)

    @property
    def jobs(self) -> list[Job]:
        """Its jobs as objects (built on each call: not for the hot path)."""
        return [Job(self.name, tick, None if release else self.queue, jid_ms(self.name, tick),
                    payload.decode(), release)
                for tick, release, payload in zip(self.ticks, self.releases, self.payloads,
                                                  strict=True)]

    def cut(self, start: int, stop: int) -> Group:
        """The same group with only jobs [start, stop)."""
        return replace(self, ticks=self.ticks[start:stop], releases=self.releases[start:stop],
                       payloads=self.payloads[start:stop])


@dataclass
class Plan:
    """Everything one invocation will push, in schedule order, ticks ascending."""

    now_ms: int
    groups: list[Group]
    # (schedule, definition SHA1, why) for schedules whose ticks could not be computed (a
    # timetable beyond the representable years): set aside, never sinking the others.
    failed: list[tuple[str, str, str]] = field(default_factory=list)

    def chunks(self, budget_us: float = PUSH_CALL_BUDGET_US) -> Iterator[list[Group]]:
        """Split into push-script calls, each estimated to hold Redis at most `budget_us`
        (PUSH_US_PER_GROUP a group and PUSH_US_PER_JOB a job: core/limits.py, measured) and
        carrying at most MAX_BYTES_PER_CALL of jobs; a schedule's jobs may span calls, marks
        ascending.

        A new schedule's group is never split (module docstring): it starts a call of its
        own when it does not fit in the current one. Only the first job of a call may pass
        the bounds on its own.
        """
        chunk: list[Group] = []
        cost = 0.0
        size = 0
        for group in self.groups:
            cost += PUSH_US_PER_GROUP
            if chunk and cost > budget_us:
                yield chunk
                chunk, cost, size = [], PUSH_US_PER_GROUP, 0
            payloads = group.payloads
            if len(payloads) == 1 and (cost + PUSH_US_PER_JOB <= budget_us
                                       and size + len(payloads[0]) <= MAX_BYTES_PER_CALL):
                chunk.append(group)  # the common case, as the loop below takes it
                cost += PUSH_US_PER_JOB
                size += len(payloads[0])
                continue
            rest = group
            while True:
                take = 0
                taken_bytes = 0
                payloads = rest.payloads
                for payload in payloads:
                    grows = cost + PUSH_US_PER_JOB > budget_us or (
                        size + taken_bytes + len(payload) > MAX_BYTES_PER_CALL)
                    if grows and (chunk or take):
                        break
                    take += 1
                    cost += PUSH_US_PER_JOB
                    taken_bytes += len(payload)
                if take == len(payloads) or (rest.new and not chunk):
                    if take < len(payloads):  # a new group alone: whole, whatever it costs
                        cost += (len(payloads) - take) * PUSH_US_PER_JOB
                        taken_bytes += sum(len(p) for p in payloads[take:])
                    chunk.append(rest)
                    size += taken_bytes
                    break
                if take and not rest.new:
                    # The head's index entry says "due": the rest is, if this call is the last.
                    head = replace(rest.cut(0, take), mark_ms=rest.ticks[take - 1],
                                   next_due_ms=0)
                    chunk.append(head)
                    rest = replace(rest.cut(take, len(payloads)), missed=0, skipped=0,
                                   ranges=[], stored_ms=head.mark_ms)
                yield chunk
                chunk, cost, size = [], PUSH_US_PER_GROUP, 0
        if chunk:
            yield chunk


# Due ticks shared by the schedules of one invocation with the same timetable, lower bound
# (-1: the window's start) and horizon: (ticks, their epoch ms, how many are at or before now).
_Shared = dict[tuple[str, int, int], tuple[list[datetime], list[int], int]]
# Decisions (`_decide`) by timetable key, mark, enabled, lookahead and catch-up policy.
_Decisions = dict[tuple[str, int, bool, float, str], "_Decision"]


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
        self.templates = JobTemplates()  # job templates, by content
        # What the plans of one invocation (the engine plans one a slice at a time) share:
        # the due ticks (`_Shared`) and the decisions (`_Decisions`) made at `_shared_at`.
        self._shared: tuple[_Shared, _Decisions] = ({}, {})
        self._shared_at: tuple[datetime, float] | None = None

    def shared(self, now: datetime, window_s: float) -> tuple[_Shared, _Decisions]:
        """The due ticks and decisions planned so far at `now` with a window of `window_s`
        (emptied when either changes: the next invocation, or another window)."""
        if (now, window_s) != self._shared_at:
            self._shared = ({}, {})
            self._shared_at = (now, window_s)
        return self._shared

    def payload(self, schedule: Schedule, tick: datetime, job_id: str, now: datetime,
                *, scheduled: bool, released: datetime | None = None) -> str:
        """The job's JSON, from the template of the schedule's content where it has one; a
        job for the schedule set is released at `released` (default: its tick)."""
        return self.templates.job(schedule, tick, job_id, now, scheduled=scheduled,
                                  released=released)

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


class _Instant:
    """What every schedule of one plan is planned against: `now`, the window's start (as
    epoch ms rounded down, `window_ms`, and up, `window_up_ms`), the memo and the due ticks
    shared in the invocation."""

    __slots__ = ("decisions", "memo", "now", "now_ms", "shared", "window_ms", "window_start",
                 "window_up_ms")

    def __init__(self, now: datetime, window_s: float, memo: TickMemo) -> None:
        self.now, self.now_ms, self.memo = now, to_ms(now), memo
        self.window_start = now - timedelta(seconds=window_s)
        self.window_ms = to_ms(self.window_start)
        self.window_up_ms = to_ms_up(self.window_start)
        self.shared, self.decisions = memo.shared(now, window_s)


def _count_missed(timetable: Timetable, after: datetime, until: datetime) -> int:
    count = 0
    tick = timetable.next_after(after)
    while tick <= until and count < MAX_MISSED_COUNTED:  # the one cap, `kiqbeat missed`'s too
        count += 1
        tick = timetable.next_after(tick)
    return count


def _plan_new(schedule: Schedule, now: datetime, now_ms: int, memo: TickMemo) -> Group:
    """A schedule without a mark: register it at `now`; with `lookahead`, its next ticks too.

    Only ticks strictly after `now` (its first-seen): no pre-history. They are all in the
    future, so they all go to the `schedule` set and no catch-up policy applies. Capped to
    one call's jobs and bytes, since the group may not be split.
    """
    group = Group(schedule.name, now_ms, queue=schedule.queue)
    if not schedule.enabled or schedule.lookahead_s <= 0:
        return group
    horizon = now + timedelta(seconds=schedule.lookahead_s)
    size = 0
    for tick in memo.ticks(schedule.timetable, now, horizon):
        tick_ms = to_ms(tick)
        release_ms, payload = _job(schedule, tick, tick_ms, now, now_ms, memo, ahead=True)
        if group.ticks and (len(group.ticks) >= MAX_JOBS_PER_CALL
                            or size + len(payload) > MAX_BYTES_PER_CALL):
            break
        group.add(tick_ms, release_ms, payload)
        size += len(payload)
    if group.ticks:
        group.mark_ms = max(now_ms, group.ticks[-1])
    return group


def _job(schedule: Schedule, tick: datetime, tick_ms: int, now: datetime, now_ms: int,
         memo: TickMemo, *, ahead: bool) -> tuple[int, bytes]:
    """A jittered schedule's job for a tick (`ahead`: a lookahead tick, after now): its
    release instant (0: into its queue now) and JSON. Released at tick + the tick's offset:
    into the schedule set when that is after now, else straight into its queue."""
    offset_ms = jitter_offset_ms(schedule.name, tick_ms, round(schedule.jitter_s * 1000))
    release_ms = tick_ms + offset_ms
    job_id = jid_ms(schedule.name, tick_ms)
    if release_ms <= now_ms and not ahead:
        return 0, memo.payload(schedule, tick, job_id, now, scheduled=False).encode()
    released = tick + timedelta(milliseconds=offset_ms)
    return release_ms, memo.payload(schedule, tick, job_id, now, scheduled=True,
                                    released=released).encode()


# A schedule's `overlap` as the push step reads it (push.lua's OVERLAP byte).
OVERLAP_CODES = {"allow": 0, "skip": 1, "buffer_one": 2}


class _Decision(NamedTuple):
    """What planning decides for any schedule of one timetable, mark, life switch, lookahead
    and catch-up policy at one instant: its new mark and index entry, the ticks passed over
    (`missed`, `skipped`, `ranges`) and the due ticks it pushes: into its queue `due[first:
    last]`, into the schedule set (lookahead) `due[n_past:]`. `act` False: nothing to push
    or record (the group only carries the index entry)."""

    act: bool
    mark_ms: int
    next_due_ms: int
    missed: int
    skipped: int
    ranges: tuple[tuple[int, int, str, int], ...]
    due: list[datetime]
    due_ms: list[int]
    first: int
    last: int
    n_past: int
    excepted: int = 0


def _excepted(timetable: Timetable, after: datetime, through_ms: int) -> int:
    """Ticks in (after, through] that the timetable's `except` dates take (0 without any)."""
    if not (isinstance(timetable, Bounded) and timetable.excluded):
        return 0
    through = from_ms(through_ms)
    if through <= after:
        return 0
    return sum(1 for t in timetable.inner.between(after, through)
               if timetable.fate(t) == "excluded")


def _decide(timetable: Timetable, mark_ms: int, enabled: bool, lookahead_s: float,
            catch_up: str, at: _Instant) -> _Decision:
    """The decision for a schedule with a mark (module docstring), in integers (epoch ms)
    until a tick is due: ticks are whole seconds (core/lifecycle.py), so comparing a tick's
    ms with an instant's ms rounded down is exact."""
    memo = at.memo
    lookahead_ms = int(lookahead_s * 1000) if enabled else 0
    horizon_ms = at.now_ms + lookahead_ms
    early = mark_ms < at.window_up_ms  # the mark is before the window's start
    # The common case: nothing due yet (its next tick is beyond the horizon)?
    next_ms = memo.next_ms(timetable, mark_ms)
    if next_ms > horizon_ms and (not early or (enabled and next_ms > at.window_ms)):
        return _Decision(False, mark_ms, max(0, next_ms - lookahead_ms), 0, 0, (), [], [],
                         0, 0, 0)
    new_mark_ms, missed = mark_ms, 0
    ranges: list[tuple[int, int, str, int]] = []
    if early and not enabled:
        new_mark_ms = at.window_ms  # paused: passed over, owed nothing, not recorded
    elif early and next_ms <= at.window_ms:  # a tick in (mark, window start]: missed
        missed = _count_missed(timetable, from_ms(mark_ms), at.window_start)
        new_mark_ms = max(mark_ms, at.window_ms)
        ranges.append((mark_ms, new_mark_ms, "window", missed))
    key = (timetable.key, -1 if early else mark_ms, horizon_ms)
    found = at.shared.get(key)
    if found is None:
        lower = at.window_start if early else from_ms(mark_ms)
        horizon = at.now + timedelta(seconds=lookahead_s) if enabled else at.now
        due = memo.ticks(timetable, lower, horizon)
        due_ms = [to_ms(t) for t in due]
        now_ms = at.now_ms
        found = at.shared[key] = (due, due_ms, sum(1 for t in due_ms if t <= now_ms))
    due, due_ms, n_past = found
    if not due:
        return _Decision(new_mark_ms != mark_ms, new_mark_ms,
                         max(0, memo.next_ms(timetable, new_mark_ms) - lookahead_ms),
                         missed, 0, tuple(ranges), due, due_ms, 0, 0, 0)
    if not enabled:
        first = last = n_past  # none kept
    elif catch_up == "all":
        first, last = 0, n_past
    elif catch_up == "latest":
        first, last = max(0, n_past - 1), n_past
    else:  # "none": only ticks less than ON_TIME_S old
        fresh_ms = at.now_ms - ON_TIME_MS
        first = next((k for k in range(n_past) if due_ms[k] > fresh_ms), n_past)
        last = n_past
    skipped = n_past - (last - first)
    if skipped and enabled:
        ranges.append((max(mark_ms, at.window_ms), due_ms[skipped - 1], "policy", skipped))
    new_mark_ms = max(new_mark_ms, due_ms[-1])
    lower = at.window_start if early else from_ms(mark_ms)
    return _Decision(True, new_mark_ms,
                     max(0, memo.next_ms(timetable, new_mark_ms) - lookahead_ms), missed,
                     skipped, tuple(ranges), due, due_ms, first, last, n_past,
                     _excepted(timetable, lower, new_mark_ms))


def _plan_schedule(schedule: Schedule, mark_ms: int, sha: str, at: _Instant
                   ) -> tuple[Group | None, int]:
    """A schedule's group at `at.now` (module docstring), None when it has nothing to do;
    and its next index entry. Schedules deciding alike share the decision (`_decide`): a
    warm invocation's work per due schedule is its jobs' JSON and its group."""
    enabled = schedule.enabled
    timetable = schedule.timetable
    decision_key = (timetable.key, mark_ms, enabled, schedule.lookahead_s, schedule.catch_up)
    decision = at.decisions.get(decision_key)
    if decision is None:
        decision = at.decisions[decision_key] = _decide(
            timetable, mark_ms, enabled, schedule.lookahead_s, schedule.catch_up, at)
    (act, new_mark_ms, next_due, missed, skipped, ranges, due, due_ms, first, last, n_past,
     excepted) = decision
    if not act:
        return None, next_due
    name = schedule.name
    memo = at.memo
    ticks: list[int] = []
    releases: list[int] = []
    payloads: list[bytes] = []
    if schedule.jitter_s:
        now, now_ms = at.now, at.now_ms
        for k in [*range(first, last), *range(n_past, len(due))]:
            release_ms, payload = _job(schedule, due[k], due_ms[k], now, now_ms, memo,
                                       ahead=k >= n_past)
            ticks.append(due_ms[k])
            releases.append(release_ms)
            payloads.append(payload)
    else:
        if first < last:
            ticks = due_ms[first:last]  # its own list (a lookahead tick is appended to it)
            rendered = memo.templates.queued(schedule, ticks, at.now,
                                              keep=next_due - at.now_ms <= KEEP_WARM_MS)
            if rendered is None:  # no template: built one by one
                now = at.now
                rendered = [memo.payload(schedule, due[k], jid_ms(name, due_ms[k]), now,
                                         scheduled=False).encode() for k in range(first, last)]
            releases = [0] * len(ticks)
            payloads = rendered
        for k in range(n_past, len(due)):  # lookahead: into the schedule set, at the tick
            tick_ms = due_ms[k]
            ticks.append(tick_ms)
            releases.append(tick_ms)
            payloads.append(memo.payload(schedule, due[k], jid_ms(name, tick_ms), at.now,
                                         scheduled=True).encode())
    return Group(name, new_mark_ms, missed, skipped, mark_ms, next_due, sha,
                 list(ranges) if ranges else [], schedule.queue, schedule.max_runs or 0,
                 OVERLAP_CODES[schedule.overlap], ticks, releases, payloads,
                 "catch_up" if enabled else "paused", excepted), next_due


def next_due_ms(schedule: Schedule, mark_ms: int, memo: TickMemo) -> int:
    """When a schedule whose mark is `mark_ms` next needs planning: its next tick, less its
    lookahead (a paused schedule's ticks are only passed over, when they come)."""
    lookahead_ms = int(schedule.lookahead_s * 1000) if schedule.enabled else 0
    return max(0, memo.next_ms(schedule.timetable, mark_ms) - lookahead_ms)


class Entry(NamedTuple):
    """A schedule read from the store to plan: its mark (None: new) and definition's SHA1
    (a tuple: one is built per due schedule)."""

    schedule: Schedule
    mark_ms: int | None
    sha: str = ""
    pause: Pause | None = None  # its pause record (core/pause.py), if it has one


def plan_due(entries: Sequence[Entry], now: datetime, window_s: float,
             memo: TickMemo | None = None) -> Plan:
    """Decide every push for these schedules from their stored marks and `now`.

    Every entry gets a group, one with nothing to push or record included: it carries the
    schedule's next index entry (it was read because its entry was due, or changed)."""
    memo = memo or TickMemo()
    memo.templates.forget_beyond(4 * len(entries) + 50_000)  # configs come and go
    at = _Instant(now, window_s, memo)
    plan = Plan(at.now_ms, [])
    groups = plan.groups
    for schedule, stored, sha, pause in entries:
        mark = stored
        if pause is not None:
            # Enabled and not paused at this tick: a pause passes over the ticks it covers.
            schedule, mark = planned(schedule, stored, pause, at.now_ms)
        try:
            if mark is None:
                group = _plan_new(schedule, at.now, at.now_ms, at.memo)
                group.next_due_ms = next_due_ms(schedule, group.mark_ms, at.memo)
            else:
                found, next_due = _plan_schedule(schedule, mark, sha, at)
                if found is not None:  # complete: its sha and life rules in
                    found.stored_ms = stored
                    groups.append(found)
                    continue
                group = Group(schedule.name, mark, stored_ms=stored, next_due_ms=next_due,
                              queue=schedule.queue)
        except (ValueError, OverflowError) as exc:  # datetime's range, for one schedule
            plan.failed.append((schedule.name, sha, f"its ticks cannot be computed "
                                f"({exc}); its timetable reaches beyond the year 9999"))
            continue
        group.sha = sha
        group.max_runs = schedule.max_runs or 0
        group.overlap = OVERLAP_CODES[schedule.overlap]
        groups.append(group)
    return plan
