"""The store's calendars (`except: [holidays]`): read, set and removed; setting one rewrites
every definition of the API that names it, with its dates written in."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from kiqbeat.core.limits import MAX_CALENDARS
from kiqbeat.document.fields import calendars as checked_calendars
from kiqbeat.document.lifecycle import named_calendars, with_calendars
from kiqbeat.errors import ConfigError, shown
from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors, reply_text
from kiqbeat.redis.definitions import WRITE_BATCH, WRITE_CODES, Op, definition_sha, write_batches
from kiqbeat.store.context import StoreContext, exportable

# Schedules a refused calendar removal names (it says how many there are in all).
MAX_CALENDAR_USERS_SHOWN = 10

# A definition's stored form, checked as `Store.check` checks it, with these calendars.
Check = Callable[..., bytes]


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


def calendars_text(ctx: StoreContext) -> dict[str, list[str]]:
    """The store's calendars as stored: name -> its dates, "YYYY-MM-DD", ascending (an
    entry another writer left unreadable is left out)."""
    with redis_errors(ctx.client, "reading the store's calendars"):
        raw = ctx.client.hgetall(keys.calendars(ctx.namespace))
    return _readable({reply_text(k): v for k, v in raw.items()})


def read_calendars(ctx: StoreContext, names: Sequence[str]) -> dict[str, list[str]]:
    """Those of the store's calendars `names` names (one round trip)."""
    with redis_errors(ctx.client, "reading the store's calendars"):
        values = ctx.client.hmget(keys.calendars(ctx.namespace), list(names))
    return _readable(dict(zip(names, values, strict=True)))


class Calendars:
    """The store's calendars; `check` is the store's definition check (`Store.check`)."""

    def __init__(self, ctx: StoreContext, check: Check) -> None:
        self.ctx, self.check = ctx, check

    def calendars(self) -> dict[str, tuple[date, ...]]:
        """The store's calendars: name -> its dates, ascending (one round trip)."""
        return {name: tuple(date.fromisoformat(d) for d in dates)
                for name, dates in calendars_text(self.ctx).items()}

    def calendar(self, name: str) -> tuple[date, ...] | None:
        """One store calendar's dates, or None when the store holds none of that name."""
        held = read_calendars(self.ctx, [name])
        return tuple(date.fromisoformat(d) for d in held[name]) if name in held else None

    def put_calendar(self, name: str, dates: Sequence[str | date]) -> CalendarChange:
        """Set the store calendar `name` to `dates` ("YYYY-MM-DD" or dates, in each
        schedule's zone), checked as a document's `calendars:` are, then rewrite every
        definition of the API (no document's: documents use their own calendars only)
        whose `except` names it with its dates written in, a WRITE_BATCH at a time through
        the write script, each against the definition it read (one changed meanwhile is
        read again). A definition the new dates make invalid (over MAX_EXCLUDED_DATES) is
        left as it was and listed. Setting it again with the same dates rewrites only
        those still differing: an interrupted change is finished by running it again."""
        ctx = self.ctx
        if isinstance(dates, str) or not isinstance(dates, Sequence):
            raise ConfigError(f"calendar {shown(name)}: {shown(dates)} must be a list of "
                              "dates (YYYY-MM-DD)")
        given = [d.isoformat() if isinstance(d, date) else d for d in dates]
        ((label, checked),) = checked_calendars({name: given}).items()
        text = sorted({d.isoformat() for d in checked})
        held = calendars_text(ctx)
        if label not in held and len(held) >= MAX_CALENDARS:
            raise ConfigError(f"calendar {shown(label)}: the store holds {len(held):,} "
                              f"calendars, the most it may ({MAX_CALENDARS:,}); remove one "
                              "first")
        with redis_errors(ctx.client, "writing a calendar"):
            ctx.client.hset(keys.calendars(ctx.namespace), label,
                            json.dumps(text, separators=(",", ":")))
        held[label] = text
        change = self._rewrite_naming(label, held)
        ctx.audit("calendar set", label,
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
        with redis_errors(self.ctx.client, "removing a calendar"):
            removed = bool(self.ctx.client.hdel(keys.calendars(self.ctx.namespace), name))
        if removed:
            self.ctx.audit("calendar remove", name)
        return removed

    def _naming(self, calendar: str, names: Sequence[str] | None = None
                ) -> Iterator[tuple[str, bytes]]:
        """The API's stored definitions (no document's) whose `except` names `calendar`,
        with their bytes: of every name (a page per two round trips), or of `names`."""
        side = self.ctx.side
        stored = side.scan_definitions() if names is None else side.read_present(names).items()
        for name, data in stored:
            value = exportable(name, data)
            if (isinstance(value, dict) and not value.get("source")
                    and calendar in named_calendars(value) and isinstance(data, bytes)):
                yield name, data

    def _rewrite_naming(self, calendar: str,
                        held: Mapping[str, Sequence[str]]) -> CalendarChange:
        change = CalendarChange(calendar, len(held[calendar]))
        side, now_ms = self.ctx.side, self.ctx.now_ms()
        pending: list[Op] = []
        again: list[str] = []

        def op_for(name: str, data: bytes) -> None:
            value = exportable(name, data)
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
                for op, (code, _) in zip(call, side.write(call, now_ms=now_ms), strict=True):
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
            names, again[:] = list(again), []
            for name, read in self._naming(calendar, names):
                op_for(name, read)
            flush()
        change.not_rewritten += [(n, "kept changing while being rewritten") for n in again]
        return change


def _readable(raw: Mapping[str, bytes | str | None]) -> dict[str, list[str]]:
    """Stored calendars, each a JSON list of "YYYY-MM-DD" strings; one that is not (written
    by hand) or absent is left out."""
    out: dict[str, list[str]] = {}
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
