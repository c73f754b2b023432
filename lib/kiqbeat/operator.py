"""The operator's commands on the schedule store: `status`, `missed`, `backfill`, `trigger`
(run now) and `history`, and the rows `status`, `get` and `list` show.

    from kiqbeat.store import Store
    store = Store(redis.Redis.from_url(url))
    store.missed(); store.backfill(["digest:42"], latest_only=True); store.trigger("digest:42")

`Operator` holds them; `kiqbeat.store.Store` — the schedules API — is an `Operator`, so
every command is a method of a `Store` (`store.status()`, `store.backfill(...)`), and an
`Operator` alone serves a caller that only reads and pushes. Each public call reads the
Redis clock at most once and passes that instant down. Every push here goes through one
atomic script (`kiqbeat.redis.pushes`): a recorded tick is pushed at most once, whatever
runs at the same time.
"""

from __future__ import annotations

import builtins
import copy
import json
import secrets
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Self, cast

import redis

from kiqbeat.alerts.delivery import Backlog, backlogs
from kiqbeat.alerts.incidents import Incident, open_incidents
from kiqbeat.audit import default_actor, record_action
from kiqbeat.core import json_text
from kiqbeat.core.describe import describe_usage, life_facts
from kiqbeat.core.lifecycle import has_ended
from kiqbeat.core.limits import (
    MAX_COUNTED_TICKS,
    MAX_ENDED_LISTED,
    MAX_REASON_CHARS,
    MAX_WAITING_SCAN,
)
from kiqbeat.core.outcomes import Health, health_text
from kiqbeat.core.pause import Pause
from kiqbeat.core.payload import jid_ms, job_json
from kiqbeat.core.plan import (
    MAX_BYTES_PER_CALL,
    MAX_JOBS_PER_CALL,
    TickMemo,
    from_ms,
    to_ms,
    to_ms_up,
)
from kiqbeat.core.records import (
    BACKFILLED_BY_DEFAULT,
    DEFAULT_HISTORY,
    REASONS,
    Push,
    Range,
    count_ticks,
    held_tick_ms,
    last_tick_in,
    parse_history,
    parse_ranges,
    ticks_in,
)
from kiqbeat.core.report import PushedJob
from kiqbeat.core.schedule import Schedule
from kiqbeat.core.ticks import ClassifiedTick, TickReport, classify_ticks
from kiqbeat.document.validate import read_definition
from kiqbeat.errors import ConfigError, KiqbeatError, json_name, shown, shown_name, shown_text
from kiqbeat.outcomes.records import read_health, read_outcomes
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import redis_errors, reply_reason
from kiqbeat.redis.definitions import Oversized, definition_sha
from kiqbeat.redis.operator_reads import Counts, Stored
from kiqbeat.redis.pushes import Piece
from kiqbeat.redis.side import RedisSide


@dataclass(frozen=True)
class ScheduleStatus:
    """Where one stored schedule stands: for `kiqbeat status` and `Store.get`."""

    name: str
    definition: Mapping[str, Any] | None  # as stored, without its source
    source: str  # "" for the API (or another language), else the document's location
    enabled: bool
    zone: str
    timing: str
    covered_through: datetime | None  # every tick up to here was pushed or passed over
    first_seen: datetime | None
    next_tick: datetime | None  # None when set aside
    lag_s: float  # how overdue the next tick is (0 when it is in the future)
    set_aside: str | None  # why its definition was refused, when it was
    # The definition's length when it is over MAX_DEFINITION_BYTES: it was not read (then
    # `definition` is None and `set_aside` says so).
    oversized_bytes: int | None = None
    # Its pause record (core/pause.py) while in force (one past its end: resumed, None).
    pause: Pause | None = None
    # Past its end_at, its one-shot done, its max_runs used: it pushes nothing more (DESIGN §8).
    ended: bool = False
    # Its life (core/describe.py `life_facts`: bounds, excluded dates, max_runs and the runs
    # used, pending skips, jitter, overlap); None when set aside.
    life: Mapping[str, Any] | None = None
    # What became of its jobs, as the worker middleware reported (core/outcomes.py); None
    # when not read.
    health: Health | None = None

    def line(self) -> str:
        """One line for a person (`kiqbeat status`, `kiqbeat schedules list`); what another
        writer stored (name, source, reason) is escaped and clipped (`errors.shown_name`)."""
        name = shown_name(self.name)
        if self.next_tick is None:
            return f"{name}: set aside: {shown_text(self.set_aside or '', MAX_REASON_CHARS)}"
        covered = (f"last tick covered {self.covered_through.isoformat(timespec='seconds')}"
                   if self.covered_through else "not planned yet")
        late = f", {self.lag_s:.0f} s overdue" if self.lag_s > 0 else ""
        coming = ("ended" if self.ended else
                  f"next {self.next_tick.isoformat(timespec='seconds')}{late}")
        usage = describe_usage(dict(self.life)) if self.life else ""
        health = health_text(self.health) if self.health is not None else ""
        return (f"{name}{'' if self.enabled else ' (paused)'}: {self.timing}; {covered}; "
                f"{coming}" + (f"; {usage}" if usage else "")
                + (f"; {shown_text(health, MAX_REASON_CHARS)}" if health else "")
                + (f"; from {shown_text(self.source)}" if self.source else "")
                + (f"; {shown_text(self.pause.line())}" if self.pause is not None else ""))

    @property
    def paused(self) -> bool:
        """True while a pause record holds it (`enabled` is then False too)."""
        return self.pause is not None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (a name that is not UTF-8: `errors.json_name`)."""
        def iso(t: datetime | None) -> str | None:
            return t.isoformat() if t else None
        return {**json_name(self.name), "source": self.source, "enabled": self.enabled,
                "zone": self.zone, "timing": self.timing,
                "covered_through": iso(self.covered_through),
                "first_seen": iso(self.first_seen), "next_tick": iso(self.next_tick),
                "lag_s": round(self.lag_s, 3), "set_aside": self.set_aside,
                "oversized_bytes": self.oversized_bytes, "ended": self.ended,
                "paused": None if self.pause is None else self.pause.as_dict(),
                "life": None if self.life is None else dict(self.life),
                "health": None if self.health is None else self.health.as_dict(),
                "definition": self.definition}


@dataclass(frozen=True)
class Status:
    """The store at a glance and one page of schedules, most overdue first."""

    now: datetime
    counts: Counts
    schedules: list[ScheduleStatus]
    set_aside: list[tuple[str, str]]  # (name, why), at most one page
    # The first names of index entries no invocation plans (`counts.unplannable` in all).
    unplannable: list[str] = field(default_factory=list)
    # Schedules past their end (end_at, a one-shot done, max_runs reached): how many, and
    # the first MAX_ENDED_LISTED names.
    ended_count: int = 0
    ended: list[str] = field(default_factory=list)
    # Open alert incidents (the oldest first, at most a page) and each alert sink's backlog.
    incidents: list[Incident] = field(default_factory=list)
    alert_backlog: list[Backlog] = field(default_factory=list)


@dataclass(frozen=True)
class MissedRange:
    """Recorded missed ticks of one schedule: those in (after, through]."""

    name: str
    after: datetime
    through: datetime
    reason: str  # "window", "policy", "paused" or "overlap" (core/records.py REASONS)
    ticks: int | None  # counted with the current definition (None: there is none)
    capped: bool  # counting stopped at records.COUNT_CAP: there are more

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
    planned: int = 0  # ticks it meant to push (dry run: counted, at most COUNT_CAP a range)
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


MAX_LISTED = 1000  # pushed jobs a Backfill lists
SHOWN_UNPLANNABLE = 5  # names of unplannable index entries `status` shows




class Operator:
    """The operator's commands on the schedules in one Redis under one key prefix."""

    def __init__(self, client: redis.Redis, *, namespace: str = "", shards: int | None = None,
                 window_s: float = 3600.0, history: int = DEFAULT_HISTORY,
                 lua: scripts.Caller = scripts.SCRIPTS, actor: str | None = None) -> None:
        """`shards`: the count the deployment's invocations run with; by default the one
        recorded in Redis (1 before any). A write with another count is refused. `history`:
        pushes kept per schedule by backfills and manual runs (invocations keep their own
        setting's)."""
        self.side = (RedisSide.recorded(client, namespace, lua) if shards is None
                     else RedisSide(client, namespace, shards, lua))
        self.window_s, self.keep_history = window_s, history
        self.actor, self.note = actor or default_actor(), ""

    @property
    def client(self) -> redis.Redis:
        """The Redis client."""
        return self.side.client

    @property
    def namespace(self) -> str:
        """The key prefix."""
        return self.side.namespace

    @property
    def shards(self) -> int:
        """The shard count its writes and status use."""
        return self.side.shards

    def acting(self, actor: str | None = None, note: str = "") -> Self:
        """This store, its changes recorded in the audit trail for `actor` with `note`."""
        other = copy.copy(self)
        other.actor, other.note = actor or self.actor, note
        return other

    def _audit(self, action: str, name: str = "", detail: str = "") -> None:
        record_action(self.client, self.namespace, self.actor, action, name, note=self.note,
                      detail=detail)

    def no_schedule(self, names: Iterable[str]) -> ConfigError:
        """The error for `names` the store does not hold: it names the hash looked in, so
        that a wrong namespace (key prefix) shows."""
        key = keys.definitions(self.namespace)
        return ConfigError([f"no schedule {shown(n)} in the store ({key})" for n in names])

    def status(self, names: Sequence[str] = (), *, shard: tuple[int, int] | None = None,
               offset: int = 0, limit: int = 50) -> Status:
        """Counts, then `names` (or a page of the due index, most overdue first) and a page
        of set-aside definitions; of `shard`, or of every shard."""
        now = self.side.clock()
        shards = [shard] if shard is not None else self.side.layout
        counts = self.side.read_counts(shards, to_ms(now))
        if names:
            rows = self._rows(names, now)
            unknown = sorted(set(names) - {r.name for r in rows})
            if unknown:
                raise self.no_schedule(unknown)
        else:
            rows = self._rows(self.side.read_order(shards, offset, limit),
                              now)
        aside = []
        if counts.set_aside:
            for name, why in self.side.scan_rejected():
                aside.append((name, reply_reason(why)))
                if len(aside) >= limit:
                    break
        unplannable = (self.side.read_unplannable(shards, SHOWN_UNPLANNABLE)
                       if counts.unplannable else [])
        ended_count, ended = self.side.read_ended(shards, MAX_ENDED_LISTED)
        client, namespace = self.side.client, self.side.namespace
        return Status(now, counts, rows, aside, unplannable, ended_count, ended,
                      open_incidents(client, namespace, limit),
                      backlogs(client, namespace, to_ms(now)))

    def _rows(self, names: Sequence[str], now: datetime) -> builtins.list[ScheduleStatus]:
        stored_rows = self.side.read_stored(names)
        pauses = self.side.read_pauses(names) if stored_rows else {}
        rows = [row for stored in stored_rows
                if (row := self._row(stored, now)) is not None]
        health = read_health(self.client, self.namespace, [r.name for r in rows]) if rows else {}
        now_ms = to_ms(now)
        rows = [replace(row, health=health.get(row.name)) for row in rows]
        return [replace(row, pause=p, enabled=False)
                if (p := pauses.get(row.name)) is not None and p.holds_at(now_ms) else row
                for row in rows]

    def _row(self, stored: Stored, now: datetime) -> ScheduleStatus | None:
        if stored.definition is None:
            return None
        mark = from_ms(stored.mark_ms) if stored.mark_ms is not None else None
        seen = from_ms(stored.first_seen_ms) if stored.first_seen_ms is not None else None
        if isinstance(stored.definition, Oversized):
            return ScheduleStatus(stored.name, None, "", False, "", "", mark, seen, None, 0.0,
                                  stored.definition.why(), stored.definition.size_bytes)
        raw = as_mapping(stored.definition)
        source = str(raw.pop("source", "")) if raw is not None else ""
        try:
            schedule = read_definition(stored.name, stored.definition, window_s=self.window_s)
        except ConfigError as exc:
            why = stored.rejected or "; ".join(exc.problems)
            return ScheduleStatus(stored.name, raw, source, False, "", "", mark, seen, None,
                                  0.0, why)
        window_start = now - timedelta(seconds=self.window_s)
        after = max(mark, window_start) if mark else now
        nxt = schedule.timetable.next_after(after)
        ended = has_ended(schedule, after, stored.runs)
        return ScheduleStatus(stored.name, raw, source, schedule.enabled,
                              schedule.timetable.zone_name, schedule.timing, mark, seen, nxt,
                              0.0 if ended else max(0.0, (now - nxt).total_seconds()),
                              stored.rejected, ended=ended,
                              life=life_facts(schedule, stored.runs, stored.skips))


    def missed(self, names: Sequence[str] = (),
               garbled: builtins.list[tuple[str, str]] | None = None
               ) -> builtins.list[MissedRange]:
        """The recorded missed ticks of `names` (default: every schedule), as ranges. A
        record that is garbled (written by hand) raises ConfigError naming it; with a
        `garbled` list, it is added there as (name, why) instead and the others are listed."""
        records = dict(self.side.read_missed(names))
        definitions = self.side.read_present(builtins.list(records))
        out = []
        for name, text in sorted(records.items()):
            schedule = self._schedule(name, definitions.get(name))
            try:
                ranges = _ranges(name, text)
            except ConfigError as exc:
                if garbled is None:
                    raise
                garbled.append((name, str(exc)))
                continue
            for r in ranges:
                count: tuple[int | None, bool] = (None, False)
                if not isinstance(schedule, str):
                    count = count_ticks(schedule.timetable, r.after_ms, r.through_ms)
                out.append(MissedRange(name, from_ms(r.after_ms), from_ms(r.through_ms),
                                       r.reason, *count))
        return out

    def backfill(self, names: Sequence[str] = (), *, since: datetime | None = None,
                 until: datetime | None = None, latest_only: bool = False,
                 dry_run: bool = False, progress: Callable[[int], None] | None = None,
                 deadline: float | None = None, stop: Callable[[], bool] | None = None,
                 max_jobs: int | None = None, confirm_above: int | None = None,
                 pre_history: bool = True, reasons: Collection[str] = ()) -> Backfill:
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
        """
        result = self._backfill(names, since_ms=None if since is None else to_ms_up(since),
                                until_ms=None if until is None else to_ms(until),
                                latest_only=latest_only, dry_run=dry_run, progress=progress,
                                deadline=deadline, stop=stop, max_jobs=max_jobs,
                                confirm_above=confirm_above, pre_history=pre_history,
                                reasons=frozenset(reasons) or BACKFILLED_BY_DEFAULT)
        if not dry_run:
            scope = (f" of {len(names)} schedules" if len(names) > 1 else "" if names
                     else " (all)")
            self._audit("backfill", names[0] if len(names) == 1 else "",
                        f"{result.pushed} pushed{scope}")
        return result

    def _backfill(self, names: Sequence[str], *, since_ms: int | None, until_ms: int | None,
                  latest_only: bool, dry_run: bool, progress: Callable[[int], None] | None,
                  deadline: float | None, stop: Callable[[], bool] | None,
                  max_jobs: int | None, confirm_above: int | None,
                  pre_history: bool, reasons: frozenset[str]) -> Backfill:
        # Every record parsed before the first push: a garbled one (written by hand) is
        # skipped, named with why, and costs only its schedule (definitions are checked one
        # by one below, within the deadline).
        result = Backfill()
        recorded: dict[str, builtins.list[Range]] = {}
        for name, text in self.side.read_missed(names):
            try:
                recorded[name] = _ranges(name, text)
            except ConfigError as exc:  # that schedule only: the others are backfilled
                result.skipped.append((name, str(exc)))
        definitions = self.side.read_present(builtins.list(names)
                                   or builtins.list(recorded))
        # Named, with neither definition nor record (one with a record is skipped below).
        result.skipped += [(n, "no schedule of that name") for n in names
                           if n not in definitions and n not in recorded]
        clock, started = self.side.clock(), time.monotonic()
        memo = TickMemo()

        def late() -> bool:  # past the deadline, after a first call (which always goes)
            return deadline is not None and calls > 0 and time.monotonic() > deadline

        def stopping() -> str:
            if stop is not None and stop():
                return "signal"
            return "deadline" if late() else ""

        # The schedules in scope, and their ranges, in name order.
        scope: builtins.list[tuple[Schedule, builtins.list[Range]]] = []
        paused = self.side.read_pauses(builtins.list(recorded))
        for name, record in sorted(recorded.items()):
            schedule = self._schedule(name, definitions.get(name))
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
            self._count(result, scope, latest_only, give_up)
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
                call = self.side.push_backfill(batch, self.keep_history)
            except KiqbeatError as exc:
                if not calls:
                    raise
                raise type(exc)(f"{exc}; before this, {result.pushed:,} tick(s) were pushed by "
                                f"{calls} earlier call(s) and taken out of the record (running "
                                "the backfill again pushes the rest)") from exc
            result.pushed += call.pushed
            result.already += call.already
            result.stale += call.stale
            result.skipped += [(name, f"left alone: {why}") for name, why in call.aside]
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

                yield from _pieces(schedule, sha, ranges, latest_only, job)

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

    def _count(self, result: Backfill, scope: Sequence[tuple[Schedule, Sequence[Range]]],
               latest_only: bool, give_up: Callable[[], bool]) -> None:
        """Count a backfill's scope into `result` (planned, dropped, before_first_seen),
        exactly up to MAX_COUNTED_TICKS ticks in all; `capped` when counting stopped there
        (or at the deadline, or a signal)."""
        seen = self.side.read_first_seen([s.name for s, _ in scope])
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

    def trigger(self, name: str, args: builtins.list[Any] | None = None) -> Triggered:
        """Push one job of schedule `name` now ("run now"), with `args` instead of its own if
        given, paused or not. Its jid is "manual" and 18 random hex digits: never a tick's
        (24 hex digits), so it neither stands for nor hides any tick. Recorded in the
        schedule's history as manual."""
        stored = self.side.read_present([name]).get(name)
        if stored is None:
            raise self.no_schedule([name])
        if isinstance(stored, Oversized):
            raise ConfigError(f"schedule {shown(name)}: {stored.why()}")
        data = stored
        if args is not None:
            raw = as_mapping(stored) or {}
            raw["args"] = args
            data = json.dumps(raw).encode()
        schedule = read_definition(name, data, window_s=self.window_s)
        now = self.side.clock()
        jid = "manual" + secrets.token_hex(9)
        job = job_json(schedule, now, pushed_at=now, job_id=jid)
        if not self.side.push_manual(name, definition_sha(stored),
                           schedule.queue, jid, to_ms(now), job, self.keep_history):
            raise ConfigError(f"schedule {shown(name)} changed or was removed while being run; "
                              "nothing was pushed")
        self._audit("trigger", name, f"jid {jid}" + ("" if args is None else ", own args"))
        return Triggered(name, jid, schedule.queue, now)

    def report(self, name: str, *, since: datetime | None = None,
               until: datetime | None = None) -> TickReport:
        """Every nominal tick of schedule `name` in (since, until] (default: the last day,
        up to now), each with exactly one outcome (core/ticks.py), from where kiqbeat's
        knowledge starts; ConfigError when there is no such schedule or its definition is
        set aside. A few pipelined reads, whatever the span: the stored state, the
        history, the missed ranges, the pause, the outcome record, then one bounded look for
        the jobs still waiting (the first 1,000 of its queue, and the `schedule` set around
        the ticks)."""
        now = self.side.clock()
        until = until or now
        since = since or until - timedelta(days=1)
        if since >= until:
            raise ConfigError(f"--since {since.isoformat()} is not before --until "
                              f"{until.isoformat()}")
        stored = next(iter(self.side.read_stored([name])), None)
        if stored is None or stored.definition is None:
            raise self.no_schedule([name])
        schedule = self._schedule(name, stored.definition)
        if isinstance(schedule, str):
            raise ConfigError(f"schedule {shown(name)}: {schedule}")
        text, _ = self.side.read_history(name)
        try:
            pushes = parse_history(name, text) if text else []
        except ValueError:
            pushes = []
        missed = dict(self.side.read_missed([name])).get(name)
        ranges = _ranges(name, missed) if missed else []
        pause = self.side.read_pauses([name]).get(name)
        record, last_error = read_outcomes(self.client, self.namespace, [name])[name]
        with redis_errors(self.client, f"reading {keys.held(self.namespace)}"):
            held_raw = self.client.hget(keys.held(self.namespace), name)
        held = held_tick_ms(held_raw.encode() if isinstance(held_raw, str) else held_raw)

        def classified(waiting: Collection[str]) -> TickReport:
            return classify_ticks(
                name, schedule.timetable, since_ms=to_ms(since), until_ms=to_ms(until),
                now_ms=to_ms(now), mark_ms=stored.mark_ms, first_seen_ms=stored.first_seen_ms,
                history=pushes, keep=self.keep_history, outcomes=record,
                last_error=last_error, missed=ranges, pause=pause, enabled=schedule.enabled,
                waiting=waiting, jid_of=jid_ms, held_ms=held)

        found = classified(())
        unreported = [t for t in found.ticks if t.outcome in ("pushed", "backfilled")]
        if not unreported:
            return found
        return classified(self._waiting(schedule, unreported))

    def _waiting(self, schedule: Schedule, ticks: Sequence[ClassifiedTick]) -> set[str]:
        """The jids of `ticks` still waiting: among the first MAX_WAITING_SCAN jobs of the
        schedule's queue (its oldest are at the tail: both ends are looked at), or in the
        `schedule` set scored between the first tick and the last (plus its jitter and
        lookahead). One pipelined round trip, bounded."""
        jids = {t.jid for t in ticks if t.jid}
        low_s = ticks[0].tick_ms / 1000 - 1
        high_s = ticks[-1].tick_ms / 1000 + schedule.jitter_s + 1
        pipe = self.client.pipeline(transaction=False)
        queue = keys.queue(self.namespace, schedule.queue)
        pipe.lrange(queue, 0, MAX_WAITING_SCAN - 1)
        pipe.lrange(queue, -MAX_WAITING_SCAN, -1)
        pipe.zrangebyscore(keys.schedule(self.namespace), low_s, high_s, start=0,
                           num=MAX_WAITING_SCAN)
        found: set[str] = set()
        with redis_errors(self.client, f"looking for waiting jobs in {queue}"):
            replies = pipe.execute()
        for jobs in replies:
            for job in jobs:
                raw = job.decode(errors="replace") if isinstance(job, bytes) else str(job)
                found |= {j for j in jids if f'"jid":"{j}"' in raw}
        return found

    def history(self, name: str) -> builtins.list[Push]:
        """Schedule `name`'s last pushes, newest first; ConfigError when there is no such
        schedule and no history."""
        text, exists = self.side.read_history(name)
        if text is None and not exists:
            raise self.no_schedule([name])
        try:
            return parse_history(name, text) if text is not None else []
        except ValueError:
            raise ConfigError(f"the history of schedule {shown(name)} in "
                              f"{keys.history(self.namespace)} is garbled: "
                              f"{shown(text)}") from None

    def _schedule(self, name: str, data: bytes | Oversized | None) -> Schedule | str:
        """The checked schedule of a stored definition, or why there is none."""
        if data is None:
            return "no schedule of that name"
        if isinstance(data, Oversized):
            return data.why()
        try:
            return read_definition(name, data, window_s=self.window_s)
        except ConfigError as exc:
            return "its definition is invalid: " + "; ".join(exc.problems)


OVERLAP_HELD = ("overlap: skip: its previous job still waits or runs; its ticks stay recorded "
                "(backfill again once that job has run: one job a backfill)")


def _ranges(name: str, text: str) -> builtins.list[Range]:
    try:
        return parse_ranges(text)
    except ValueError:
        raise ConfigError(f"the missed-ticks record of schedule {shown(name)} is garbled: "
                          f"{shown(text)}") from None


def _pieces(schedule: Schedule, sha: str, ranges: Sequence[Range], latest_only: bool,
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
        jobs: builtins.list[tuple[int, str]] = []
        for tick in ticks_in(timetable, r.after_ms, r.through_ms):
            if len(jobs) == MAX_JOBS_PER_CALL:
                yield Piece(name, after, jobs[-1][0], queue, sha, jobs, limit, overlap)
                after, jobs = jobs[-1][0], []
            tick_ms = to_ms(tick)
            jobs.append((tick_ms, job(tick_ms)))
            any_tick = True
        if any_tick:  # a scope without a tick leaves the record as it is (no split)
            yield Piece(name, after, r.through_ms, queue, sha, jobs, limit, overlap)


def as_mapping(data: bytes) -> dict[str, Any] | None:
    try:
        value = json_text.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
