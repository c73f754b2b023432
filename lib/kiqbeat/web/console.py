"""What the console's pages and its JSON API read, in one place, over `kiqbeat.store.Store`;
what they ask of a schedule, run by the CLI's and the Lambda's one dispatch.

Both front ends call these methods and only render the results, so a page and an API call
answer alike: the same rows, the same validation messages (`Store.check`, as `kiqbeat
validate` gives them), the same refusals. A request on a schedule (get, report, put, remove,
pause, resume, skip, trigger, backfill) is read by the request model of the CLI and the
Lambda and run by their dispatch (`execute`: kiqbeat.entrypoints.outcomes.run), which makes
every change through the Store, recorded in the audit trail for the actor the front end
names (its token's name).

Cost per call is bounded whatever the store holds: a page reads at most `limit` rows and
examines at most `MAX_EXAMINED_PER_PAGE` names (limits.py), through the name index the write
script keeps (redis/names.py): a list, filtered or not, reads the definitions of the rows it
returns and no other. The overview reads counts (the index's counters and the pause
records), one page of the due index and the newest pushes of the last history walk
(recent.py).
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kiqbeat.audit import AuditEntry, read_audit
from kiqbeat.core.limits import (
    MAX_DEFINITION_BYTES,
    MAX_EXAMINED_PER_PAGE,
    MAX_PAGE_ROWS,
)
from kiqbeat.core.records import Push
from kiqbeat.core.schedule import Config, Schedule
from kiqbeat.core.ticks import TickReport
from kiqbeat.document.read import parse
from kiqbeat.document.validate import read_definition
from kiqbeat.engine import Engine
from kiqbeat.entrypoints import preview
from kiqbeat.entrypoints.outcomes import Outcome, run
from kiqbeat.entrypoints.requests import Request
from kiqbeat.errors import ConfigError, OwnedByDocumentError, RedisRefusedError, json_name, shown
from kiqbeat.redis import keys, progress, scripts
from kiqbeat.redis.clock import read_clock
from kiqbeat.redis.connection import name_bytes, redis_errors, reply_text
from kiqbeat.redis.definitions import scan_items
from kiqbeat.redis.names import NameIndex, build, fold, index_names
from kiqbeat.store import MissedRange, ScheduleStatus, Status, Store
from kiqbeat.web.recent import Recent, RecentPush, paused_now

STATES = ("active", "paused", "set_aside", "missed", "failing")
FILTERS = ("prefix", "state", "queue", "source")  # a page's filters (`Console.page`)
FAILING_SHOWN = 10  # failing schedules the overview lists first
FIRES = 20  # fire times a schedule's page previews
RECENT_SPAN = timedelta(days=1)  # the span of a schedule page's strip of recent ticks
STRIP_TICKS = 60  # the strip's cells at most (the newest ticks of the span)
EXAMINE_BATCH = 250  # names a filtered page reads per round trip (HMGET of their facets)
# Pause records the overview reads to count the paused (beyond: the count is not shown).
PAUSES_COUNTED = 10_000
# A backfill asked for by a page or an API call stops pushing after this long (a request
# must answer); its answer then says so, and running it again pushes the rest.
BACKFILL_DEADLINE_S = 20.0


@dataclass(frozen=True)
class Row:
    """One schedule as the lists show it."""

    status: ScheduleStatus
    reading: str  # its timing in words
    queue: str
    last_push: Push | None
    has_missed: bool
    # The parsed definition of a plannable schedule (None: set aside, oversized, unparsable).
    schedule: Schedule | None = field(default=None, compare=False, repr=False)

    @property
    def state(self) -> str:
        """active, paused, ended or set_aside."""
        if self.status.next_tick is None:
            return "set_aside"
        if not self.status.enabled:
            return "paused"
        return "ended" if self.status.ended else "active"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form: the Store's, and what the console adds."""
        return self.status.as_dict() | {
            "state": self.state, "reading": self.reading, "queue": self.queue,
            "has_missed": self.has_missed,
            "last_push": self.last_push.as_dict() if self.last_push else None}


@dataclass(frozen=True)
class Page:
    """A page of schedules and the cursor of the next (None: the end)."""

    rows: list[Row]
    next_cursor: str | None
    examined: int


@dataclass(frozen=True)
class Detail:
    """One schedule's page."""

    row: Row
    fires: list[dict[str, str | None]]
    history: list[Push]
    missed: list[MissedRange]
    audit: list[AuditEntry]
    ticks: TickReport | None = None  # its recent ticks, classified (None: set aside)


@dataclass(frozen=True)
class Overview:
    """The store at a glance."""

    status: Status
    # Paused schedules: by the name index's counter and the pause records holding now
    # (None: more pause records than the overview reads, PAUSES_COUNTED).
    paused: int | None
    recent: list[RecentPush]  # newest first, from the last finished walk of the histories
    document: tuple[str, int, bool] | None  # (source, schedules, applied)
    indexed: int
    # Schedules whose newest failure no success has followed (kiqbeat:outcomes:errors):
    # how many, and the first few with their health.
    failing_count: int = 0
    failing: list[Row] = field(default_factory=list)

    @property
    def active(self) -> int | None:
        """Schedules neither set aside nor paused (None: the paused are not counted)."""
        counts = self.status.counts
        return None if self.paused is None else (
            counts.schedules - counts.set_aside - self.paused)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (GET /api/v1/status); the page shows the same fields."""
        counts = self.status.counts
        return {
            "now": self.status.now.isoformat(),
            "counts": {"schedules": counts.schedules, "due_now": counts.overdue,
                       "set_aside": counts.set_aside, "with_missed": counts.with_missed,
                       "paused": self.paused, "active": self.active,
                       "counted_at": self.status.now.isoformat()},
            "most_overdue": [r.as_dict() for r in self.status.schedules],
            "set_aside": [{**json_name(n), "why": w} for n, w in self.status.set_aside],
            "recent_pushes": [{**json_name(p.name), "kind": p.kind, "tick": p.tick.isoformat(),
                               "when": p.when.isoformat()} for p in self.recent],
            "document": None if self.document is None else {
                "source": self.document[0], "schedules": self.document[1],
                "applied": self.document[2]},
            "names_indexed": self.indexed,
            "failing": {"count": self.failing_count,
                        "schedules": [r.as_dict() for r in self.failing]},
            "incidents": [i.as_dict() for i in self.status.incidents],
            "alert_backlog": [b.as_dict() for b in self.status.alert_backlog],
        }


# A set-aside or missed page's cursor: "HSCAN-CURSOR:SKIP" (Redis's cursor is a 64-bit
# unsigned number; SKIP is under a page of HSCAN's own).
_HSCAN_AT = re.compile(r"[0-9]{1,20}:[0-9]{1,9}")


def encode_cursor(kind: str, value: str) -> str:
    """An opaque page cursor."""
    raw = value.encode(errors="surrogateescape")
    return kind + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    """(kind, value) of a cursor; ConfigError when it is not one of ours."""
    kind, body = cursor[:1], cursor[1:]
    try:
        value = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode(
            errors="surrogateescape")
    except ValueError:
        raise ConfigError(f"cursor {shown(cursor)} is not one this console gave") from None
    if kind not in "ns" or not kind or (kind == "s" and not _HSCAN_AT.fullmatch(value)):
        raise ConfigError(f"cursor {shown(cursor)} is not one this console gave")
    return kind, value


def definition_of(text: str, name: str) -> dict[str, Any]:
    """A definition typed into a form (YAML or JSON, a document's schedule form) as a
    mapping; ConfigError naming the problem. Read as documents are (alias bombs refused)."""
    if len(text.encode()) > MAX_DEFINITION_BYTES:
        raise ConfigError(f"schedule {shown(name)}: the definition is over "
                          f"{MAX_DEFINITION_BYTES:,} bytes")
    value, _ = parse(text, source=f"the definition of {shown(name)}")
    if not isinstance(value, dict):
        raise ConfigError(f"schedule {shown(name)}: a definition is a mapping of fields "
                          f"(cron, class, ...), got {shown(value)}")
    return value


class Console:
    """The console's reads and actions over one deployment's store."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()  # the engine's config cache is not shared-safe
        base = self.store()
        self.client, self.namespace = base.client, base.namespace
        self.index = NameIndex(self.client, self.namespace)
        self.lua = scripts.Caller(functions=engine.settings.redis_functions)
        self.recent = Recent(self.client, self.namespace)
        self.backfilled = 0  # ticks this process's backfills pushed (a metric)

    def build_index(self) -> None:
        """Build the name index once on a store written before it, or index the names plain
        writers marked (all of them, on a store indexed before the buckets) (redis/names.py;
        the console's start, in its background thread): idempotent, beside any writer."""
        if not self.index.built():
            build(self.client, self.namespace, self.lua)
            return
        # A user that may not write leaves marked names listed as marked.
        with contextlib.suppress(RedisRefusedError):
            fold(self.client, self.namespace, self.lua)

    def store(self, actor: str | None = None, note: str = "") -> Store:
        """The deployment's store, acting for `actor` with `note`."""
        with self._lock:
            store = self.engine.store()
        return store.acting(actor, note)

    # ------------------------------------------------------------------------ reading

    def page(self, *, prefix: str = "", state: str = "", queue: str = "", source: str = "",
             cursor: str = "", limit: int = 50) -> Page:
        """A page of schedules whose names start with `prefix`, filtered; `source` is "api"
        for the API's own or a document's location."""
        if state and state not in STATES:
            raise ConfigError(f"state {shown(state)} is not one of {', '.join(STATES)}")
        limit = max(1, min(limit, MAX_PAGE_ROWS))
        kind, value = decode_cursor(cursor) if cursor else ("", "")
        store = self.store()
        if state in ("set_aside", "missed", "failing"):
            hscan, skip = (value.split(":", 1) if kind == "s" and ":" in value else ("0", "0"))
            names, after = self._scan_hash(state, prefix, int(hscan), int(skip), limit)
            names = self._matching(names, "", queue, source)
            return Page(self._rows(store, names), encode_cursor("s", after) if after
                        else None, len(names))
        if prefix and not cursor:
            self._index_if_stored(prefix)
        after_name: str | None = value if kind == "n" else None
        matched: list[str] = []
        examined, at_end = 0, False
        filtered = bool(state or queue or source)
        while len(matched) < limit and examined < MAX_EXAMINED_PER_PAGE:
            want = min(EXAMINE_BATCH, MAX_EXAMINED_PER_PAGE - examined) if filtered else (
                limit - len(matched))
            batch = self.index.page(prefix, after_name, want)
            if not batch:
                at_end = True
                break
            ok = set(self._matching(batch, state, queue, source))
            for name in batch:
                examined += 1
                after_name = name
                if name in ok:
                    matched.append(name)
                    if len(matched) == limit:
                        break
            if len(batch) < want and after_name == batch[-1]:
                at_end = True
                break
        more = not at_end and after_name is not None
        rows = self._rows(store, matched)
        if len(rows) < len(matched):  # removed by a writer that left the index (plain Redis)
            listed = {r.status.name for r in rows}
            index_names(self.client, self.namespace, [n for n in matched if n not in listed],
                        mode="gone", lua=self.lua)
        return Page(rows,
                    encode_cursor("n", after_name) if more and after_name is not None else None,
                    examined)

    def _index_if_stored(self, name: str) -> None:
        """A name written by a previous release's writer, without the name index, is found by
        its exact name at once (HEXISTS: no definition read unless it is stored and not
        indexed yet; then index.lua reads it, length-checked, for its facets)."""
        if self.index.facets([name]):
            return
        with redis_errors(self.client, "reading a definition's presence"):
            exists = self.client.hexists(keys.definitions(self.namespace), name)
        if exists:
            index_names(self.client, self.namespace, [name], lua=self.lua)

    def _scan_hash(self, state: str, prefix: str, cursor: int, skip: int, limit: int
                   ) -> tuple[list[str], str]:
        """Up to `limit` names of the set-aside or missed hash, from HSCAN `cursor` less the
        first `skip` of its page (sorted): a page longer than `limit` (a small hash comes
        back whole) is handed out in parts, its next cursor "CURSOR:SKIP"; "" at the end."""
        key = {"set_aside": keys.rejected, "missed": keys.missed,
               "failing": keys.outcomes_errors}[state](self.namespace)
        pattern = "".join(f"\\{c}" if c in "*?[]\\" else c for c in prefix) + "*"
        with redis_errors(self.client, f"reading {key}"):
            following, page = self.client.hscan(key, cursor, match=pattern, count=limit)
        names = sorted(reply_text(n) for n in page)[skip:]
        if len(names) > limit:
            return names[:limit], f"{cursor}:{skip + limit}"
        return names, f"{int(following)}:0" if int(following) else ""

    def _matching(self, names: list[str], state: str, queue: str, source: str) -> list[str]:
        """The names among `names` whose definitions exist and pass the filters, by their
        facets in the name index (no definition read); a name indexed without facets (a
        plain Redis writer's) is indexed with them first, and one whose definition is gone
        leaves the index (index.lua)."""
        if not names:
            return []
        facets = self.index.facets(names)
        unknown = [n for n in names if n not in facets]
        if unknown:
            index_names(self.client, self.namespace, unknown, lua=self.lua)
            facets |= self.index.facets(unknown)
        if not (state or queue or source):
            return [n for n in names if n in facets]
        with redis_errors(self.client, "reading set-aside reasons"):
            rejected = self.client.hmget(keys.rejected(self.namespace),
                                         [name_bytes(n) for n in names])
        held = paused_now(self.client, self.namespace,
                          [n for n in names if n in facets]) if state else set()
        out = []
        for name, why in zip(names, rejected, strict=True):
            if name not in facets:
                continue
            found = facets[name]
            if found is None:  # over the limit (unread) or garbled: set aside, fields unknown
                continue
            paused = name in held or not found.enabled
            if state == "active" and (why is not None or paused):
                continue
            if state == "paused" and (why is not None or not paused):
                continue
            if queue and found.queue != queue:
                continue
            if source and (found.source or "api") != source:
                continue
            out.append(name)
        return out

    def _rows(self, store: Store, names: list[str]) -> list[Row]:
        """The rows of `names` (absent ones left out), through the Store's length-checked
        reads: a definition over MAX_DEFINITION_BYTES is never read, its row set aside."""
        return self._rows_of(store, store.rows(names))

    def _rows_of(self, store: Store, statuses: list[ScheduleStatus]) -> list[Row]:
        """The rows of the Store's `statuses`, with their last pushes and missed marks, and a
        plannable schedule's parsed definition and timing in words."""
        if not statuses:
            return []
        listed = [s.name for s in statuses]
        with redis_errors(self.client, "reading histories"):
            missed = self.client.hmget(keys.missed(self.namespace), listed)
        histories = progress.read_histories(self.client, self.namespace, listed, 1)
        rows = []
        for status, record in zip(statuses, missed, strict=True):
            history = histories.get(status.name)
            reading, queue, schedule = "", "default", None
            if status.definition is not None:
                queue = str(status.definition.get("queue", "default"))
                if status.next_tick is not None:
                    data = json.dumps(status.definition).encode()
                    try:
                        schedule = read_definition(status.name, data, window_s=store.window_s)
                        reading = preview.reading(schedule.timetable)
                    except ConfigError:
                        reading = ""
            rows.append(Row(status, reading, queue, history[0] if isinstance(history, list)
                            else None, record is not None, schedule))
        return rows

    def get(self, name: str) -> Row:
        """One schedule's row; ScheduleNotFoundError when there is none."""
        store = self.store()
        rows = self._rows(store, [name])
        if not rows:
            raise store.no_schedule([name])
        return rows[0]

    def detail(self, status: ScheduleStatus) -> Detail:
        """One schedule's page from its row as a "get" request read it (the definition read
        once, length-checked, parsed once): next fire times, history, missed ranges, audit
        and the strip of its recent ticks (a "report" request of the last RECENT_SPAN)."""
        store = self.store()
        name = status.name
        row = self._rows_of(store, [status])[0]
        fires: list[dict[str, str | None]] = []
        ticks = None
        if row.schedule is not None:
            now = read_clock(self.client)
            fires = preview.next_fires(Config((row.schedule,)), now, FIRES)[0]
            ticks = run(Request("report", name=name, since=now - RECENT_SPAN, until=now),
                        store).value
        return Detail(row, fires, store.history(name), store.missed([name]),
                      read_audit(self.client, self.namespace, name, limit=20), ticks)

    def overview(self) -> Overview:
        """Counts by state, the most overdue, set-aside definitions, recent pushes, the
        document's state."""
        store = self.store()
        status = store.status(limit=10)
        document = None
        if self.engine.settings.config_source:
            with self._lock:
                applied = self.engine.document_applied()
            if applied is not None:
                document = (applied[0].source, len(applied[0].definitions), applied[1])
        errors = keys.outcomes_errors(self.namespace)
        with redis_errors(self.client, f"reading {errors}"):
            count = int(self.client.hlen(errors))
        names, _ = self._scan_hash("failing", "", 0, 0, FAILING_SHOWN)  # the failing page's
        failing = sorted(self._rows(store, names), key=lambda r: -(
            r.status.health.consecutive_failures if r.status.health else 0))
        return Overview(status, self._paused(), self.recent.last or [], document,
                        self.index.size(), count, failing)

    def _paused(self) -> int | None:
        """Paused schedules: definitions with `enabled: false` (the index's counter) and
        enabled ones a pause record holds now; None beyond PAUSES_COUNTED pause records."""
        key = keys.paused(self.namespace)
        with redis_errors(self.client, f"reading {key}"):
            if int(self.client.hlen(key)) > PAUSES_COUNTED:
                return None
        records = [name for name, _ in scan_items(self.client, key)]
        held = sorted(paused_now(self.client, self.namespace, records))
        facets = self.index.facets(held)
        enabled_held = 0
        for name in held:
            if name in facets:  # indexed: stored (None: unread, so not counted disabled)
                found = facets[name]
                enabled_held += found is None or found.enabled
        return self.index.disabled() + enabled_held

    def audit(self, name: str | None = None, limit: int = 100) -> list[AuditEntry]:
        """The newest audit entries (of `name` when given)."""
        return read_audit(self.client, self.namespace, name, limit=max(1, min(limit, 1000)))

    # ------------------------------------------------------------------------ acting

    def execute(self, actor: str, request: Request) -> Outcome:
        """Run one request on a schedule for `actor` by the one dispatch of the CLI and the
        Lambda (`kiqbeat.entrypoints.outcomes.run`): `request` read and checked by their
        request model (`kiqbeat.entrypoints.requests`), its kind alone deciding which Store
        calls run; the outcome is the front end's to render. The refusals are the Store's
        own, typed, from the same atomic step as the change (nothing is read first to choose
        a refusal), but for a schedule another source holds, refused in the console's words
        (the API's 409): a document's schedules are read-only here. A remove that removed
        nothing is refused as no such schedule (the CLI's "nothing removed"; the API's 404).
        A backfill stops pushing after BACKFILL_DEADLINE_S."""
        store = self.store(actor, request.note)
        try:
            outcome = run(request, store, deadline=time.monotonic() + BACKFILL_DEADLINE_S)
        except OwnedByDocumentError as exc:
            raise OwnedByDocumentError(
                f"schedule {shown(request.name)} belongs to the document "
                f"{shown(exc.owner, 200)}: change it there (it is read-only here)",
                owner=exc.owner) from exc
        if request.kind == "remove" and not outcome.value:
            raise store.no_schedule([request.name])
        if outcome.backfill is not None:
            self.backfilled += outcome.backfill.pushed
        return outcome
