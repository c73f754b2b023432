"""The schedule store's Python API (DESIGN §7): schedules written at runtime, one or in bulk.

    from kiqbeat.store import Store
    store = Store(redis.Redis.from_url(url))
    store.put("digest:42", {"cron": "0 9 * * *", "tz": "Asia/Kolkata",
                            "class": "DigestWorker", "args": [42]})
    store.pause("digest:42"); store.resume("digest:42"); store.remove("digest:42")

A definition is a mapping in a document's schedule form (README, "Configuration"): it is
checked as a document's schedule is, with the same messages, before anything is written,
and the next invocation plans it ("plan me" in the due index). The promises of DESIGN §2
hold through every change: a changed cron or zone applies to ticks after the watermark;
a paused schedule's watermark keeps moving, so resuming it pushes nothing from the pause;
removing forgets its state, so a schedule of the same name added later starts afresh.

Schedules written here belong to the API; a document's schedules belong to the document
(`Engine` applies documents). Each may pause and resume the other's, but not change or
remove them. Every method raises ConfigError (bad definition, unknown name, ownership)
or a StateError / RedisUnavailable from Redis.

Every change is recorded in the audit trail (kiqbeat.audit) for the store's `actor` (by
default user@host), with its `note`: `store.acting("alice", note="INC-42").pause(name)`.
"""

from __future__ import annotations

import builtins
import copy
import json
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import redis

from kiqbeat.audit import default_actor, record_action
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
    DEFAULT_HISTORY,
    REASONS,
    Push,
    Range,
    count_ticks,
    last_tick_in,
    parse_history,
    parse_ranges,
    ticks_in,
)
from kiqbeat.core.report import PushedJob
from kiqbeat.core.schedule import Schedule
from kiqbeat.document.validate import encode_definition, read_definition
from kiqbeat.errors import ConfigError, KiqbeatError, shown
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import redis_errors, reply_bytes, reply_text
from kiqbeat.redis.records import Piece, push_backfill, push_manual, read_definitions, read_records
from kiqbeat.redis.store import (
    BATCH,
    WRITE_CODES,
    Counts,
    Op,
    Stored,
    definition_sha,
    read_clock,
    read_counts,
    read_order,
    read_stored,
    recorded_shards,
    reindex,
    scan_items,
    scan_names,
    write,
)


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

    def line(self) -> str:
        """One line for a person (`kiqbeat status`, `kiqbeat schedules list`)."""
        if self.next_tick is None:
            return f"{self.name}: set aside: {self.set_aside}"
        covered = (self.covered_through.isoformat(timespec="seconds") if self.covered_through
                   else "never seen")
        late = f", {self.lag_s:.0f} s overdue" if self.lag_s > 0 else ""
        return (f"{self.name}{'' if self.enabled else ' (paused)'}: {self.timing}; last tick "
                f"covered {covered}; next {self.next_tick.isoformat(timespec='seconds')}{late}"
                + (f"; from {self.source}" if self.source else ""))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        def iso(t: datetime | None) -> str | None:
            return t.isoformat() if t else None
        return {"name": self.name, "source": self.source, "enabled": self.enabled,
                "zone": self.zone, "timing": self.timing,
                "covered_through": iso(self.covered_through),
                "first_seen": iso(self.first_seen), "next_tick": iso(self.next_tick),
                "lag_s": round(self.lag_s, 3), "set_aside": self.set_aside,
                "definition": self.definition}


@dataclass(frozen=True)
class Status:
    """The store at a glance and one page of schedules, most overdue first."""

    now: datetime
    counts: Counts
    schedules: list[ScheduleStatus]
    set_aside: list[tuple[str, str]]  # (name, why), at most one page


@dataclass
class ImportResult:
    """What a bulk import did."""

    written: int = 0
    unchanged: int = 0
    invalid: list[tuple[str, str]] = field(default_factory=list)  # (name, why): not written
    refused: list[tuple[str, str]] = field(default_factory=list)  # (name, why): not written


@dataclass(frozen=True)
class MissedRange:
    """Recorded missed ticks of one schedule: those in (after, through]."""

    name: str
    after: datetime
    through: datetime
    reason: str  # "window", "policy" or "paused" (core/records.py REASONS)
    ticks: int | None  # counted with the current definition (None: there is none)
    capped: bool  # counting stopped at records.COUNT_CAP: there are more

    def line(self) -> str:
        """One line for a person (`kiqbeat missed`)."""
        count = ("? ticks (no valid definition)" if self.ticks is None else
                 f"{self.ticks:,}{'+' if self.capped else ''} tick(s)")
        return (f"{self.name}: {count} after {self.after.isoformat(timespec='seconds')} "
                f"through {self.through.isoformat(timespec='seconds')}: {REASONS[self.reason]}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"name": self.name, "after": self.after.isoformat(),
                "through": self.through.isoformat(), "reason": self.reason,
                "ticks": self.ticks, "capped": self.capped}


@dataclass
class Backfill:
    """What a backfill did (or, dry, would do)."""

    schedules: int = 0  # schedules with recorded ticks in scope
    planned: int = 0  # ticks it meant to push (dry run: counted, at most COUNT_CAP a range)
    capped: bool = False  # a dry run's count stopped at COUNT_CAP somewhere: there are more
    dropped: int = 0  # a latest-only dry run: older ticks it would take out unpushed
    pushed: int = 0
    already: int = 0  # pushed by another backfill first
    stale: int = 0  # ticks left alone: the definition changed meanwhile (run it again)
    finished: bool = True  # False: stopped at its deadline; run it again for the rest
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (name, why): not touched
    jobs: list[PushedJob] = field(default_factory=list)  # the first MAX_LISTED pushed

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"schedules": self.schedules, "planned": self.planned, "capped": self.capped,
                "dropped": self.dropped, "pushed": self.pushed, "already": self.already,
                "stale": self.stale, "finished": self.finished,
                "skipped": [{"name": n, "why": w} for n, w in self.skipped],
                "jobs": [{"schedule": j.schedule, "tick": j.tick.isoformat(), "jid": j.jid,
                          "queue": j.queue} for j in self.jobs]}


@dataclass(frozen=True)
class Triggered:
    """A manual run: the job pushed now."""

    name: str
    jid: str
    queue: str
    at: datetime

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"name": self.name, "jid": self.jid, "queue": self.queue,
                "at": self.at.isoformat()}


MAX_LISTED = 1000  # pushed jobs a Backfill lists


class Store:
    """The schedules in one Redis under one key prefix, read and written."""

    def __init__(self, client: redis.Redis, *, namespace: str = "", shards: int | None = None,
                 window_s: float = 3600.0, history: int = DEFAULT_HISTORY,
                 lua: scripts.Caller = scripts.SCRIPTS, actor: str | None = None) -> None:
        """`shards`: the count the deployment's invocations run with; by default the one
        recorded in Redis (1 before any). A write with another count is refused. `history`:
        pushes kept per schedule by backfills and manual runs (invocations keep their own
        setting's)."""
        self.client, self.namespace = client, namespace
        self.shards = recorded_shards(client, namespace) if shards is None else shards
        self.window_s, self.keep_history, self._lua = window_s, history, lua
        self.actor, self.note = actor or default_actor(), ""

    def acting(self, actor: str | None = None, note: str = "") -> Store:
        """This store, its changes recorded in the audit trail for `actor` with `note`."""
        other = copy.copy(self)
        other.actor, other.note = actor or self.actor, note
        return other

    def _audit(self, action: str, name: str = "", detail: str = "") -> None:
        record_action(self.client, self.namespace, self.actor, action, name, note=self.note,
                      detail=detail)

    # ------------------------------------------------------------------------ writing

    def check(self, name: str, definition: Mapping[str, Any]) -> bytes:
        """The stored form of a definition; ConfigError with a document's messages."""
        if not isinstance(definition, Mapping):
            raise ConfigError(f"schedule {shown(name)}: a definition is a mapping of fields "
                              f"(cron, class, ...), got {shown(definition)}")
        if "source" in definition:
            raise ConfigError(f"schedule {shown(name)}: 'source' is kiqbeat's (who wrote the "
                              "schedule), not a field to set")
        data = encode_definition(dict(definition))
        read_definition(name, data, window_s=self.window_s)
        return data

    def add(self, name: str, definition: Mapping[str, Any]) -> None:
        """Add a schedule; ConfigError when one of that name exists."""
        self._one(Op("add", name, self.check(name, definition)))
        self._audit("add", name)

    def put(self, name: str, definition: Mapping[str, Any]) -> bool:
        """Add or replace a schedule; False when it was stored exactly so already."""
        changed = self._one(Op("put", name, self.check(name, definition))) == "+"
        self._audit("put", name, "" if changed else "unchanged")
        return changed

    def update(self, name: str, definition: Mapping[str, Any]) -> bool:
        """Replace a schedule; ConfigError when there is none of that name."""
        changed = self._one(Op("update", name, self.check(name, definition))) == "+"
        self._audit("update", name, "" if changed else "unchanged")
        return changed

    def remove(self, name: str) -> bool:
        """Remove a schedule and forget its state; False when there was none."""
        code, owner = write(self.client, self.namespace, self.shards, [Op("del", name)],
                            self._lua)[0]
        if code == "O":
            raise ConfigError(f"schedule {name!r} belongs to {owner}; remove it there")
        if code == "+":
            self._audit("remove", name)
        return code == "+"

    def pause(self, name: str) -> bool:
        """Push nothing for it until resumed (its ticks are passed over); False if it was."""
        changed = self._set_enabled(name, False)
        self._audit("pause", name, "" if changed else "paused already")
        return changed

    def resume(self, name: str) -> bool:
        """Push its ticks again, from the next one on; False if it was not paused."""
        changed = self._set_enabled(name, True)
        self._audit("resume", name, "" if changed else "running already")
        return changed

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the due index for this store's shard count (`shards`), after changing it;
        returns the entries indexed. Safe while invocations run (no tick twice); until it
        is done, invocations of the new count miss the entries not yet moved (late, within
        the window, not lost)."""
        return reindex(self.client, self.namespace, self.shards, progress)

    def import_definitions(
        self, items: Iterable[tuple[str, Mapping[str, Any]]], *, replace: bool = True,
        progress: Callable[[int], None] | None = None,
    ) -> ImportResult:
        """Write many schedules, in atomic calls of `WRITE_BATCH`; invalid ones are listed, not
        written.

        With `replace` False, existing schedules are left as they are (and listed as refused).
        `progress` is called with the number of schedules handled after each `BATCH`.
        """
        result = ImportResult()
        ops: builtins.list[Op] = []

        def flush() -> None:
            codes = write(self.client, self.namespace, self.shards, ops, self._lua)
            for op, (code, owner) in zip(ops, codes, strict=True):
                if code == "+":
                    result.written += 1
                elif code == "=":
                    result.unchanged += 1
                else:
                    why = f"belongs to {owner}" if code == "O" else WRITE_CODES[code]
                    result.refused.append((op.name, why))
            if progress is not None:
                progress(len(ops))
            ops.clear()

        for name, definition in items:
            try:
                ops.append(Op("put" if replace else "add", name, self.check(name, definition)))
            except ConfigError as exc:
                result.invalid.append((name, "; ".join(exc.problems)))
                if progress is not None:
                    progress(1)
            if len(ops) >= BATCH:
                flush()
        if ops:
            flush()
        self._audit("import", "", f"{result.written} written, {result.unchanged} unchanged, "
                                  f"{len(result.invalid)} invalid, {len(result.refused)} refused")
        return result

    def no_schedule(self, names: Iterable[str]) -> ConfigError:
        """The error for `names` the store does not hold: it names the hash looked in, so
        that a wrong namespace (key prefix) shows."""
        key = keys.definitions(self.namespace)
        return ConfigError([f"no schedule {n!r} in the store ({key})" for n in names])

    def _one(self, op: Op) -> str:
        code, owner = write(self.client, self.namespace, self.shards, [op], self._lua)[0]
        if code in "+=":
            return code
        if code == "O":
            raise ConfigError(f"schedule {op.name!r} belongs to {owner}; change it there")
        if code == "E":
            raise ConfigError(f"schedule {op.name!r} exists; update or put it instead")
        raise self.no_schedule([op.name])

    def _set_enabled(self, name: str, enabled: bool) -> bool:
        for _ in range(10):  # another writer between the read and the write: read again
            with redis_errors(self.client, f"reading schedule {name!r}"):
                data = reply_bytes(self.client.hget(keys.definitions(self.namespace), name))
            if data is None:
                raise self.no_schedule([name])
            current = _definition(data)
            if current is None:
                raise ConfigError(f"schedule {name!r} has a definition that is not a JSON "
                                  "object; write it again")
            if current.get("enabled", True) is enabled:
                return False
            source = current.pop("source", "")
            new = encode_definition({**current, "enabled": enabled}, str(source))
            code, _ = write(self.client, self.namespace, self.shards,
                            [Op("set", name, new, expect=definition_sha(data))], self._lua)[0]
            if code in "+=":
                return True
            if code == "M":
                raise self.no_schedule([name])
        raise ConfigError(f"schedule {name!r} kept changing while being paused or resumed")

    # ------------------------------------------------------------------------ reading

    def get(self, name: str) -> ScheduleStatus | None:
        """One schedule's definition and state; None when there is none of that name."""
        now = read_clock(self.client)
        rows = self._rows([name], now)
        return rows[0] if rows else None

    def rows(self, names: Sequence[str]) -> builtins.list[ScheduleStatus]:
        """The schedules of `names` that exist, in that order (one round trip per BATCH)."""
        return self._rows(names, read_clock(self.client))

    def list(self, cursor: int = 0, count: int = 100) -> tuple[int, builtins.list[ScheduleStatus]]:
        """One page of schedules in no particular order: (next cursor, 0 at the end; rows).

        Pages come from HSCAN, so a schedule added or removed meanwhile may or may not
        appear; none present throughout is missed.
        """
        cursor, names = scan_names(self.client, keys.definitions(self.namespace), cursor, count)
        return cursor, self._rows(names, read_clock(self.client))

    def export(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every stored definition (without its source), one HSCAN page per round trip."""
        for name, data in scan_items(self.client, keys.definitions(self.namespace)):
            definition = _definition(data)
            if definition is not None:
                definition.pop("source", None)
                yield name, definition

    def status(self, names: Sequence[str] = (), *, shard: tuple[int, int] | None = None,
               offset: int = 0, limit: int = 50) -> Status:
        """Counts, then `names` (or a page of the due index, most overdue first) and a page
        of set-aside definitions; of `shard`, or of every shard."""
        now = read_clock(self.client)
        shards: list[tuple[int, int] | None] = (
            [shard] if shard is not None else
            [(i, self.shards) for i in range(self.shards)] if self.shards > 1 else [None])
        counts = read_counts(self.client, self.namespace, shards, to_ms(now))
        if names:
            rows = self._rows(names, now)
            unknown = sorted(set(names) - {r.name for r in rows})
            if unknown:
                raise self.no_schedule(unknown)
        else:
            rows = self._rows(read_order(self.client, self.namespace, shards, offset, limit),
                              now)
        aside = []
        if counts.set_aside:
            for name, why in scan_items(self.client, keys.rejected(self.namespace)):
                aside.append((name, why.decode(errors="replace")))
                if len(aside) >= limit:
                    break
        return Status(now, counts, rows, aside)

    def _rows(self, names: Sequence[str], now: datetime) -> builtins.list[ScheduleStatus]:
        return [row for stored in read_stored(self.client, self.namespace, names)
                if (row := self._row(stored, now)) is not None]

    def _row(self, stored: Stored, now: datetime) -> ScheduleStatus | None:
        if stored.definition is None:
            return None
        raw = _definition(stored.definition)
        source = str(raw.pop("source", "")) if raw is not None else ""
        mark = from_ms(stored.mark_ms) if stored.mark_ms is not None else None
        seen = from_ms(stored.first_seen_ms) if stored.first_seen_ms is not None else None
        try:
            schedule = read_definition(stored.name, stored.definition, window_s=self.window_s)
        except ConfigError as exc:
            why = stored.rejected or "; ".join(exc.problems)
            return ScheduleStatus(stored.name, raw, source, False, "", "", mark, seen, None,
                                  0.0, why)
        window_start = now - timedelta(seconds=self.window_s)
        after = max(mark, window_start) if mark else now
        nxt = schedule.timetable.next_after(after)
        return ScheduleStatus(stored.name, raw, source, schedule.enabled,
                              schedule.timetable.zone_name, schedule.timing, mark, seen, nxt,
                              max(0.0, (now - nxt).total_seconds()), stored.rejected)


    # ------------------------------------------------------------------------ operations

    def missed(self, names: Sequence[str] = ()) -> builtins.list[MissedRange]:
        """The recorded missed ticks of `names` (default: every schedule), as ranges."""
        records = dict(read_records(self.client, keys.missed(self.namespace), names))
        definitions = read_definitions(self.client, self.namespace, builtins.list(records))
        out = []
        for name, text in sorted(records.items()):
            schedule = self._schedule(name, definitions.get(name))
            for r in _ranges(name, text):
                count: tuple[int | None, bool] = (None, False)
                if not isinstance(schedule, str):
                    count = count_ticks(schedule.timetable, r.after_ms, r.through_ms)
                out.append(MissedRange(name, from_ms(r.after_ms), from_ms(r.through_ms),
                                       r.reason, *count))
        return out

    def backfill(self, names: Sequence[str] = (), *, since: datetime | None = None,
                 until: datetime | None = None, latest_only: bool = False,
                 dry_run: bool = False, progress: Callable[[int], None] | None = None,
                 deadline: float | None = None) -> Backfill:
        """Push the recorded missed ticks of `names` (default: every schedule with some) at
        or after `since` and at or before `until`, and take them out of the record.

        Each recorded tick is pushed at most once whatever runs at the same time (other
        backfills, invocations, a backfill killed half-way and run again): backfill.lua
        pushes a tick only while it is still recorded, and takes it out in the same step.
        The job is the tick's own (its jid, `include_metadata`'s `scheduled_at`) into the
        schedule's queue. `latest_only` pushes only the newest tick in scope per schedule
        and takes the rest out of the record unpushed. Paused schedules, and those without a
        valid definition, are left as they are (`skipped` says why). `dry_run` pushes
        nothing and counts what would be. `progress(n)` follows each call: n ticks handled.
        Past `deadline` (time.monotonic()) no call starts but the first, and `finished` is
        False: what was pushed is out of the record, and running it again pushes the rest.
        """
        result = self._backfill(names, since, until, latest_only, dry_run, progress, deadline)
        if not dry_run:
            scope = (f" of {len(names)} schedules" if len(names) > 1 else "" if names
                     else " (all)")
            self._audit("backfill", names[0] if len(names) == 1 else "",
                        f"{result.pushed} pushed{scope}")
        return result

    def _backfill(self, names: Sequence[str], since: datetime | None, until: datetime | None,
                  latest_only: bool, dry_run: bool, progress: Callable[[int], None] | None,
                  deadline: float | None) -> Backfill:
        since_ms = None if since is None else to_ms_up(since)
        until_ms = None if until is None else to_ms(until)
        # Every record parsed before the first push: a garbled one stops the backfill
        # before it has pushed anything (definitions are checked one by one below, within
        # the deadline).
        recorded = {name: _ranges(name, text) for name, text
                    in read_records(self.client, keys.missed(self.namespace), names)}
        definitions = read_definitions(self.client, self.namespace, builtins.list(names)
                                       or builtins.list(recorded))
        result = Backfill()
        # Named, with neither definition nor record (one with a record is skipped below).
        result.skipped += [(n, "no schedule of that name") for n in names
                           if n not in definitions and n not in recorded]
        clock, started = read_clock(self.client), time.monotonic()
        memo = TickMemo()
        batch: builtins.list[Piece] = []
        calls = batch_jobs = batch_bytes = 0

        def late() -> bool:  # past the deadline, after a first call (which always goes)
            return deadline is not None and calls > 0 and time.monotonic() > deadline

        def flush() -> None:
            nonlocal calls, batch_jobs, batch_bytes
            try:
                pushed, already, stale, flags = push_backfill(
                    self.client, self.namespace, batch, self.keep_history, self._lua)
            except KiqbeatError as exc:
                if not calls:
                    raise
                raise type(exc)(f"{exc}; before this, {result.pushed:,} tick(s) were pushed by "
                                f"{calls} earlier call(s) and taken out of the record (running "
                                "the backfill again pushes the rest)") from exc
            result.pushed, result.already = result.pushed + pushed, result.already + already
            result.stale += stale
            jobs = ((piece, tick) for piece in batch for tick, _ in piece.jobs)
            for (piece, tick), flag in zip(jobs, flags, strict=True):
                if flag == "1" and len(result.jobs) < MAX_LISTED:
                    result.jobs.append(PushedJob(piece.name, from_ms(tick),
                                                 jid_ms(piece.name, tick), piece.queue))
            if progress is not None:
                progress(len(flags))
            batch.clear()
            calls, batch_jobs, batch_bytes = calls + 1, 0, 0

        for name, record in sorted(recorded.items()):
            schedule = self._schedule(name, definitions.get(name))
            if isinstance(schedule, str):
                result.skipped.append((name, schedule))
                continue
            if not schedule.enabled:
                result.skipped.append((name, "paused: resume it to backfill its missed ticks"))
                continue
            ranges = [c for r in record if (c := r.clip(since_ms, until_ms))]
            if not ranges:
                continue
            result.schedules += 1
            if dry_run:
                timetable = schedule.timetable
                ticks = 0
                for r in ranges:
                    count, more = count_ticks(timetable, r.after_ms, r.through_ms)
                    ticks += count
                    result.capped |= more
                if latest_only and ticks:  # the newest pushed, the older taken out
                    result.planned += 1
                    result.dropped += ticks - 1
                elif not latest_only:
                    result.planned += ticks
                continue
            sha = definition_sha(definitions[name])

            def job(tick_ms: int, schedule: Schedule = schedule) -> str:
                now = clock + timedelta(seconds=time.monotonic() - started)
                return memo.payload(schedule, from_ms(tick_ms), jid_ms(schedule.name, tick_ms),
                                    now, scheduled=False)

            for piece in _pieces(schedule, sha, ranges, latest_only, job):
                if late():
                    result.finished = False
                    return result
                result.planned += len(piece.jobs)
                size = sum(len(j) for _, j in piece.jobs)
                if batch and (len(batch) >= MAX_JOBS_PER_CALL
                              or batch_jobs + len(piece.jobs) > MAX_JOBS_PER_CALL
                              or batch_bytes + size > MAX_BYTES_PER_CALL):
                    flush()
                batch.append(piece)
                batch_jobs, batch_bytes = batch_jobs + len(piece.jobs), batch_bytes + size
        if batch:
            if late():
                result.finished = False
            else:
                flush()
        return result

    def trigger(self, name: str, args: builtins.list[Any] | None = None) -> Triggered:
        """Push one job of schedule `name` now ("run now"), with `args` instead of its own if
        given, paused or not. Its jid is "manual" and 18 random hex digits: never a tick's
        (24 hex digits), so it neither stands for nor hides any tick. Recorded in the
        schedule's history as manual."""
        stored = read_definitions(self.client, self.namespace, [name]).get(name)
        if stored is None:
            raise self.no_schedule([name])
        data = stored
        if args is not None:
            raw = _definition(stored) or {}
            raw["args"] = args
            data = json.dumps(raw).encode()
        schedule = read_definition(name, data, window_s=self.window_s)
        now = read_clock(self.client)
        jid = "manual" + secrets.token_hex(9)
        job = job_json(schedule, now, pushed_at=now, job_id=jid)
        if not push_manual(self.client, self.namespace, name, definition_sha(stored),
                           schedule.queue, jid, to_ms(now), job, self.keep_history, self._lua):
            raise ConfigError(f"schedule {name!r} changed or was removed while being run; "
                              "nothing was pushed")
        self._audit("trigger", name, f"jid {jid}" + ("" if args is None else ", own args"))
        return Triggered(name, jid, schedule.queue, now)

    def history(self, name: str) -> builtins.list[Push]:
        """Schedule `name`'s last pushes, newest first; ConfigError when there is no such
        schedule and no history."""
        key = keys.history(self.namespace)
        with redis_errors(self.client, f"reading {key}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hget(key, name)
            pipe.hexists(keys.definitions(self.namespace), name)
            text, exists = pipe.execute()
        if text is None and not exists:
            raise self.no_schedule([name])
        try:
            return parse_history(name, reply_text(text)) if text is not None else []
        except ValueError:
            raise ConfigError(f"the history of schedule {name!r} in {key} is garbled: "
                              f"{shown(reply_text(text))}") from None

    def _schedule(self, name: str, data: bytes | None) -> Schedule | str:
        """The checked schedule of a stored definition, or why there is none."""
        if data is None:
            return "no schedule of that name"
        try:
            return read_definition(name, data, window_s=self.window_s)
        except ConfigError as exc:
            return "its definition is invalid: " + "; ".join(exc.problems)


def _ranges(name: str, text: str) -> builtins.list[Range]:
    try:
        return parse_ranges(text)
    except ValueError:
        raise ConfigError(f"the missed-ticks record of schedule {name!r} is garbled: "
                          f"{shown(text)}") from None


def _pieces(schedule: Schedule, sha: str, ranges: Sequence[Range], latest_only: bool,
            job: Callable[[int], str]) -> Iterator[Piece]:
    """The backfill calls' parts for one schedule's ranges (ascending), at most
    MAX_JOBS_PER_CALL jobs each; each covers from where the last ended. A range (or, for
    `latest_only`, a scope) holding no tick gives none."""
    name, queue, timetable = schedule.name, schedule.queue, schedule.timetable
    if latest_only:
        newest = next((t for r in reversed(ranges)
                       if (t := last_tick_in(timetable, r.after_ms, r.through_ms))), None)
        if newest is not None:
            yield Piece(name, ranges[0].after_ms, ranges[-1].through_ms, queue, sha,
                        [(to_ms(newest), job(to_ms(newest)))])
        return
    for r in ranges:
        after, any_tick = r.after_ms, False
        jobs: builtins.list[tuple[int, str]] = []
        for tick in ticks_in(timetable, r.after_ms, r.through_ms):
            if len(jobs) == MAX_JOBS_PER_CALL:
                yield Piece(name, after, jobs[-1][0], queue, sha, jobs)
                after, jobs = jobs[-1][0], []
            tick_ms = to_ms(tick)
            jobs.append((tick_ms, job(tick_ms)))
            any_tick = True
        if any_tick:  # a scope without a tick leaves the record as it is (no split)
            yield Piece(name, after, r.through_ms, queue, sha, jobs)


def _definition(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
