"""What an operator's request does, whichever front end read it: the one dispatch of the
CLI, the Lambda and the console's HTTP API and pages. `run` runs a checked `Request`
(kiqbeat.entrypoints.requests) on a Store by its kind (`BY_KIND`: one table of what each
kind does on the Store) and says what it did as an `Outcome`: the Store's typed result
(`value`, which the console renders as HTTP statuses, bodies and flashes), its JSON form (the
Lambda's result, the CLI's --json), lines for a person, warnings, problems and the CLI's exit
code. `execute` adds the requests on a whole deployment (status, reindex) and builds the
store from an engine. The CLI prints the outcome; the handler returns it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kiqbeat.core.describe import describe_usage
from kiqbeat.core.limits import (
    BACKFILL_CONFIRM_JOBS,
    MAX_DEFINITION_BYTES,
    MAX_REASON_CHARS,
    MAX_SHOWN_CHARS,
)
from kiqbeat.engine import Engine
from kiqbeat.entrypoints.requests import Request
from kiqbeat.errors import (
    ConfigError,
    foreign_json,
    json_name,
    shown,
    shown_name,
    shown_text,
)
from kiqbeat.store import Backfill, ScheduleStatus, Store

# Exit codes: stopped before the end (deadline, --max-jobs) — run it again for the rest.
STOPPED_EARLY = 3


@dataclass
class Outcome:
    """What a request did: the Store's typed result (`value`: a ScheduleStatus, a
    TickReport, a Backfill, a Triggered, whether it changed anything, the skips pending...),
    its JSON form (the Lambda's result, the CLI's --json), its lines for a person, warnings,
    problems for stderr or a warning, and the CLI's exit code."""

    result: dict[str, Any]
    lines: list[str]
    problems: list[str] = field(default_factory=list)
    code: int = 0
    value: Any = None
    warnings: list[str] = field(default_factory=list)

    @property
    def backfill(self) -> Backfill | None:
        """A backfill's result (None for any other request)."""
        return self.value if isinstance(self.value, Backfill) else None


def execute(request: Request, engine: Engine, *, deadline: float,
            stop: Callable[[], bool] | None = None,
            progress: Callable[[int], None] | None = None) -> Outcome:
    """Run a request on the engine's store, acting for the request's actor. A backfill
    stops between calls at `deadline` (time.monotonic()) or once `stop()` is true, and says
    what it pushed."""
    if request.kind == "reindex":
        return _reindex(request, engine)
    store = engine.store().acting(request.actor or None, request.note)
    if request.kind == "status":
        return _status(request, engine, store)
    return run(request, store, deadline=deadline, stop=stop, progress=progress)


def run(request: Request, store: Store, *, deadline: float | None = None,
        stop: Callable[[], bool] | None = None,
        progress: Callable[[int], None] | None = None) -> Outcome:
    """Run a request on a schedule, or on the named schedules, on `store` (acting for whom
    the front end says): the same Store calls whichever front end asked. A backfill stops
    as `execute` says; one naming a schedule with neither a definition nor a recorded
    missed range is refused before anything is pushed (ScheduleNotFoundError)."""
    if request.kind == "backfill":
        unbounded = not (request.yes or request.max_jobs)
        done = store.backfill(request.names, since=request.since, until=request.until,
                              latest_only=request.latest_only, dry_run=request.dry_run,
                              progress=progress, deadline=deadline, stop=stop,
                              max_jobs=request.max_jobs,
                              confirm_above=BACKFILL_CONFIRM_JOBS if unbounded else None,
                              pre_history=request.yes, reasons=request.reasons,
                              must_exist=True)
        return _backfilled(request, done)
    return BY_KIND[request.kind](request, store)


# --------------------------------------------------------------------------- operations

def _missed(request: Request, store: Store) -> Outcome:
    garbled: list[tuple[str, str]] = []
    ranges = store.missed(request.names, garbled)
    listed = {r.name for r in ranges} | {name for name, _ in garbled}
    unlisted = [n for n in request.names if n not in listed]
    stored = {row.name for row in store.rows(unlisted)} if unlisted else set()  # one read
    unknown = [n for n in unlisted if n not in stored]
    if unknown:
        raise store.no_schedule(unknown)
    lines = [r.line() for r in ranges]
    if ranges:
        ticks = sum(r.ticks or 0 for r in ranges)
        uncounted = sum(r.ticks is None for r in ranges)
        more = "+" if uncounted or any(r.capped for r in ranges) else ""
        lines.append(f"{len(ranges):,} range(s), {ticks:,}{more} tick(s) recorded as missed"
                     + (f" ({uncounted:,} range(s) not counted: no valid definition)"
                        if uncounted else "")
                     + "; `kiqbeat backfill NAME ...` (or --all) pushes them")
    else:
        lines.append("no missed ticks recorded"
                     + (f" for {', '.join(map(shown_name, request.names))}"
                        if request.names else ""))
    return Outcome({"missed": [r.as_dict() for r in ranges]}, lines,
                   problems=[why for _, why in garbled], code=1 if garbled else 0,
                   value=ranges)


def _trigger(request: Request, store: Store) -> Outcome:
    ran = store.trigger(request.name, request.args)
    return Outcome(ran.as_dict(), [f"pushed {shown(ran.name)} now: jid {ran.jid} into "
                                   f"queue {shown(ran.queue)}"], value=ran)


def _history(request: Request, store: Store) -> Outcome:
    pushes = store.history(request.name)
    lines = [p.line() for p in pushes] or [
        f"no pushes recorded for {shown(request.name)}"
        + (" (KIQBEAT_HISTORY / --history is 0: none are kept)"
           if store.keep_history == 0 else "")]
    return Outcome({**json_name(request.name), "history": [p.as_dict() for p in pushes]},
                   lines, value=pushes)


def _report(request: Request, store: Store) -> Outcome:
    found = store.report(request.name, since=request.since, until=request.until)
    return Outcome(found.as_dict(), found.lines(), value=found)


def _reindex(request: Request, engine: Engine) -> Outcome:
    """Split the due index into the request's count (else the deployment's: --shard-count
    or --shard's N; else the one recorded), and rescore entries no invocation plans;
    recorded in the audit trail (the request's actor and note) with those counts."""
    settings = engine.settings
    count = settings.shard_count
    if request.shards is not None and count is not None and request.shards != count:
        raise ConfigError(f"a reindex into {request.shards} shard(s), but this deployment runs "
                          f"{count} (KIQBEAT_SHARD_COUNT, --shard-count); nothing was done")
    shard = settings.shard_to_run(required=False)  # --shard I/M refused unless M is the count
    store = engine.store().acting(request.actor or None, request.note)
    shards = request.shards or count or (shard[1] if shard else store.shards)
    resharded = store.resharded(shards)
    moved = resharded.reindex()
    rescored = resharded.rescore_unplannable()
    store.ctx.audit("reindex", detail=f"{shards} shard(s): {moved} entries, {rescored} rescored")
    return Outcome({"action": "reindex", "shards": shards, "moved": moved, "rescored": rescored},
                   [f"the due index is split into {shards} shard(s): {moved:,} entries"
                    + (f"; {rescored:,} entries scored beyond the year 9999 (never planned) "
                       "rescored to be planned" if rescored else "")])


# --------------------------------------------------------------------------- status

def _status(request: Request, engine: Engine, store: Store) -> Outcome:
    """Counts by state, then the named schedules (with their missed ticks and last pushes)
    or a page of the due index, most overdue first; and the document, when there is one."""
    status = store.status(request.names, shard=engine.settings.shard, offset=request.offset,
                          limit=request.limit)
    records: dict[str, dict[str, Any]] = {}
    lines: list[str] = []
    counts = status.counts
    lines.append(f"Redis clock: {status.now.isoformat(timespec='seconds')}; {counts.schedules} "
                 f"schedules stored, {counts.indexed} indexed, {counts.overdue} due now, "
                 f"{counts.set_aside} set aside"
                 + (f", {counts.with_missed} with missed ticks recorded (`kiqbeat missed`)"
                    if counts.with_missed else ""))
    applied = engine.document_applied() if engine.settings.config_source else None
    document = applied and {"source": applied[0].source,
                            "schedules": len(applied[0].definitions), "applied": applied[1]}
    if document:
        lines.append(f"document {shown_text(str(document['source']))}: "
                     f"{document['schedules']} schedules, "
                     + ("applied" if document["applied"] else
                        "changed since it was last applied (the next invocation applies it)"))
    missed = store.missed(request.names) if request.names else []
    for row in status.schedules:
        lines.append(row.line())
        if not request.names:
            continue
        # Named schedules also show their recorded missed ticks and their last pushes.
        ranges = [m for m in missed if m.name == row.name]
        pushes = store.history(row.name)
        records[row.name] = {"missed": [m.as_dict() for m in ranges],
                             "history": [p.as_dict() for p in pushes]}
        lines += [f"  missed: {m.line()}" for m in ranges]
        lines += [f"  pushed {p.line()}" for p in pushes] or ["  no pushes recorded"]
    shown_rows = request.offset + len(status.schedules)
    if not request.names and shown_rows < counts.indexed:
        lines.append(f"... {counts.indexed - shown_rows} more (--offset {shown_rows})")
    lines += [f"set aside: {shown_name(name)}: {shown_text(why, MAX_REASON_CHARS)}"
              for name, why in status.set_aside]
    if counts.unplannable:
        names = ", ".join(shown(n) for n in status.unplannable)
        more = counts.unplannable - len(status.unplannable)
        lines.append(f"never planned: {counts.unplannable:,} index entries scored beyond the "
                     f"year 9999 (written by hand?): {names}"
                     + (f" and {more:,} more" if more > 0 else "")
                     + "; `kiqbeat schedules reindex` rescores them to be planned")
    if status.ended_count:
        more = status.ended_count - len(status.ended)
        lines.append(f"ended: {status.ended_count:,} schedule(s) past their end push nothing "
                     f"more: {', '.join(shown_name(n) for n in status.ended)}"
                     + (f" and {more:,} more" if more > 0 else ""))
    for incident in status.incidents:
        lines.append(f"incident: {shown_name(incident.name)} is {incident.event} since tick "
                     f"{incident.tick}")
    for backlog in status.alert_backlog:
        if backlog.waiting:
            lines.append(f"alerts: {backlog.waiting} event(s) wait for the {backlog.sink} sink, "
                         f"the oldest for {backlog.oldest_age_s or 0:.0f} s (retried by each "
                         "invocation)")
    result = {"now": status.now.isoformat(), "summary": asdict(counts), "document": document,
              "alerts": {"incidents": [i.as_dict() for i in status.incidents],
                         "backlog": [b.as_dict() for b in status.alert_backlog]},
              "ended": {"count": status.ended_count,
                        "names": [json_name(n) for n in status.ended]},
              "offset": request.offset, "limit": request.limit,
              "schedules": [r.as_dict() | records.get(r.name, {}) for r in status.schedules],
              "set_aside": [{**json_name(n), "why": why} for n, why in status.set_aside],
              "unplannable": status.unplannable}
    return Outcome(result, lines)


# --------------------------------------------------------------------------- schedules changes

def _write(request: Request, store: Store) -> Outcome:
    """add, put or update one schedule; its definition checked as a document's schedule. A
    put reads the owner first, to say whether it added the schedule or replaced one (a
    typo in a name adds a schedule: the answer says so) — `created`, the HTTP API's 201."""
    owned = store.owner(request.name) if request.kind == "put" or request.force_owner \
        else None
    warnings = _forcing(request, owned)
    if request.kind == "add":
        store.add(request.name, request.definition)
        changed = True
    elif request.kind == "put":
        changed = store.put(request.name, request.definition, force=request.force_owner)
    else:
        changed = store.update(request.name, request.definition, force=request.force_owner)
    verb = {"add": "added", "put": "added" if owned is None else "replaced",
            "update": "updated"}[request.kind]
    line = (f"{verb} {shown(request.name)}; the next invocation plans it" if changed
            else f"{shown(request.name)} was stored exactly so already; nothing changed")
    outcome = _changed(request, changed, line, warnings)
    if request.kind == "put":
        outcome.result["created"] = owned is None
    return outcome


def _remove(request: Request, store: Store) -> Outcome:
    """Remove one schedule; `changed` (and `value`) False when there was none: the CLI says
    so and exits 0, the HTTP API answers 404."""
    warnings = _forcing(request, store.owner(request.name) if request.force_owner else None)
    removed = store.remove(request.name, force=request.force_owner)
    line = (f"removed {shown(request.name)} and forgot its state" if removed
            else f"{store.no_schedule([request.name])}; nothing removed")
    return _changed(request, removed, line, warnings)


def _pause(request: Request, store: Store) -> Outcome:
    pausing = request.kind == "pause"
    changed = (store.pause(request.name, note=request.note, until=request.until) if pausing
               else store.resume(request.name))
    name = shown(request.name)
    until = ("resumed" if request.until is None
             else f"{request.until.isoformat(timespec='seconds')}, or resumed")
    if changed:
        line = (f"paused {name}: its ticks pass without jobs until {until}" if pausing
                else f"resumed {name}: its next tick is pushed")
    elif pausing:
        line = f"{name} was paused already (its note and end are now these)"
    else:
        line = f"{name} was running already"
    return _changed(request, changed, line)


def _skip(request: Request, store: Store) -> Outcome:
    pending = store.skip(request.name, request.count)
    return Outcome({**json_name(request.name), "action": "skip", "changed": True,
                    "pending": pending},
                   [f"{shown(request.name)}: its next {pending:,} tick(s) will be skipped "
                    "(shown as skipped in its history, not recorded as missed)"],
                   value=pending)


def _changed(request: Request, changed: bool, line: str,
             warnings: list[str] | None = None) -> Outcome:
    return Outcome({**json_name(request.name), "action": request.kind, "changed": changed},
                   [line], warnings=warnings or [], value=changed)


def _forcing(request: Request, owned: tuple[str, bool] | None) -> list[str]:
    """With force_owner over a document the store knows (`owned`: `Store.owner`, read
    before the write), a warning saying what that document does next."""
    if not request.force_owner or owned is None or not owned[1]:
        return []
    then = ("still lists it, and writes it again when its definition there changes"
            if request.kind == "remove" else "may no longer change it: its next change "
            "of it is refused, with a warning, until it drops the name")
    return [f"schedule {shown(request.name)} belonged to the document "
            f"{shown(owned[0], MAX_SHOWN_CHARS)}, which the store knows; --force-owner "
            f"(\"force_owner\") overrides it, and that document {then}"]


def _get(request: Request, store: Store) -> Outcome:
    row = store.get(request.name)
    if row is None:
        raise store.no_schedule([request.name])
    return Outcome(row.as_dict(), _described(row), value=row)


def _described(row: ScheduleStatus) -> list[str]:
    source = shown_text(row.source) if row.source else "the API (or another language)"
    lines = [f"{shown_name(row.name)}{'' if row.enabled else ' (paused)'}"
             + (" (ended)" if row.ended else ""), f"  source: {source}"]
    if row.pause is not None:
        lines.append(f"  {shown_text(row.pause.line(), MAX_REASON_CHARS)}")
    if row.next_tick is None:
        lines.append(f"  set aside: {shown_text(row.set_aside or '', MAX_REASON_CHARS)}")
    else:
        def iso(attribute: str) -> str:
            value = getattr(row, attribute)
            return value.isoformat(timespec="seconds") if value else "not yet (never planned)"

        lines += [f"  timing: {row.timing}",
                  "  next tick: ended (it pushes nothing more)" if row.ended else
                  f"  next tick: {iso('next_tick')}"
                  + (f" ({row.lag_s:.0f} s overdue)" if row.lag_s > 0 else ""),
                  f"  last tick covered: {iso('covered_through')}",
                  f"  first seen: {iso('first_seen')}"]
        life = dict(row.life or {})
        if life.get("rules"):
            lines.append(f"  life: {life['rules']}")
        if usage := describe_usage(life):
            lines.append(f"  used: {usage}")
    definition = foreign_json(row.definition)
    if len(definition) > MAX_DEFINITION_BYTES:  # stored by another writer: --json has it all
        definition = definition[:MAX_DEFINITION_BYTES] + "... (--json shows it whole)"
    lines.append("  definition: " + definition)
    return lines


# What each request kind on a schedule does on the Store: the one dispatch (a backfill,
# which takes `run`'s deadline, is `run`'s own).
BY_KIND: dict[str, Callable[[Request, Store], Outcome]] = {
    "missed": _missed, "trigger": _trigger, "history": _history, "report": _report,
    "get": _get,
    "add": _write, "put": _write, "update": _write, "remove": _remove,
    "pause": _pause, "resume": _pause, "skip": _skip,
}


# --------------------------------------------------------------------------- backfill

STOPS = {"deadline": "stopped at the deadline (--deadline, KIQBEAT_DEADLINE, or the Lambda's "
                     "remaining time)",
         "signal": "stopped by a signal (SIGINT or SIGTERM)",
         "max_jobs": "stopped at --max-jobs"}


def _backfilled(request: Request, result: Backfill) -> Outcome:
    """A backfill's lines and exit code: 1 when a named schedule was skipped, any schedule
    (`--all` too) was set aside for a stored value kiqbeat cannot read, or ticks were left
    for another run; STOPPED_EARLY when it stopped before the end."""
    scope = f"{result.schedules:,} schedule(s)"
    more = "+" if result.capped else ""
    if request.dry_run:
        lines = [f"dry run: would push {result.planned:,}{more} tick(s) of {scope}"
                 + (f", the newest of each (--latest-only), and take {result.dropped:,}{more} "
                    "older one(s) out of the record unpushed" if request.latest_only else "")
                 + "; nothing pushed"]
        if result.planned > BACKFILL_CONFIRM_JOBS and not request.max_jobs:
            lines.append(f"more than {BACKFILL_CONFIRM_JOBS:,}: the backfill needs --yes (all) "
                         "or --max-jobs N (the oldest N)")
        if result.before_first_seen:
            lines.append(f"{result.before_first_seen:,}{more} of them from before their "
                         "schedule was first seen (never owed): the backfill needs --yes, or "
                         "--since to leave them out")
    else:
        lines = [f"backfill of {scope}: {result.pushed:,} pushed, {result.already:,} already "
                 f"pushed by another backfill, {result.stale:,} left alone (the definition "
                 "changed meanwhile)"]
        lines += [f"pushed {shown_name(j.schedule)} tick {j.tick.isoformat()} jid {j.jid}"
                  for j in result.jobs[:20]]
        if result.pushed > 20:
            lines.append(f"... and {result.pushed - 20:,} more (--json lists the first "
                         f"{len(result.jobs):,})")
        if request.latest_only:
            lines.append("older ticks in scope were taken out of the record unpushed "
                         "(--latest-only)")
    lines += [f"skipped: {shown_name(name)}: {why}" for name, why in result.skipped]
    outcome = Outcome(result.as_dict() | {"dry_run": request.dry_run}, lines, value=result)
    if result.stopped:
        last = (f"the last: {shown_name(result.last.schedule)} tick "
                f"{result.last.tick.isoformat()}"
                if result.last else "none")
        outcome.problems.append(
            f"{STOPS[result.stopped]} after {result.pushed:,} tick(s) pushed ({last}); run "
            "the same backfill again to push the rest (no tick is pushed twice)")
        outcome.code = STOPPED_EARLY
    if request.names and result.skipped:
        outcome.problems.append(f"{len(result.skipped)} named schedule(s) skipped")
    if result.aside:
        outcome.problems.append(
            f"{len(result.aside)} schedule(s) left alone, their ticks still recorded: a stored "
            "value of theirs is not one kiqbeat writes (" + "; ".join(
                f"{shown_name(name)}: {why}" for name, why in result.aside[:3])
            + (f"; and {len(result.aside) - 3:,} more" if len(result.aside) > 3 else "")
            + "); fix or delete that schedule's value, then backfill again")
    if result.stale:
        outcome.problems.append(f"{result.stale:,} tick(s) left recorded because their "
                                "schedule changed meanwhile; run the backfill again")
    if outcome.problems and not outcome.code:
        outcome.code = 1
    return outcome
