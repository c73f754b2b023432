"""Where stored schedules stand: one row per schedule (`get`, `rows`, `list`) and the store
at a glance (`status`), each read with one Redis clock read per call."""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from kiqbeat.alerts.delivery import Backlog, backlogs
from kiqbeat.alerts.incidents import Incident, open_incidents
from kiqbeat.core.describe import describe_usage, life_facts
from kiqbeat.core.instants import from_ms, to_ms
from kiqbeat.core.lifecycle import has_ended
from kiqbeat.core.limits import MAX_ENDED_LISTED, MAX_REASON_CHARS
from kiqbeat.core.outcomes import Health, health_text
from kiqbeat.core.pause import Pause
from kiqbeat.document.validate import read_definition
from kiqbeat.errors import ConfigError, json_name, shown_name, shown_text
from kiqbeat.outcomes.records import read_health
from kiqbeat.redis import keys, operator_reads
from kiqbeat.redis.connection import reply_reason
from kiqbeat.redis.definitions import Oversized, scan_items, scan_names
from kiqbeat.redis.due import read_ended
from kiqbeat.redis.operator_reads import Counts, Stored
from kiqbeat.redis.pauses import read_pauses
from kiqbeat.store.context import StoreContext, as_mapping

SHOWN_UNPLANNABLE = 5  # names of unplannable index entries `status` shows


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


class Reads:
    """One store's schedules as rows, and its status."""

    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

    def get(self, name: str) -> ScheduleStatus | None:
        """One schedule's definition and state; None when there is none of that name."""
        now = self.ctx.side.clock()
        rows = self._rows([name], now)
        return rows[0] if rows else None

    def rows(self, names: Sequence[str]) -> builtins.list[ScheduleStatus]:
        """The schedules of `names` that exist, in that order (one round trip per BATCH)."""
        return self._rows(names, self.ctx.side.clock())

    def list(self, cursor: int = 0, count: int = 100) -> tuple[int, builtins.list[ScheduleStatus]]:
        """One page of schedules in no particular order: (next cursor, 0 at the end; rows).

        Pages come from HSCAN, so a schedule added or removed meanwhile may or may not
        appear; none present throughout is missed.
        """
        cursor, names = scan_names(self.ctx.client, keys.definitions(self.ctx.namespace), cursor,
                                   count)
        return cursor, self._rows(names, self.ctx.side.clock())

    def status(self, names: Sequence[str] = (), *, shard: tuple[int, int] | None = None,
               offset: int = 0, limit: int = 50) -> Status:
        """Counts, then `names` (or a page of the due index, most overdue first) and a page
        of set-aside definitions; of `shard`, or of every shard. ScheduleNotFoundError
        naming those of `names` the store does not hold."""
        now = self.ctx.side.clock()
        shards = [shard] if shard is not None else self.ctx.side.layout
        client, namespace = self.ctx.client, self.ctx.namespace
        counts = operator_reads.read_counts(client, namespace, shards, to_ms(now))
        if names:
            rows = self._rows(names, now)
            unknown = sorted(set(names) - {r.name for r in rows})
            if unknown:
                raise self.ctx.no_schedule(unknown)
        else:
            rows = self._rows(operator_reads.read_order(client, namespace, shards, offset, limit),
                              now)
        aside = []
        if counts.set_aside:
            for name, why in scan_items(client, keys.rejected(namespace)):
                aside.append((name, reply_reason(why)))
                if len(aside) >= limit:
                    break
        unplannable = (operator_reads.read_unplannable(client, namespace, shards,
                                                       SHOWN_UNPLANNABLE)
                       if counts.unplannable else [])
        ended_count, ended = read_ended(client, namespace, shards, MAX_ENDED_LISTED)
        return Status(now, counts, rows, aside, unplannable, ended_count, ended,
                      open_incidents(client, namespace, limit),
                      backlogs(client, namespace, to_ms(now)))

    def _rows(self, names: Sequence[str], now: datetime) -> builtins.list[ScheduleStatus]:
        client, namespace = self.ctx.client, self.ctx.namespace
        stored_rows = operator_reads.read_stored(client, namespace, names, self.ctx.side.lua)
        pauses = read_pauses(client, namespace, names) if stored_rows else {}
        rows = [row for stored in stored_rows
                if (row := self._row(stored, now)) is not None]
        health = read_health(client, namespace, [r.name for r in rows]) if rows else {}
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
            schedule = read_definition(stored.name, stored.definition,
                                       window_s=self.ctx.window_s, checks=self.ctx.checks)
        except ConfigError as exc:
            why = stored.rejected or "; ".join(exc.problems)
            return ScheduleStatus(stored.name, raw, source, False, "", "", mark, seen, None,
                                  0.0, why)
        window_start = now - timedelta(seconds=self.ctx.window_s)
        after = max(mark, window_start) if mark else now
        nxt = schedule.timetable.next_after(after)
        ended = has_ended(schedule, after, stored.runs)
        return ScheduleStatus(stored.name, raw, source, schedule.enabled,
                              schedule.timetable.zone_name, schedule.timing, mark, seen, nxt,
                              0.0 if ended else max(0.0, (now - nxt).total_seconds()),
                              stored.rejected, ended=ended,
                              life=life_facts(schedule, stored.runs, stored.skips))
