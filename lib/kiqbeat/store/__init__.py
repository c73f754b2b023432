"""The schedule store's Python API (DESIGN §7): schedules written at runtime, one or in
bulk, and the operator's commands on them.

    from kiqbeat.store import Store
    store = Store(redis.Redis.from_url(url))
    store.put("digest:42", {"cron": "0 9 * * *", "tz": "Asia/Kolkata",
                            "class": "DigestWorker", "args": [42]})
    store.pause("digest:42", note="INC-42: the mailer is down",
                until=datetime(2026, 3, 2, 9, tzinfo=UTC))
    store.resume("digest:42"); store.remove("digest:42")
    store.put_calendar("holidays", ["2026-12-25", "2027-01-01"])  # `except: [holidays]`
    store.missed(); store.backfill(["digest:42"], latest_only=True); store.trigger("digest:42")

A definition is a mapping in a document's schedule form, checked as a document's schedule
is, with the same messages, before anything is written; the next invocation plans it. The
promises of DESIGN §2 hold through every change (docs/api.md, "The Python API"). Schedules
written here belong to the API, a document's to the document: each may pause and resume
the other's, not change or remove them, but with `force=True` (`--force-owner`).

Refusals are typed, each a ConfigError with the message it always had, so that each front
end maps them once (HTTP status, CLI exit code, a Lambda event's errorType):
ScheduleNotFoundError, ScheduleExistsError, OwnedByDocumentError (kiqbeat.errors).

`Store` is composed of parts, one role each, over one `StoreContext` (the Redis side,
window, history, actor and note): `schedules`, `calendar_book`, `bulk`, `reads` (rows,
status), `operations` (missed, trigger, history, report) and `backfills`. Every change is
recorded in the audit trail for the store's `actor`, with its `note`
(`store.acting("alice", note="INC-42").pause(name)`); each public call reads the Redis
clock at most once and passes that instant down.
"""

from __future__ import annotations

import builtins
import copy
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime
from typing import Any, Self

import redis

from kiqbeat.audit import default_actor
from kiqbeat.core.limits import DEFAULT_HISTORY
from kiqbeat.core.pause import Pause
from kiqbeat.core.records import Push
from kiqbeat.core.ticks import TickReport
from kiqbeat.errors import ScheduleNotFoundError
from kiqbeat.redis import names as name_index
from kiqbeat.redis import scripts
from kiqbeat.redis.side import RedisSide
from kiqbeat.store.backfill import OVERLAP_HELD, Backfills
from kiqbeat.store.bulk import Bulk, ImportResult, unexported
from kiqbeat.store.calendars import CalendarChange, Calendars, calendars_text
from kiqbeat.store.context import StoreContext
from kiqbeat.store.operations import Operations
from kiqbeat.store.results import MAX_LISTED, Backfill, MissedRange, Triggered
from kiqbeat.store.schedules import Schedules
from kiqbeat.store.status import Reads, ScheduleStatus, Status

__all__ = ["MAX_LISTED", "OVERLAP_HELD", "Backfill", "CalendarChange", "ImportResult",
           "MissedRange", "ScheduleStatus", "Status", "Store", "Triggered", "unexported"]


class Store:
    """The schedules in one Redis under one key prefix, read, written and operated on.

    `shards`: the count the deployment's invocations run with; by default the one recorded
    in Redis (1 before any). A write with another count is refused. `history`: pushes kept
    per schedule by backfills and manual runs (invocations keep their own setting's)."""

    def __init__(self, client: redis.Redis, *, namespace: str = "", shards: int | None = None,
                 window_s: float = 3600.0, history: int = DEFAULT_HISTORY,
                 lua: scripts.Caller = scripts.SCRIPTS, actor: str | None = None) -> None:
        side = (RedisSide.recorded(client, namespace, lua) if shards is None
                else RedisSide(client, namespace, shards, lua))
        self._compose(StoreContext(side, window_s, history, actor or default_actor()))

    def _compose(self, ctx: StoreContext) -> None:
        """Build the parts over `ctx` (again, for a copy acting for someone else)."""
        self.ctx = ctx
        self.schedules = Schedules(ctx)
        self.calendar_book = Calendars(ctx, self.schedules.check)
        self.bulk = Bulk(ctx, self.schedules.check)
        self.reads = Reads(ctx)
        self.operations = Operations(ctx)
        self.backfills = Backfills(ctx)

    def _with(self, ctx: StoreContext) -> Self:
        other = copy.copy(self)
        other._compose(ctx)
        return other

    # ------------------------------------------------------------------------ the context

    @property
    def side(self) -> RedisSide:
        """The Redis side: client, key prefix, shard count, scripts."""
        return self.ctx.side

    @property
    def client(self) -> redis.Redis:
        """The Redis client."""
        return self.ctx.client

    @property
    def namespace(self) -> str:
        """The key prefix."""
        return self.ctx.namespace

    @property
    def shards(self) -> int:
        """The shard count its writes and status use."""
        return self.ctx.side.shards

    @property
    def window_s(self) -> float:
        """The window a definition is checked and a row's lag is read with."""
        return self.ctx.window_s

    @property
    def keep_history(self) -> int:
        """Pushes kept per schedule by backfills and manual runs."""
        return self.ctx.keep_history

    @property
    def actor(self) -> str:
        """Who its changes are recorded for in the audit trail."""
        return self.ctx.actor

    @property
    def note(self) -> str:
        """The note its changes are recorded with."""
        return self.ctx.note

    def acting(self, actor: str | None = None, note: str = "") -> Self:
        """This store, its changes recorded in the audit trail for `actor` with `note`."""
        return self._with(StoreContext(self.ctx.side, self.window_s, self.keep_history,
                                       actor or self.actor, note))

    def resharded(self, shards: int) -> Self:
        """This store as writers with another shard count see it (for `reindex`)."""
        return self._with(StoreContext(self.ctx.side.resharded(shards), self.window_s,
                                       self.keep_history, self.actor, self.note))

    def no_schedule(self, names: Iterable[str]) -> ScheduleNotFoundError:
        """The refusal of `names` the store does not hold (it names the hash looked in)."""
        return self.ctx.no_schedule(names)

    # ------------------------------------------------------------------------ schedules

    def check(self, name: str, definition: Mapping[str, Any], *,
              calendars: Mapping[str, Sequence[str]] | None = None) -> bytes:
        """The stored form of a definition, or ConfigError (`Schedules.check`)."""
        return self.schedules.check(name, definition, calendars=calendars)

    def add(self, name: str, definition: Mapping[str, Any]) -> None:
        """Add a schedule; ScheduleExistsError when one of that name exists."""
        self.schedules.add(name, definition)

    def put(self, name: str, definition: Mapping[str, Any], *, force: bool = False) -> bool:
        """Add or replace a schedule; False when stored so already (`Schedules.put`)."""
        return self.schedules.put(name, definition, force=force)

    def update(self, name: str, definition: Mapping[str, Any], *,
               force: bool = False) -> bool:
        """Replace a schedule; ScheduleNotFoundError when missing (`Schedules.update`)."""
        return self.schedules.update(name, definition, force=force)

    def remove(self, name: str, *, force: bool = False) -> bool:
        """Remove a schedule and its state; False when there was none (`Schedules.remove`)."""
        return self.schedules.remove(name, force=force)

    def owner(self, name: str) -> tuple[str, bool] | None:
        """(source, known as a document) of a stored schedule; None when there is none."""
        return self.schedules.owner(name)

    def pause(self, name: str, *, note: str = "", until: datetime | None = None) -> bool:
        """Push nothing for it until resumed or `until`; False when paused already."""
        return self.schedules.pause(name, note=note, until=until)

    def skip(self, name: str, count: int = 1) -> int:
        """Skip its next `count` ticks; the skips now pending (`Schedules.skip`)."""
        return self.schedules.skip(name, count)

    def resume(self, name: str) -> bool:
        """Push its ticks again from the next one on; False if it was not paused."""
        return self.schedules.resume(name)

    def pauses(self, names: Sequence[str]) -> dict[str, Pause]:
        """The pause records of those of `names` that have one (one round trip)."""
        return self.schedules.pauses(names)

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the due index for this store's shard count, after changing it; returns
        the entries indexed. Safe while invocations run (no tick twice); until it is done,
        invocations of the new count miss the entries not yet moved (late, within the
        window, not lost). Then builds the console's name index (`redis.names.build`: a
        store written before it, or by plain Redis commands), idempotently."""
        moved = self.ctx.side.reindex(progress)
        side = self.ctx.side
        name_index.build(side.client, side.namespace, side.lua)
        return moved

    def rescore_unplannable(self) -> int:
        """Rescore "plan me" every due index entry scored beyond any instant kiqbeat plans
        (past the year 9999); returns how many. The next invocation plans each."""
        return self.ctx.side.rescore_unplannable()

    # ------------------------------------------------------------------------ calendars

    def calendars(self) -> dict[str, tuple[date, ...]]:
        """The store's calendars: name -> its dates, ascending (one round trip)."""
        return self.calendar_book.calendars()

    def calendar(self, name: str) -> tuple[date, ...] | None:
        """One store calendar's dates, or None when the store holds none of that name."""
        return self.calendar_book.calendar(name)

    def calendars_text(self) -> dict[str, builtins.list[str]]:
        """The store's calendars as stored: name -> "YYYY-MM-DD" dates, ascending."""
        return calendars_text(self.ctx)

    def put_calendar(self, name: str, dates: Sequence[str | date]) -> CalendarChange:
        """Set a store calendar and rewrite the API's definitions naming it."""
        return self.calendar_book.put_calendar(name, dates)

    def remove_calendar(self, name: str) -> bool:
        """Remove a store calendar no definition names; False when there was none."""
        return self.calendar_book.remove_calendar(name)

    # ------------------------------------------------------------------------ in bulk

    def import_definitions(
        self, items: Iterable[tuple[str, Mapping[str, Any]]], *, replace: bool = True,
        progress: Callable[[int], None] | None = None,
    ) -> ImportResult:
        """Write many schedules in atomic calls (`Bulk.import_definitions`)."""
        return self.bulk.import_definitions(items, replace=replace, progress=progress)

    def export(self, unreadable: builtins.list[tuple[str, str]] | None = None
               ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every stored definition that can be exported, without its source (`Bulk.export`)."""
        return self.bulk.export(unreadable)

    # ------------------------------------------------------------------------ reading

    def get(self, name: str) -> ScheduleStatus | None:
        """One schedule's definition and state; None when there is none of that name."""
        return self.reads.get(name)

    def rows(self, names: Sequence[str]) -> builtins.list[ScheduleStatus]:
        """The schedules of `names` that exist, in that order."""
        return self.reads.rows(names)

    def list(self, cursor: int = 0, count: int = 100) -> tuple[int, builtins.list[ScheduleStatus]]:
        """One page of schedules in no particular order: (next cursor, 0 at the end; rows)."""
        return self.reads.list(cursor, count)

    def status(self, names: Sequence[str] = (), *, shard: tuple[int, int] | None = None,
               offset: int = 0, limit: int = 50) -> Status:
        """Counts, rows and set-aside definitions (`Reads.status`); ScheduleNotFoundError
        naming those of `names` the store does not hold."""
        return self.reads.status(names, shard=shard, offset=offset, limit=limit)

    # ------------------------------------------------------------------------ operating

    def missed(self, names: Sequence[str] = (),
               garbled: builtins.list[tuple[str, str]] | None = None
               ) -> builtins.list[MissedRange]:
        """The recorded missed ticks of `names` (default: every schedule), as ranges."""
        return self.operations.missed(names, garbled)

    def backfill(self, names: Sequence[str] = (), *, since: datetime | None = None,
                 until: datetime | None = None, latest_only: bool = False,
                 dry_run: bool = False, progress: Callable[[int], None] | None = None,
                 deadline: float | None = None, stop: Callable[[], bool] | None = None,
                 max_jobs: int | None = None, confirm_above: int | None = None,
                 pre_history: bool = True, reasons: Collection[str] = (),
                 must_exist: bool = False) -> Backfill:
        """Push the recorded missed ticks of `names` (default: every schedule with some),
        each at most once; the options and their promises: `Backfills.backfill`."""
        return self.backfills.backfill(
            names, since=since, until=until, latest_only=latest_only, dry_run=dry_run,
            progress=progress, deadline=deadline, stop=stop, max_jobs=max_jobs,
            confirm_above=confirm_above, pre_history=pre_history, reasons=reasons,
            must_exist=must_exist)

    def trigger(self, name: str, args: builtins.list[Any] | None = None) -> Triggered:
        """Push one job of schedule `name` now ("run now"), with `args` if given."""
        return self.operations.trigger(name, args)

    def history(self, name: str) -> builtins.list[Push]:
        """Schedule `name`'s last pushes, newest first."""
        return self.operations.history(name)

    def report(self, name: str, *, since: datetime | None = None,
               until: datetime | None = None) -> TickReport:
        """Every nominal tick of `name` in (since, until] with its one outcome."""
        return self.operations.report(name, since=since, until=until)

