"""What the console's pages and its JSON API do, in one place, over `kiqbeat.store.Store`.

Both front ends call these methods and only format the results, so a page and an API call
answer alike: the same rows, the same validation messages (`Store.check`, as `kiqbeat
validate` gives them), the same refusals. Every change goes through the Store, which
records it in the audit trail for the actor the front end names (its token's name).

Cost per call is bounded whatever the store holds: a page reads at most `limit` rows and
examines at most `MAX_EXAMINED_PER_PAGE` names (limits.py), through the name index the write
script keeps (redis/names.py): a list, filtered or not, reads the definitions of the rows it
returns and no other. The overview reads counts (the index's counters and the pause
records), one page of the due index and the newest pushes of the last history walk
(recent.py).
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kiqbeat.audit import AuditEntry, read_audit
from kiqbeat.core import json_text
from kiqbeat.core.limits import (
    BACKFILL_CONFIRM_JOBS,
    MAX_AUDIT_NOTE_CHARS,
    MAX_DEFINITION_BYTES,
    MAX_EXAMINED_PER_PAGE,
    MAX_PAGE_ROWS,
)
from kiqbeat.core.records import Push, parse_history
from kiqbeat.core.schedule import Config, Schedule
from kiqbeat.core.ticks import TickReport
from kiqbeat.document.read import parse
from kiqbeat.document.validate import read_definition
from kiqbeat.engine import Engine
from kiqbeat.entrypoints import preview
from kiqbeat.entrypoints.requests import Request, from_fields
from kiqbeat.errors import ConfigError, OwnedByDocumentError, json_name, shown
from kiqbeat.redis import keys, progress, scripts
from kiqbeat.redis.clock import read_clock
from kiqbeat.redis.connection import redis_errors, reply_text
from kiqbeat.redis.definitions import scan_items
from kiqbeat.redis.names import NameIndex, build, index_names
from kiqbeat.store import Backfill, MissedRange, ScheduleStatus, Status, Store, Triggered
from kiqbeat.web.recent import Recent, Tally, paused_now

STATES = ("active", "paused", "set_aside", "missed", "failing")
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


def pause_until(value: Any) -> datetime | None:
    """A pause's end from a JSON body or a form ("until"; None or "" for none), checked as
    the CLI's --until and the Lambda's event are."""
    if value is None or value == "":
        return None
    return from_fields("pause", {"until": value}).until


def read_only(name: str, refused: OwnedByDocumentError) -> OwnedByDocumentError:
    """The console's words for a change of a schedule another source holds (the API's 409):
    a document's schedules are read-only here."""
    return OwnedByDocumentError(f"schedule {shown(name)} belongs to the document "
                                f"{shown(refused.owner, 200)}: change it there (it is "
                                "read-only here)", owner=refused.owner)


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
    tally: Tally | None  # paused counted now, recent pushes of the last history walk
    document: tuple[str, int, bool] | None  # (source, schedules, applied)
    indexed: int
    # Schedules whose newest failure no success has followed (kiqbeat:outcomes:errors):
    # how many, and the first few with their health.
    failing_count: int = 0
    failing: list[Row] = field(default_factory=list)

    @property
    def paused(self) -> int | None:
        """Paused schedules (None: more pause records than the overview reads)."""
        return self.tally.paused if self.tally else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (GET /api/v1/status)."""
        counts = self.status.counts
        tally = self.tally
        return {
            "now": self.status.now.isoformat(),
            "counts": {"schedules": counts.schedules, "due_now": counts.overdue,
                       "set_aside": counts.set_aside, "with_missed": counts.with_missed,
                       "paused": self.paused,
                       "active": (counts.schedules - counts.set_aside - tally.paused)
                       if tally and tally.paused is not None else None,
                       "counted_at": tally.finished_at.isoformat()
                       if tally and tally.finished_at else None},
            "most_overdue": [r.as_dict() for r in self.status.schedules],
            "set_aside": [{**json_name(n), "why": w} for n, w in self.status.set_aside],
            "recent_pushes": [{**json_name(p.name), "kind": p.kind, "tick": p.tick.isoformat(),
                               "when": p.when.isoformat()} for p in (tally.recent if tally
                                                                     else [])],
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


def json_object(data: bytes | object) -> dict[str, Any] | None:
    """A stored definition's JSON object, or None when it is not one (garbled, not an
    object, or an Oversized placeholder: a definition over the limit is never read)."""
    if not isinstance(data, bytes | str):
        return None
    try:
        raw = json_text.loads(data)
    except (ValueError, RecursionError):
        return None
    return raw if isinstance(raw, dict) else None


def checked_note(note: object) -> str:
    """A note for the audit trail as a page or the API gave it; ConfigError (422) when it is
    not text or is over MAX_AUDIT_NOTE_CHARS, as the CLI and the Lambda refuse it (a note is
    never cut)."""
    if not isinstance(note, str) or len(note) > MAX_AUDIT_NOTE_CHARS:
        raise ConfigError(f"note: expected text of at most {MAX_AUDIT_NOTE_CHARS:,} "
                          f"characters, not {shown(note)}")
    return note.strip()


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
        """Build the name index once on a store written before it (redis/names.py; the
        console's first start, in its background thread): idempotent, beside any writer."""
        if not self.index.built():
            build(self.client, self.namespace, self.lua)

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
        with redis_errors(self.client, "reading the name index"):
            indexed = self.client.zscore(keys.names(self.namespace),
                                         name.encode(errors="surrogateescape"))
        if indexed is not None:
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
                                         [n.encode(errors="surrogateescape") for n in names])
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
        statuses = store.rows(names)
        if not statuses:
            return []
        listed = [s.name for s in statuses]
        with redis_errors(self.client, "reading histories"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hmget(keys.missed(self.namespace), listed)
            (missed,) = pipe.execute()
        histories = progress.read_histories(self.client, self.namespace, listed)
        rows = []
        for status, record in zip(statuses, missed, strict=True):
            rows.append(self._row(store, status, histories.get(status.name), record is not None))
        return rows

    def _row(self, store: Store, status: ScheduleStatus, history: Any, has_missed: bool) -> Row:
        last = None
        if history is not None:
            try:
                pushes = parse_history(status.name, reply_text(history).split("\n", 1)[0])
                last = pushes[0] if pushes else None
            except ValueError:
                last = None
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
        return Row(status, reading, queue, last, has_missed, schedule)

    def get(self, name: str) -> Row:
        """One schedule's row; ScheduleNotFoundError when there is none."""
        store = self.store()
        rows = self._rows(store, [name])
        if not rows:
            raise store.no_schedule([name])
        return rows[0]

    def detail(self, name: str) -> Detail:
        """One schedule's page: its row, next fire times, history, missed ranges, audit."""
        store = self.store()
        row = self.get(name)  # the definition read once, length-checked, parsed once
        fires: list[dict[str, str | None]] = []
        if row.schedule is not None:
            fires = preview.next_fires(Config((row.schedule,)), read_clock(self.client), FIRES)[0]
        ticks = None
        if row.schedule is not None:
            now = read_clock(self.client)
            ticks = store.report(name, since=now - RECENT_SPAN, until=now)
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
            _, found = self.client.hscan(errors, 0, count=FAILING_SHOWN)
        names = sorted(reply_text(n) for n in found)[:FAILING_SHOWN]
        failing = sorted(self._rows(store, names), key=lambda r: -(
            r.status.health.consecutive_failures if r.status.health else 0))
        tally = Tally(self._paused(), self.recent.last or [], status.now)
        return Overview(status, tally, document, self.index.size(), count, failing)

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

    # ------------------------------------------------------------------------ one dispatch

    def execute(self, actor: str, request: Request) -> Any:
        """Run one schedule request for `actor`: `request` is read and checked by the request
        model the CLI and the Lambda use (`kiqbeat.entrypoints.requests`), and its kind alone
        decides what runs (get, report, put, remove, pause, resume, skip, trigger, backfill);
        the result is the front end's to render."""
        run = _EXECUTE.get(request.kind)
        if run is None:
            raise ConfigError(f"{request.kind!r} is not a request the console runs")
        return run(self, actor, request)

    # ------------------------------------------------------------------------ acting

    # The refusals come from the Store's own writes (typed: ScheduleNotFoundError,
    # OwnedByDocumentError), in the same atomic step as the change: nothing is read first
    # to choose an answer, so no change made between a read and the write is missed.

    def put(self, actor: str, name: str, definition: Mapping[str, Any], note: str = ""
            ) -> bool:
        """Create or replace an API-owned schedule; True when it was created (one read
        first, for that answer only). ConfigError with the validation messages (before any
        other refusal); OwnedByDocumentError for another source's."""
        store = self.store(actor, note)
        existed = store.owner(name) is not None
        try:
            store.put(name, definition)  # checked first: its messages, whoever owns it
        except OwnedByDocumentError as exc:
            raise read_only(name, exc) from exc
        return not existed

    def remove(self, actor: str, name: str, note: str = "") -> None:
        """Delete an API-owned schedule; ScheduleNotFoundError when there is none,
        OwnedByDocumentError for another source's."""
        store = self.store(actor, note)
        try:
            removed = store.remove(name)
        except OwnedByDocumentError as exc:
            raise read_only(name, exc) from exc
        if not removed:
            raise store.no_schedule([name])

    def pause(self, actor: str, name: str, note: str = "", *,
              until: datetime | None = None) -> bool:
        """Pause a schedule (a document's too), with `note` as its pause's note and, with
        `until`, resuming by itself after it; False when it was paused."""
        return self.store(actor, note).pause(name, note=note, until=until)

    def skip(self, actor: str, name: str, count: int = 1, note: str = "") -> int:
        """Skip a schedule's next `count` ticks; the skips now pending."""
        return self.store(actor, note).skip(name, count)

    def resume(self, actor: str, name: str, note: str = "") -> bool:
        """Resume a schedule; False when it was running."""
        return self.store(actor, note).resume(name)

    def trigger(self, actor: str, name: str, args: list[Any] | None = None, note: str = ""
                ) -> Triggered:
        """Push one job of the schedule now, with `args` instead of its own if given."""
        return self.store(actor, note).trigger(name, args)

    def backfill(self, actor: str, request: Request) -> Backfill:
        """Push (or, dry, count) the named schedule's recorded missed ticks in [since, until]
        (`request`: checked by `kiqbeat.entrypoints.requests.from_fields`, as the CLI's and
        the Lambda's are). The operator's bounds hold as on the command line: without `yes`
        or `max_jobs` a backfill of more than BACKFILL_CONFIRM_JOBS jobs is refused
        (ConfigError) and pushes nothing, and so, without `yes`, is one of any tick from
        before its schedule was first seen; `max_jobs` pushes at most that many, the oldest
        first (run it again for the next). ScheduleNotFoundError, before anything is pushed,
        for a name with neither a definition nor a record."""
        store = self.store(actor, request.note)
        result = store.backfill(list(request.names), since=request.since, until=request.until,
                                latest_only=request.latest_only, dry_run=request.dry_run,
                                max_jobs=request.max_jobs,
                                confirm_above=None if request.yes or request.max_jobs
                                else BACKFILL_CONFIRM_JOBS,
                                pre_history=request.yes, reasons=request.reasons,
                                deadline=time.monotonic() + BACKFILL_DEADLINE_S,
                                must_exist=True)
        self.backfilled += result.pushed
        return result



# What each request kind runs on the console (`Console.execute`): the one dispatch.
_EXECUTE: dict[str, Callable[[Console, str, Request], Any]] = {
    "get": lambda c, _, r: c.detail(r.name),
    "report": lambda c, _, r: c.store().report(r.name, since=r.since, until=r.until),
    "put": lambda c, a, r: c.put(a, r.name, r.definition, r.note),
    "remove": lambda c, a, r: c.remove(a, r.name, r.note),
    "pause": lambda c, a, r: c.pause(a, r.name, r.note, until=r.until),
    "resume": lambda c, a, r: c.resume(a, r.name, r.note),
    "skip": lambda c, a, r: c.skip(a, r.name, r.count, r.note),
    "trigger": lambda c, a, r: c.trigger(a, r.name, r.args, r.note),
    "backfill": lambda c, a, r: c.backfill(a, r),
}
