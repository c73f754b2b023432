"""Schedules written at runtime (DESIGN §7): checked, added, replaced, removed, paused,
skipped and resumed, one at a time, each through the write script in one atomic step.

Refusals are typed (kiqbeat.errors), each a ConfigError with the message it always had:
ScheduleNotFoundError (no schedule of that name), ScheduleExistsError (`add` of a name
held), OwnedByDocumentError (another source holds it; `force` writes over it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from kiqbeat.core.instants import to_ms
from kiqbeat.core.limits import MAX_PENDING_SKIPS, MAX_SHOWN_CHARS
from kiqbeat.core.pause import Pause, pause_of, until_iso
from kiqbeat.document.lifecycle import named_calendars, with_calendars
from kiqbeat.document.validate import check_size, encode_definition, read_definition
from kiqbeat.errors import (
    ConfigError,
    OwnedByDocumentError,
    ScheduleExistsError,
    did_you_mean,
    shown,
)
from kiqbeat.redis.definitions import Op, Oversized, definition_sha
from kiqbeat.redis.documents import knows_document
from kiqbeat.redis.pauses import read_pauses
from kiqbeat.store.calendars import calendars_text, read_calendars
from kiqbeat.store.context import StoreContext, as_mapping


class Schedules:
    """One store's schedules, changed one at a time."""

    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

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
        fields = self._calendars_written_in(name, definition, calendars)
        data = encode_definition(fields)
        check_size(name, data)
        # Read as an invocation will read it (what it refuses, refused with its messages).
        read_definition(name, data, window_s=self.ctx.window_s, checks=self.ctx.checks,
                        fields=fields)
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
            held = read_calendars(self.ctx, names)
        own = definition.get("calendars")
        own_names = list(own) if isinstance(own, Mapping) else []
        unknown = [n for n in names if n not in held and n not in own_names]
        if unknown:
            store_names = sorted(calendars_text(self.ctx))
            known = [*store_names, *own_names]
            raise ConfigError([
                f"schedule {shown(name)} (field 'except'): no calendar {shown(n)}"
                f"{did_you_mean(n, known)} (the store's calendars: "
                f"{', '.join(store_names) or 'none'}; the definition's: "
                f"{', '.join(map(str, own_names)) or 'none'}; define one with `kiqbeat "
                "schedules calendar set NAME DATE...`)" for n in unknown])
        return with_calendars(definition, held)

    def add(self, name: str, definition: Mapping[str, Any]) -> None:
        """Add a schedule; ScheduleExistsError when one of that name exists."""
        self._one(Op("add", name, self.check(name, definition)), self.ctx.now_ms())
        self.ctx.audit("add", name)

    def put(self, name: str, definition: Mapping[str, Any], *, force: bool = False) -> bool:
        """Add or replace a schedule; False when it was stored exactly so already. `force`:
        replace it whatever source it names (it then belongs to the API); without it,
        OwnedByDocumentError when another source holds it."""
        op, now_ms = Op("put", name, self.check(name, definition)), self.ctx.now_ms()
        changed = (self._forced(op, now_ms) if force else self._one(op, now_ms)) == "+"
        self.ctx.audit("put", name, _detail(changed=changed, forced=force))
        return changed

    def update(self, name: str, definition: Mapping[str, Any], *,
               force: bool = False) -> bool:
        """Replace a schedule; ScheduleNotFoundError when there is none of that name.
        `force`: as `put`'s."""
        op, now_ms = Op("update", name, self.check(name, definition)), self.ctx.now_ms()
        changed = (self._forced(op, now_ms) if force else self._one(op, now_ms)) == "+"
        self.ctx.audit("update", name, _detail(changed=changed, forced=force))
        return changed

    def remove(self, name: str, *, force: bool = False) -> bool:
        """Remove a schedule and forget its state; False when there was none. `force`:
        whatever source it names.

        Without `force`, a schedule another source holds is refused (OwnedByDocumentError):
        one of a document the store knows ("change it there"), or one naming a source no
        document is known by (then the message gives the flag). Forcing over a known
        document is allowed (a document no longer applied anywhere keeps its entry), but
        that document still lists the name, and writes it again when its definition there
        changes (`owner` tells which case it is, for a warning)."""
        op, now_ms = Op("del", name), self.ctx.now_ms()
        code = self._forced(op, now_ms) if force else self._one(op, now_ms)
        if code == "+":
            self.ctx.audit("remove", name, _detail(changed=True, forced=force))
        return code == "+"

    def owner(self, name: str) -> tuple[str, bool] | None:
        """The source a stored schedule names ("" for the API and other languages) and
        whether the store knows it as a document (it applied one from there, or is
        applying one); None when there is no schedule of that name. One round trip, two
        for a document's."""
        data = self.ctx.side.read_present([name]).get(name)
        if data is None:
            return None
        if isinstance(data, Oversized):
            return "", False  # over the limit: not read, and any writer may replace it
        source = (as_mapping(data) or {}).get("source", "")
        source = source if isinstance(source, str) else ""
        return source, bool(source) and knows_document(self.ctx.client, self.ctx.namespace, source)

    def pause(self, name: str, *, note: str = "", until: datetime | None = None) -> bool:
        """Push nothing for it until resumed, or until `until` (an aware instant, after the
        Redis clock): its ticks at or before `until` (every tick, without one) are passed
        over, never recorded as missed nor backfilled; after `until` it runs again by itself.
        `note` (at most MAX_PAUSE_NOTE_CHARS) says why; the record also keeps who (the
        store's `actor`) and when, for `status`, `get` and the console (core/pause.py).

        The pause is a record of its own (`kiqbeat:paused`), never written into the
        definition, so a document that changes the schedule leaves it paused. Pausing a
        paused schedule replaces its note and end. False when it was paused already (by a
        pause in force, or by `enabled: false` in its definition); ScheduleNotFoundError
        when there is no schedule of that name."""
        side = self.ctx.side
        now_ms = to_ms(side.clock())
        record = pause_of(note, self.ctx.actor, now_ms, until)
        exists, previous = side.write_pause(name, record, now_ms=now_ms)
        if not exists:
            raise self.ctx.no_schedule([name])
        was = previous is not None and previous.holds_at(now_ms)
        if not was:
            data = side.read_present([name]).get(name)
            current = as_mapping(data) if isinstance(data, bytes) else None
            was = current is not None and current.get("enabled", True) is False
        detail = "; ".join(part for part in (
            "paused already: note and end replaced" if was else "",
            "" if record.until_ms is None else f"until {until_iso(record)}",
            f"note: {note}" if note else "") if part)
        self.ctx.audit("pause", name, detail)
        return not was

    def skip(self, name: str, count: int = 1) -> int:
        """Skip the schedule's next `count` ticks: the push step takes one pending skip per
        tick instead of pushing it (before overlap and the run limit, docs/store.md; not
        counted as a run), records it in the history as "skipped", and never as
        missed. Returns the skips now pending. ConfigError for a count outside 1..
        MAX_PENDING_SKIPS, pending skips beyond it, or a pending count stored that is no
        whole number (written by hand: kept); ScheduleNotFoundError for no schedule of
        that name."""
        if isinstance(count, bool) or not isinstance(count, int) or not (
                1 <= count <= MAX_PENDING_SKIPS):
            raise ConfigError(f"skip count {shown(count)} must be a whole number from 1 to "
                              f"{MAX_PENDING_SKIPS:,} (to stop it for longer, pause it)")
        added = self.ctx.side.add_skips(name, count)
        if added is None:
            raise self.ctx.no_schedule([name])
        done, pending = added
        if not done:  # the skips the script found pending, in the same atomic step
            raise ConfigError(f"schedule {shown(name)} has {pending:,} "
                              f"skips pending; {count:,} more would pass "
                              f"{MAX_PENDING_SKIPS:,} (to stop it for longer, pause it)")
        self.ctx.audit("skip", name, f"{count} tick(s) to skip, {pending} pending")
        return pending

    def resume(self, name: str) -> bool:
        """Push its ticks again, from the next one on; False if it was not paused;
        ScheduleNotFoundError when there is no schedule of that name.

        It deletes the pause record, and ends a pause written into the definition as
        `enabled: false` (by kiqbeat before pause records, by the sidekiq-scheduler tab's
        toggle, or by a document) by writing `enabled: true` there, as resume always did.
        Nothing from the paused span is pushed."""
        now_ms = to_ms(self.ctx.side.clock())
        _, previous = self.ctx.side.write_pause(name, None, now_ms=now_ms)
        legacy = self._set_enabled(name, True)
        changed = legacy or (previous is not None and previous.holds_at(now_ms))
        self.ctx.audit("resume", name, "" if changed else "running already")
        return changed

    def pauses(self, names: Sequence[str]) -> dict[str, Pause]:
        """The pause records of those of `names` that have one (in force or ended: see
        `Pause.holds_at`); one round trip."""
        return read_pauses(self.ctx.client, self.ctx.namespace, names)

    def _one(self, op: Op, now_ms: int) -> str:
        """`op` written; its code ("+", "=", or "M" for a removal of nothing), else its
        refusal raised, typed."""
        code, owner = self.ctx.side.write([op], now_ms=now_ms)[0]
        if code in "+=" or (code == "M" and op.op == "del"):
            return code
        if code == "O":
            raise self._held_by(op, owner)
        if code == "E":
            raise ScheduleExistsError(f"schedule {shown(op.name)} exists; update or put it "
                                      "instead")
        raise self.ctx.no_schedule([op.name])

    def _forced(self, op: Op, now_ms: int) -> str:
        """`op` (put, update, del) whatever source holds the name: written against the
        definition read just before (write.lua's EXPECT), read again if it changed."""
        side = self.ctx.side
        for _ in range(10):  # another writer between the read and the write: read again
            data = side.read_present([op.name]).get(op.name)
            if isinstance(data, Oversized):
                return self._one(op, now_ms)  # over the limit: not read, belongs to no one
            if data is None:
                if op.op != "put":
                    return self._one(op, now_ms)  # "M": nothing to remove, or no_schedule
                code, _ = side.write([op], now_ms=now_ms)[0]
            else:
                forced = replace(op, op="del" if op.op == "del" else "set",
                                 expect=definition_sha(data))
                code, _ = side.write([forced], now_ms=now_ms)[0]
            if code in "+=":
                return code
        raise ConfigError(f"schedule {shown(op.name)} kept changing while being forced")

    def _held_by(self, op: Op, owner: str) -> OwnedByDocumentError:
        """The refusal of `op` on a schedule another source holds."""
        verb = "remove" if op.op == "del" else "change"
        method = "remove" if op.op == "del" else op.op  # the command's and the API's name
        flag = f"`kiqbeat schedules {method} NAME --force-owner` (Store.{method}(..., force=True))"
        client, namespace = self.ctx.client, self.ctx.namespace
        if knows_document(client, namespace, owner):  # a location kiqbeat itself applied from
            return OwnedByDocumentError(
                f"schedule {op.name!r} belongs to {owner}; {verb} it there (if that "
                f"document is no longer applied anywhere: {flag})", owner=owner)
        source = shown(owner, MAX_SHOWN_CHARS)
        return OwnedByDocumentError(
            f"schedule {shown(op.name)} names {source} as its source, but the store knows no "
            "document of that name (none was applied from there: written by hand, or by "
            f"another tool?); {verb} it with {flag}", owner=owner)

    def _set_enabled(self, name: str, enabled: bool) -> bool:
        side, now_ms = self.ctx.side, self.ctx.now_ms()
        for _ in range(10):  # another writer between the read and the write: read again
            data = side.read_present([name]).get(name)
            if data is None:
                raise self.ctx.no_schedule([name])
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
            code, _ = side.write([Op("set", name, new, expect=definition_sha(data))],
                                 now_ms=now_ms)[0]
            if code in "+=":
                return True
            if code == "M":
                raise self.ctx.no_schedule([name])
        raise ConfigError(f"schedule {shown(name)} kept changing while being paused or resumed")


def _detail(*, changed: bool, forced: bool) -> str:
    """An audit entry's detail for a write: whether it changed anything, whether forced."""
    return ", ".join(word for word, said in (("unchanged", not changed), ("forced", forced))
                     if said)
