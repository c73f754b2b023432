"""Schedules in bulk: an import written in atomic calls of WRITE_BATCH (the next call's
definitions checked while Redis writes the previous), and an export of every definition."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kiqbeat.core.collector import collector_paused
from kiqbeat.document.lifecycle import named_calendars
from kiqbeat.errors import (
    ConfigError,
    KiqbeatError,
    RedisRefusedError,
    StateError,
    shown,
    shown_text,
)
from kiqbeat.redis.definitions import WRITE_BATCH, WRITE_CODES, Op, StartedWrite, write_batches
from kiqbeat.store.calendars import Check, calendars_text
from kiqbeat.store.context import StoreContext, exportable


@dataclass
class ImportResult:
    """What a bulk import did."""

    written: int = 0
    unchanged: int = 0
    invalid: list[tuple[str, str]] = field(default_factory=list)  # (name, why): not written
    refused: list[tuple[str, str]] = field(default_factory=list)  # (name, why): not written


class Bulk:
    """Imports and exports of one store; `check` is the store's definition check."""

    def __init__(self, ctx: StoreContext, check: Check) -> None:
        self.ctx, self.check = ctx, check

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
        now_ms = self.ctx.now_ms()
        held: dict[str, list[str]] | None = None  # the store's calendars, read once
        ops: list[Op] = []
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
                    started = self.ctx.side.start_write(ops_of_call, now_ms=now_ms)
                except KiqbeatError as exc:
                    raise type(exc)(_stopped(exc, result, ops_of_call)) from exc
            ops.clear()

        with collector_paused():  # an import makes no cycles (core/collector.py)
            try:
                for name, definition in items:
                    try:
                        if held is None and isinstance(definition, Mapping) and named_calendars(
                                definition):
                            held = calendars_text(self.ctx)
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
        self.ctx.audit("import", "", f"{result.written} written, {result.unchanged} unchanged, "
                                  f"{len(result.invalid)} invalid, {len(result.refused)} refused")
        return result

    def export(self, unreadable: list[tuple[str, str]] | None = None
               ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every stored definition that can be exported (without its source), a page of names
        (never values) then their definitions, per two round trips.

        One that cannot be — its name is not UTF-8, it is not a JSON object, it is over
        MAX_DEFINITION_BYTES — is passed over and added to `unreadable` as (name, why);
        without that list, a StateError naming them is raised once every other definition
        has been given, so that a backup is never silently short.
        """
        passed = [] if unreadable is None else unreadable
        for name, data in self.ctx.side.scan_definitions():
            definition = exportable(name, data)
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
