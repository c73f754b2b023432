"""The schedule store's Python API (DESIGN §7): schedules written at runtime, one or in bulk.

    from kiqbeat.store import Store
    store = Store(redis.Redis.from_url(url))
    store.put("digest:42", {"cron": "0 9 * * *", "tz": "Asia/Kolkata",
                            "class": "DigestWorker", "args": [42]})
    store.pause("digest:42", note="INC-42: the mailer is down",
                until=datetime(2026, 3, 2, 9, tzinfo=UTC))
    store.resume("digest:42"); store.remove("digest:42")
    store.put_calendar("holidays", ["2026-12-25", "2027-01-01"])  # `except: [holidays]`

A definition is a mapping in a document's schedule form (README, "Configuration"): it is
checked as a document's schedule is, with the same messages, before anything is written,
and the next invocation plans it ("plan me" in the due index). The promises of DESIGN §2
hold through every change: a changed cron or zone applies to ticks after the watermark;
a paused schedule's watermark keeps moving, so resuming it (or the pause reaching its
`until`) pushes nothing from the pause, and a pause is its own record, which a document
rewriting the schedule leaves in place;
removing forgets its state, so a schedule of the same name added later starts afresh.

Schedules written here belong to the API; a document's schedules belong to the document
(`Engine` applies documents). Each may pause and resume the other's, but not change or
remove them — except with `force=True` (`--force-owner`), the way out for a definition whose
`"source"` names a document the store does not know (written by hand, or by another tool),
or one no longer applied anywhere. Every method raises ConfigError (bad definition, unknown
name, ownership) or a StateError / RedisUnavailable from Redis.

Every change is recorded in the audit trail (kiqbeat.audit) for the store's `actor` (by
default user@host), with its `note`: `store.acting("alice", note="INC-42").pause(name)`.

The operator's commands — `status`, `missed`, `backfill`, `trigger`, `history` — live in
`kiqbeat.operator` and are methods of every Store. Single writes take the instant of the
change from one Redis clock read per call (an import's every write included), passed to
the write script; reads that show rows read the clock once per call.
"""

from __future__ import annotations

import builtins
import copy
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Any

from kiqbeat.core import json_text
from kiqbeat.core.limits import (
    MAX_CALENDARS,
    MAX_DEFINITION_BYTES,
    MAX_PENDING_SKIPS,
    MAX_SHOWN_CHARS,
)
from kiqbeat.core.pause import Pause, pause_of, until_iso
from kiqbeat.core.plan import to_ms
from kiqbeat.document.fields import calendars as checked_calendars
from kiqbeat.document.lifecycle import named_calendars, with_calendars
from kiqbeat.document.validate import check_size, check_stored, encode_definition
from kiqbeat.errors import (
    ConfigError,
    KiqbeatError,
    RedisRefusedError,
    StateError,
    did_you_mean,
    shown,
    shown_text,
)
from kiqbeat.operator import (
    MAX_LISTED,
    Backfill,
    MissedRange,
    Operator,
    ScheduleStatus,
    Status,
    Triggered,
    as_mapping,
)
from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors, reply_text
from kiqbeat.redis.definitions import (
    WRITE_BATCH,
    WRITE_CODES,
    Op,
    Oversized,
    StartedWrite,
    definition_sha,
    write_batches,
)

# The operator's results, importable from here as they always were.
__all__ = ["MAX_LISTED", "Backfill", "CalendarChange", "ImportResult", "MissedRange",
           "ScheduleStatus", "Status", "Store", "Triggered", "unexported"]

# Schedules a refused calendar removal names (it says how many there are in all).
MAX_CALENDAR_USERS_SHOWN = 10


@dataclass
class ImportResult:
    """What a bulk import did."""

    written: int = 0
    unchanged: int = 0
    invalid: list[tuple[str, str]] = field(default_factory=list)  # (name, why): not written
    refused: list[tuple[str, str]] = field(default_factory=list)  # (name, why): not written



@dataclass
class CalendarChange:
    """What setting a store calendar did: the API's definitions naming it in `except`,
    rewritten with its dates (or so already), and those not rewritten, with why."""

    name: str
    dates: int
    rewritten: int = 0
    unchanged: int = 0
    not_rewritten: list[tuple[str, str]] = field(default_factory=list)  # (schedule, why)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"calendar": self.name, "dates": self.dates, "rewritten": self.rewritten,
                "unchanged": self.unchanged,
                "not_rewritten": [{"name": n, "why": w} for n, w in self.not_rewritten]}


class Store(Operator):
    """The schedules in one Redis under one key prefix, read and written; the operator's
    commands (status, missed, backfill, trigger, history) are inherited from
    `kiqbeat.operator.Operator`. Built as `Operator` is: `Store(client, namespace=...,
    shards=..., window_s=..., history=..., lua=..., actor=...)`."""

    # ------------------------------------------------------------------------ writing

    def check(self, name: str, definition: Mapping[str, Any], *,
              calendars: Mapping[str, Sequence[str]] | None = None) -> bytes:
        """The stored form of a definition; ConfigError with a document's messages (one
        over MAX_DEFINITION_BYTES as stored is refused, naming the limit).

        Each calendar its `except` names that the store holds (`put_calendar`) has the
        store's dates written into the definition's own `calendars` (replacing any it
        defined under that name); one named that neither defines is refused, naming the
        known ones. `calendars`: the store's, when the caller read them already."""
        if not isinstance(definition, Mapping):
            raise ConfigError(f"schedule {shown(name)}: a definition is a mapping of fields "
                              f"(cron, class, ...), got {shown(definition)}")
        if "source" in definition:
            raise ConfigError(f"schedule {shown(name)}: 'source' is kiqbeat's (who wrote the "
                              "schedule), not a field to set")
        data = encode_definition(self._calendars_written_in(name, definition, calendars))
        check_size(name, data)
        check_stored(name, data, window_s=self.window_s)
        return data

    def _calendars_written_in(self, name: str, definition: Mapping[str, Any],
                              held: Mapping[str, Sequence[str]] | None) -> dict[str, Any]:
        """The definition with the store's calendars its `except` names written in (`held`:
        the store's calendars, read here when not given); ConfigError naming a calendar
        neither the store nor the definition defines, and the known ones."""
        names = named_calendars(definition)
        if not names:
            return dict(definition)
        if held is None:
            held = self._read_calendars(names)
        own = definition.get("calendars")
        own_names = list(own) if isinstance(own, Mapping) else []
        unknown = [n for n in names if n not in held and n not in own_names]
        if unknown:
            store_names = sorted(self.calendars())
            known = [*store_names, *own_names]
            raise ConfigError([
                f"schedule {shown(name)} (field 'except'): no calendar {shown(n)}"
                f"{did_you_mean(n, known)} (the store's calendars: "
                f"{', '.join(store_names) or 'none'}; the definition's: "
                f"{', '.join(map(str, own_names)) or 'none'}; define one with `kiqbeat "
                "schedules calendar set NAME DATE...`)" for n in unknown])
        return with_calendars(definition, held)

    def add(self, name: str, definition: Mapping[str, Any]) -> None:
        """Add a schedule; ConfigError when one of that name exists."""
        self._one(Op("add", name, self.check(name, definition)), self._now_ms())
        self._audit("add", name)

    def put(self, name: str, definition: Mapping[str, Any], *, force: bool = False) -> bool:
        """Add or replace a schedule; False when it was stored exactly so already. `force`:
        replace it whatever source it names (it then belongs to the API)."""
        op, now_ms = Op("put", name, self.check(name, definition)), self._now_ms()
        changed = (self._forced(op, now_ms) if force else self._one(op, now_ms)) == "+"
        self._audit("put", name, _detail(changed=changed, forced=force))
        return changed

    def update(self, name: str, definition: Mapping[str, Any], *,
               force: bool = False) -> bool:
        """Replace a schedule; ConfigError when there is none of that name. `force`: as
        `put`'s."""
        op, now_ms = Op("update", name, self.check(name, definition)), self._now_ms()
        changed = (self._forced(op, now_ms) if force else self._one(op, now_ms)) == "+"
        self._audit("update", name, _detail(changed=changed, forced=force))
        return changed

    def remove(self, name: str, *, force: bool = False) -> bool:
        """Remove a schedule and forget its state; False when there was none. `force`:
        whatever source it names.

        Without `force`, a schedule another source holds is refused: one of a document the
        store knows ("change it there"), or one naming a source no document is known by
        (then the message gives the flag). Forcing over a known document is allowed (a
        document no longer applied anywhere keeps its entry), but that document still lists
        the name, and writes it again when its definition there changes (`owner` tells
        which case it is, for a warning)."""
        op, now_ms = Op("del", name), self._now_ms()
        code = self._forced(op, now_ms) if force else self._one(op, now_ms)
        if code == "+":
            self._audit("remove", name, _detail(changed=True, forced=force))
        return code == "+"

    def owner(self, name: str) -> tuple[str, bool] | None:
        """The source a stored schedule names ("" for the API and other languages) and
        whether the store knows it as a document (it applied one from there, or is
        applying one); None when there is no schedule of that name. One round trip, two
        for a document's."""
        data = self.side.read_present([name]).get(name)
        if data is None:
            return None
        if isinstance(data, Oversized):
            return "", False  # over the limit: not read, and any writer may replace it
        source = (as_mapping(data) or {}).get("source", "")
        source = source if isinstance(source, str) else ""
        return source, bool(source) and self._knows_document(source)

    def pause(self, name: str, *, note: str = "", until: datetime | None = None) -> bool:
        """Push nothing for it until resumed, or until `until` (an aware instant, after the
        Redis clock): its ticks at or before `until` (every tick, without one) are passed
        over, never recorded as missed nor backfilled; after `until` it runs again by itself.
        `note` (at most MAX_PAUSE_NOTE_CHARS) says why; the record also keeps who (the
        store's `actor`) and when, for `status`, `get` and the console (core/pause.py).

        The pause is a record of its own (`kiqbeat:paused`), never written into the
        definition, so a document that changes the schedule leaves it paused. Pausing a
        paused schedule replaces its note and end. False when it was paused already (by a
        pause in force, or by `enabled: false` in its definition)."""
        now_ms = to_ms(self.side.clock())
        record = pause_of(note, self.actor, now_ms, until)
        exists, previous = self.side.write_pause(name, record, now_ms=now_ms)
        if not exists:
            raise self.no_schedule([name])
        was = previous is not None and previous.holds_at(now_ms)
        if not was:
            data = self.side.read_present([name]).get(name)
            current = as_mapping(data) if isinstance(data, bytes) else None
            was = current is not None and current.get("enabled", True) is False
        detail = "; ".join(part for part in (
            "paused already: note and end replaced" if was else "",
            "" if record.until_ms is None else f"until {until_iso(record)}",
            f"note: {note}" if note else "") if part)
        self._audit("pause", name, detail)
        return not was

    def skip(self, name: str, count: int = 1) -> int:
        """Skip the schedule's next `count` ticks: the push step takes one pending skip per
        tick instead of pushing it (core/lifecycle.py `fates`: before overlap and the run
        limit; not counted as a run), records it in the history as "skipped", and never as
        missed. Returns the skips now pending. ConfigError for a count outside 1..
        MAX_PENDING_SKIPS, pending skips beyond it, or no schedule of that name."""
        if isinstance(count, bool) or not isinstance(count, int) or not (
                1 <= count <= MAX_PENDING_SKIPS):
            raise ConfigError(f"skip count {shown(count)} must be a whole number from 1 to "
                              f"{MAX_PENDING_SKIPS:,} (to stop it for longer, pause it)")
        pending = self.side.add_skips(name, count, MAX_PENDING_SKIPS)
        if pending is None:
            raise self.no_schedule([name])
        if pending < 0:
            raise ConfigError(f"schedule {shown(name)} has {self.side.read_skips(name):,} skips "
                              f"pending; {count:,} more would pass {MAX_PENDING_SKIPS:,} "
                              "(to stop it for longer, pause it)")
        self._audit("skip", name, f"{count} tick(s) to skip, {pending} pending")
        return pending

    def resume(self, name: str) -> bool:
        """Push its ticks again, from the next one on; False if it was not paused.

        It deletes the pause record, and ends a pause written into the definition as
        `enabled: false` (by kiqbeat before pause records, by the sidekiq-scheduler tab's
        toggle, or by a document) by writing `enabled: true` there, as resume always did.
        Nothing from the paused span is pushed."""
        now_ms = to_ms(self.side.clock())
        _, previous = self.side.write_pause(name, None, now_ms=now_ms)
        legacy = self._set_enabled(name, True)
        changed = legacy or (previous is not None and previous.holds_at(now_ms))
        self._audit("resume", name, "" if changed else "running already")
        return changed

    def pauses(self, names: Sequence[str]) -> dict[str, Pause]:
        """The pause records of those of `names` that have one (in force or ended: see
        `Pause.holds_at`); one round trip."""
        return self.side.read_pauses(names)

    # ------------------------------------------------------------------------ calendars

    def calendars(self) -> dict[str, tuple[date, ...]]:
        """The store's calendars: name -> its dates, ascending (one round trip)."""
        return {name: tuple(date.fromisoformat(d) for d in dates)
                for name, dates in self.calendars_text().items()}

    def calendar(self, name: str) -> tuple[date, ...] | None:
        """One store calendar's dates, or None when the store holds none of that name."""
        held = self._read_calendars([name])
        return tuple(date.fromisoformat(d) for d in held[name]) if name in held else None

    def calendars_text(self) -> dict[str, builtins.list[str]]:
        """The store's calendars as stored: name -> its dates, "YYYY-MM-DD", ascending (an
        entry another writer left unreadable is left out)."""
        with redis_errors(self.client, "reading the store's calendars"):
            raw = self.client.hgetall(keys.calendars(self.namespace))
        return _readable_calendars({reply_text(k): v for k, v in raw.items()})

    def _read_calendars(self, names: Sequence[str]) -> dict[str, builtins.list[str]]:
        with redis_errors(self.client, "reading the store's calendars"):
            values = self.client.hmget(keys.calendars(self.namespace), builtins.list(names))
        return _readable_calendars(dict(zip(names, values, strict=True)))

    def put_calendar(self, name: str, dates: Sequence[str | date]) -> CalendarChange:
        """Set the store calendar `name` to `dates` ("YYYY-MM-DD" or dates, in each
        schedule's zone), checked as a document's `calendars:` are, then rewrite every
        definition of the API (no document's: documents use their own calendars only)
        whose `except` names it with its dates written in, a WRITE_BATCH at a time through
        the write script, each against the definition it read (one changed meanwhile is
        read again). A definition the new dates make invalid (over MAX_EXCLUDED_DATES) is
        left as it was and listed. Setting it again with the same dates rewrites only
        those still differing: an interrupted change is finished by running it again."""
        if isinstance(dates, str) or not isinstance(dates, Sequence):
            raise ConfigError(f"calendar {shown(name)}: {shown(dates)} must be a list of "
                              "dates (YYYY-MM-DD)")
        given = [d.isoformat() if isinstance(d, date) else d for d in dates]
        ((label, checked),) = checked_calendars({name: given}).items()
        text = sorted({d.isoformat() for d in checked})
        held = self.calendars_text()
        if label not in held and len(held) >= MAX_CALENDARS:
            raise ConfigError(f"calendar {shown(label)}: the store holds {len(held):,} "
                              f"calendars, the most it may ({MAX_CALENDARS:,}); remove one "
                              "first")
        with redis_errors(self.client, "writing a calendar"):
            self.client.hset(keys.calendars(self.namespace), label,
                             json.dumps(text, separators=(",", ":")))
        held[label] = text
        change = self._rewrite_naming(label, held)
        self._audit("calendar set", label,
                    f"{len(text)} date(s); {change.rewritten} definition(s) rewritten, "
                    f"{len(change.not_rewritten)} not")
        return change

    def remove_calendar(self, name: str) -> bool:
        """Remove the store calendar `name`; False when there was none. Refused (ConfigError
        naming the first MAX_CALENDAR_USERS_SHOWN) while a definition of the API names it in
        `except`."""
        users = [n for n, _ in self._naming(name)]
        if users:
            listed = ", ".join(shown(n) for n in users[:MAX_CALENDAR_USERS_SHOWN])
            more = (f" and {len(users) - MAX_CALENDAR_USERS_SHOWN:,} more"
                    if len(users) > MAX_CALENDAR_USERS_SHOWN else "")
            raise ConfigError(f"calendar {shown(name)} is named in 'except' by "
                              f"{len(users):,} schedule(s): {listed}{more}; take it out of "
                              "them first (nothing was removed)")
        with redis_errors(self.client, "removing a calendar"):
            removed = bool(self.client.hdel(keys.calendars(self.namespace), name))
        if removed:
            self._audit("calendar remove", name)
        return removed

    def _naming(self, calendar: str) -> Iterator[tuple[str, bytes]]:
        """The API's stored definitions (no document's) whose `except` names `calendar`,
        with their bytes, a page per two round trips."""
        for name, data in self.side.scan_definitions():
            value = _exportable(name, data)
            if (isinstance(value, dict) and not value.get("source")
                    and calendar in named_calendars(value) and isinstance(data, bytes)):
                yield name, data

    def _rewrite_naming(self, calendar: str,
                        held: Mapping[str, Sequence[str]]) -> CalendarChange:
        change = CalendarChange(calendar, len(held[calendar]))
        now_ms = self._now_ms()
        pending: builtins.list[Op] = []
        again: builtins.list[str] = []

        def op_for(name: str, data: bytes) -> None:
            value = _exportable(name, data)
            if not isinstance(value, dict):
                return
            new = with_calendars(value, {calendar: held[calendar]})
            if new == value:
                change.unchanged += 1
                return
            try:
                new_data = self.check(name, new, calendars=held)
            except ConfigError as exc:
                change.not_rewritten.append((name, "; ".join(exc.problems)))
                return
            pending.append(Op("set", name, new_data, expect=definition_sha(data)))

        def flush() -> None:
            for call in write_batches(pending):
                for op, (code, _) in zip(call, self.side.write(call, now_ms=now_ms),
                                         strict=True):
                    if code == "+":
                        change.rewritten += 1
                    elif code == "=":
                        change.unchanged += 1
                    elif code == "S":
                        again.append(op.name)
                    elif code != "M":  # removed meanwhile: nothing to rewrite
                        change.not_rewritten.append((op.name, WRITE_CODES[code]))
            pending.clear()

        for name, data in self._naming(calendar):
            op_for(name, data)
            if len(pending) >= WRITE_BATCH:
                flush()
        flush()
        for _ in range(10):  # changed between the read and the write: read them again
            if not again:
                break
            names, again[:] = builtins.list(again), []
            for name, read in self.side.read_present(names).items():
                if isinstance(read, bytes):
                    value = _exportable(name, read)
                    if (isinstance(value, dict) and not value.get("source")
                            and calendar in named_calendars(value)):
                        op_for(name, read)
            flush()
        change.not_rewritten += [(n, "kept changing while being rewritten") for n in again]
        return change

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the due index for this store's shard count (`shards`), after changing it;
        returns the entries indexed. Safe while invocations run (no tick twice); until it
        is done, invocations of the new count miss the entries not yet moved (late, within
        the window, not lost)."""
        return self.side.reindex(progress)

    def resharded(self, shards: int) -> Store:
        """This store as writers with another shard count see it (for `reindex`)."""
        other = copy.copy(self)
        other.side = self.side.resharded(shards)
        return other

    def rescore_unplannable(self) -> int:
        """Rescore "plan me" every due index entry scored beyond any instant kiqbeat plans
        (past the year 9999: +inf, 1e308, written by hand), which no invocation would ever
        plan; returns how many. The next invocation plans each from its watermark."""
        return self.side.rescore_unplannable()

    def import_definitions(
        self, items: Iterable[tuple[str, Mapping[str, Any]]], *, replace: bool = True,
        progress: Callable[[int], None] | None = None,
    ) -> ImportResult:
        """Write many schedules, in atomic calls of `WRITE_BATCH`; invalid ones are listed, not
        written.

        With `replace` False, existing schedules are left as they are (and listed as refused).
        `progress` is called with the number of schedules handled after each write call.
        A Redis error part-way (`maxmemory` reached, ...) stops the import with that error,
        saying how many definitions were written before it and the first one not written:
        each call is atomic, so every schedule is either written whole or left as it was.
        Every change takes the instant of one Redis clock read, made first. The next call's
        definitions are checked while Redis writes the previous call's (`StartedWrite`).
        """
        result = ImportResult()
        now_ms = self._now_ms()
        held: dict[str, builtins.list[str]] | None = None  # the store's calendars, read once
        ops: builtins.list[Op] = []
        started: StartedWrite | None = None

        def finish() -> None:  # the call in flight: its reply read and counted
            nonlocal started
            if started is None:
                return
            call, started = started, None
            try:
                codes = call.finish()
            except KiqbeatError as exc:
                raise type(exc)(_stopped(exc, result, call.ops)) from exc
            for op, (code, owner) in zip(call.ops, codes, strict=True):
                if code == "+":
                    result.written += 1
                elif code == "=":
                    result.unchanged += 1
                else:
                    why = f"belongs to {shown_text(owner)}" if code == "O" else WRITE_CODES[code]
                    result.refused.append((op.name, why))
            if progress is not None:
                progress(len(call.ops))

        def flush() -> None:
            nonlocal started
            for ops_of_call in write_batches(ops):
                finish()
                try:
                    started = self.side.start_write(ops_of_call, now_ms=now_ms)
                except KiqbeatError as exc:
                    raise type(exc)(_stopped(exc, result, ops_of_call)) from exc
            ops.clear()

        try:
            for name, definition in items:
                try:
                    if held is None and isinstance(definition, Mapping) and named_calendars(
                            definition):
                        held = self.calendars_text()
                    ops.append(Op("put" if replace else "add", name,
                                  self.check(name, definition, calendars=held)))
                except ConfigError as exc:
                    result.invalid.append((name, "; ".join(exc.problems)))
                    if progress is not None:
                        progress(1)
                if len(ops) >= WRITE_BATCH:
                    flush()
            flush()
            finish()
        finally:
            if started is not None:  # stopped by an error: the reply is never read
                started.abandon()
        self._audit("import", "", f"{result.written} written, {result.unchanged} unchanged, "
                                  f"{len(result.invalid)} invalid, {len(result.refused)} refused")
        return result

    def _now_ms(self) -> int:
        """The instant of a public call's changes: one Redis clock read, passed to each of
        its writes (epoch ms)."""
        return to_ms(self.side.clock())

    def _one(self, op: Op, now_ms: int) -> str:
        code, owner = self.side.write([op], now_ms=now_ms)[0]
        if code in "+=" or (code == "M" and op.op == "del"):
            return code
        if code == "O":
            raise self._held_by(op, owner)
        if code == "E":
            raise ConfigError(f"schedule {shown(op.name)} exists; update or put it instead")
        raise self.no_schedule([op.name])

    def _forced(self, op: Op, now_ms: int) -> str:
        """`op` (put, update, del) whatever source holds the name: written against the
        definition read just before (write.lua's EXPECT), read again if it changed."""
        for _ in range(10):  # another writer between the read and the write: read again
            data = self.side.read_present([op.name]).get(op.name)
            if isinstance(data, Oversized):
                return self._one(op, now_ms)  # over the limit: not read, belongs to no one
            if data is None:
                if op.op != "put":
                    return self._one(op, now_ms)  # "M": nothing to remove, or no_schedule
                code, _ = self.side.write([op], now_ms=now_ms)[0]
            else:
                forced = replace(op, op="del" if op.op == "del" else "set",
                                 expect=definition_sha(data))
                code, _ = self.side.write([forced], now_ms=now_ms)[0]
            if code in "+=":
                return code
        raise ConfigError(f"schedule {shown(op.name)} kept changing while being forced")

    def _knows_document(self, source: str) -> bool:
        """Whether the store knows a document of this location: it records the digest it
        last applied, or its index (a document being applied has dropped its digest)."""
        return self.side.knows_document(source)

    def _held_by(self, op: Op, owner: str) -> ConfigError:
        """The refusal of `op` on a schedule another source holds."""
        verb = "remove" if op.op == "del" else "change"
        method = "remove" if op.op == "del" else op.op  # the command's and the API's name
        flag = f"`kiqbeat schedules {method} NAME --force-owner` (Store.{method}(..., force=True))"
        if self._knows_document(owner):  # a location kiqbeat itself applied a document from
            return ConfigError(f"schedule {op.name!r} belongs to {owner}; {verb} it there (if "
                               f"that document is no longer applied anywhere: {flag})")
        source = shown(owner, MAX_SHOWN_CHARS)
        return ConfigError(f"schedule {shown(op.name)} names {source} as its source, but the "
                           "store knows no document of that name (none was applied from "
                           f"there: written by hand, or by another tool?); {verb} it with "
                           f"{flag}")

    def _set_enabled(self, name: str, enabled: bool) -> bool:
        now_ms = self._now_ms()
        for _ in range(10):  # another writer between the read and the write: read again
            data = self.side.read_present([name]).get(name)
            if data is None:
                raise self.no_schedule([name])
            if isinstance(data, Oversized):
                raise ConfigError(f"schedule {shown(name)}: {data.why()}")
            current = as_mapping(data)
            if current is None:
                raise ConfigError(f"schedule {shown(name)} has a definition that is not a JSON "
                                  "object; write it again")
            if current.get("enabled", True) is enabled:
                return False
            source = current.pop("source", "")
            new = encode_definition({**current, "enabled": enabled}, str(source))
            code, _ = self.side.write([Op("set", name, new, expect=definition_sha(data))],
                                      now_ms=now_ms)[0]
            if code in "+=":
                return True
            if code == "M":
                raise self.no_schedule([name])
        raise ConfigError(f"schedule {shown(name)} kept changing while being paused or resumed")

    def get(self, name: str) -> ScheduleStatus | None:
        """One schedule's definition and state; None when there is none of that name."""
        now = self.side.clock()
        rows = self._rows([name], now)
        return rows[0] if rows else None

    def rows(self, names: Sequence[str]) -> builtins.list[ScheduleStatus]:
        """The schedules of `names` that exist, in that order (one round trip per BATCH)."""
        return self._rows(names, self.side.clock())

    def list(self, cursor: int = 0, count: int = 100) -> tuple[int, builtins.list[ScheduleStatus]]:
        """One page of schedules in no particular order: (next cursor, 0 at the end; rows).

        Pages come from HSCAN, so a schedule added or removed meanwhile may or may not
        appear; none present throughout is missed.
        """
        cursor, names = self.side.scan_names(cursor, count)
        return cursor, self._rows(names, self.side.clock())

    def export(self, unreadable: builtins.list[tuple[str, str]] | None = None
               ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every stored definition that can be exported (without its source), a page of names
        (never values) then their definitions, per two round trips.

        One that cannot be — its name is not UTF-8, it is not a JSON object, it is over
        MAX_DEFINITION_BYTES — is passed over and added to `unreadable` as (name, why);
        without that list, a StateError naming them is raised once every other definition
        has been given, so that a backup is never silently short.
        """
        passed = [] if unreadable is None else unreadable
        for name, data in self.side.scan_definitions():
            definition = _exportable(name, data)
            if isinstance(definition, str):
                passed.append((name, definition))
                continue
            definition.pop("source", None)
            yield name, definition
        if unreadable is None and passed:
            raise StateError(unexported(passed))


def _stopped(exc: KiqbeatError, result: ImportResult, call: Sequence[Op]) -> str:
    """What an import stopped by a Redis error did, for its message."""
    done = (f"{result.written:,} definition(s) written before it ({result.unchanged:,} "
            "unchanged)")
    if isinstance(exc, RedisRefusedError):  # refused: the call wrote nothing
        return (f"{exc}; the import stopped there: {done}; the first not written is "
                f"{shown(call[0].name)}; each call is atomic, so the store is consistent "
                "(every schedule written whole or left as it was)")
    return (f"{exc}; the import stopped there: {done}; the call writing {shown(call[0].name)} "
            f"and {len(call) - 1:,} more may or may not have been written (each call is "
            "atomic, so the store is consistent); import again to finish")


def unexported(passed: Sequence[tuple[str, str]]) -> str:
    """The message naming the schedules an export passed over (the first 20)."""
    shown_rows = "; ".join(f"{shown(name)}: {why}" for name, why in passed[:20])
    more = f"; and {len(passed) - 20:,} more" if len(passed) > 20 else ""
    return (f"{len(passed):,} schedule(s) could not be exported (every other one was): "
            f"{shown_rows}{more}")


def _exportable(name: str, data: bytes | Oversized | None) -> dict[str, Any] | str:
    """A stored definition as a mapping, or why it cannot be exported."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return ("its name is not UTF-8 (written by another language), which no export "
                "format holds; rename it to export it")
    if data is None:
        return "its definition could not be read"
    if isinstance(data, Oversized):
        return data.why()
    if len(data) > MAX_DEFINITION_BYTES:
        return (f"its definition is {len(data):,} bytes, over the limit of "
                f"{MAX_DEFINITION_BYTES:,}")
    try:
        value = json_text.loads(data)
    except RecursionError:
        return "its definition is JSON nested too deeply to read"
    except ValueError:
        return f"its definition is not JSON: {shown(data)}"
    if not isinstance(value, dict):
        return f"its definition is not a JSON object: {shown(value)}"
    return value


def _readable_calendars(raw: Mapping[str, bytes | str | None]
                        ) -> dict[str, builtins.list[str]]:
    """Stored calendars, each a JSON list of "YYYY-MM-DD" strings; one that is not (written
    by hand) or absent is left out."""
    out: dict[str, builtins.list[str]] = {}
    for name, value in raw.items():
        if value is None:
            continue
        try:
            dates = json.loads(value)
            checked_calendars({name: dates})
        except (ValueError, RecursionError, ConfigError):
            continue
        out[name] = sorted(set(dates))
    return out


def _detail(*, changed: bool, forced: bool) -> str:
    """An audit entry's detail for a write: whether it changed anything, whether forced."""
    return ", ".join(word for word, said in (("unchanged", not changed), ("forced", forced))
                     if said)


