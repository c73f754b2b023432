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
status), `operations` (missed, trigger, history, report) and `backfills`. Its methods are
the parts' own, signature and docstring (`_delegated`). Every change is
recorded in the audit trail for the store's `actor`, with its `note`
(`store.acting("alice", note="INC-42").pause(name)`); each public call reads the Redis
clock at most once and passes that instant down.
"""

from __future__ import annotations

import builtins
import copy
import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

import redis

from kiqbeat.audit import default_actor
from kiqbeat.core.limits import DEFAULT_HISTORY
from kiqbeat.redis import due, scripts
from kiqbeat.redis import names as name_index
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


P = ParamSpec("P")
R = TypeVar("R")


def _delegated(part: str, method: Callable[Concatenate[Any, P], R]
               ) -> Callable[Concatenate[Store, P], R]:
    """A method of one of the store's parts, as a method of the store (`store.put` calls
    `store.schedules.put`), with the part's name, signature and docstring (`__wrapped__`:
    `help()`, `inspect.signature` and `mock.create_autospec` see them), which state its
    promise: the store only strings its parts together."""
    name = method.__name__

    @functools.wraps(method)
    def delegate(store: Store, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound: Callable[P, R] = getattr(getattr(store, part), name)
        return bound(*args, **kwargs)

    delegate.__qualname__ = f"Store.{name}"
    return delegate


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

    no_schedule = _delegated("ctx", StoreContext.no_schedule)

    # ------------------------------------------------------------------------ schedules

    check = _delegated("schedules", Schedules.check)
    add = _delegated("schedules", Schedules.add)
    put = _delegated("schedules", Schedules.put)
    update = _delegated("schedules", Schedules.update)
    remove = _delegated("schedules", Schedules.remove)
    owner = _delegated("schedules", Schedules.owner)
    pause = _delegated("schedules", Schedules.pause)
    skip = _delegated("schedules", Schedules.skip)
    resume = _delegated("schedules", Schedules.resume)
    pauses = _delegated("schedules", Schedules.pauses)

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the due index for this store's shard count, after changing it; returns
        the entries indexed. Safe while invocations run (no tick twice); until it is done,
        invocations of the new count miss the entries not yet moved (late, within the
        window, not lost). Then builds the console's name index (`redis.names.build`: a
        store written before it, or by plain Redis commands), idempotently."""
        side = self.ctx.side
        moved = due.reindex(side.client, side.namespace, side.shards, progress)
        name_index.build(side.client, side.namespace, side.lua)
        return moved

    def rescore_unplannable(self) -> int:
        """Rescore "plan me" every due index entry scored beyond any instant kiqbeat plans
        (past the year 9999); returns how many. The next invocation plans each."""
        side = self.ctx.side
        return due.rescore_unplannable(side.client, side.namespace, side.shards)

    # ------------------------------------------------------------------------ calendars

    calendars = _delegated("calendar_book", Calendars.calendars)
    calendar = _delegated("calendar_book", Calendars.calendar)
    put_calendar = _delegated("calendar_book", Calendars.put_calendar)
    remove_calendar = _delegated("calendar_book", Calendars.remove_calendar)

    def calendars_text(self) -> dict[str, builtins.list[str]]:
        """The store's calendars as stored: name -> "YYYY-MM-DD" dates, ascending."""
        return calendars_text(self.ctx)

    # ------------------------------------------------------------------------ in bulk

    import_definitions = _delegated("bulk", Bulk.import_definitions)
    export = _delegated("bulk", Bulk.export)

    # ------------------------------------------------------------------------ reading

    get = _delegated("reads", Reads.get)
    rows = _delegated("reads", Reads.rows)
    list = _delegated("reads", Reads.list)
    status = _delegated("reads", Reads.status)

    # ------------------------------------------------------------------------ operating

    missed = _delegated("operations", Operations.missed)
    backfill = _delegated("backfills", Backfills.backfill)
    trigger = _delegated("operations", Operations.trigger)
    history = _delegated("operations", Operations.history)
    report = _delegated("operations", Operations.report)
