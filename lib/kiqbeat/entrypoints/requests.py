"""An operator's requests — `missed`, `backfill`, `trigger`, `history` (and, from an event,
`reindex`) — in one model for
both entrypoints: read from a command line (`kiqbeat backfill ...`, an argparse Namespace)
or from a Lambda event (`{"kiqbeat": "backfill", ...}`), checked by the same code, run by
the same function (`execute`). The CLI and the handler only adapt: they name the fields
their own way (`--since`, the event's "since") and print or return the outcome.

Every check names the field and clips the value (`kiqbeat.errors.shown`): since after
until, names, job args as a JSON array within MAX_JOB_BYTES and Sidekiq's MAX_JSON_DEPTH
levels, --max-jobs a whole number. A backfill pushing more than BACKFILL_CONFIRM_JOBS jobs,
or any tick from before its schedule's first-seen, needs `yes` (or `max_jobs`, for the
count); docs/operations.md says how each request is written in either form.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kiqbeat.core.limits import BACKFILL_CONFIRM_JOBS, MAX_SHARDS, MAX_SHOWN_CHARS
from kiqbeat.document.fields import MAX_NAME_CHARS
from kiqbeat.document.jobs import MAX_JOB_BYTES, MAX_JOB_VALUES, MAX_JSON_DEPTH, Shapes
from kiqbeat.entrypoints.preview import parse_instant
from kiqbeat.errors import ConfigError, json_name, shown, shown_name
from kiqbeat.store import Backfill, Store

# Names one request may list (more: --all, or several requests).
MAX_NAMES = 10_000
# Exit codes: stopped before the end (deadline, --max-jobs) — run it again for the rest.
STOPPED_EARLY = 3


@dataclass(frozen=True)
class Request:
    """One operator request, its fields checked: what to do, on which schedules."""

    kind: str  # "missed", "backfill", "trigger" or "history"
    names: tuple[str, ...] = ()  # missed, backfill: these schedules (none: all)
    name: str = ""  # trigger, history
    args: list[Any] | None = None  # trigger: instead of the schedule's own
    since: datetime | None = None  # backfill: ticks at or after
    until: datetime | None = None  # backfill: ticks at or before
    latest_only: bool = False
    dry_run: bool = False
    yes: bool = False  # backfill: push above BACKFILL_CONFIRM_JOBS, and before first-seen
    max_jobs: int | None = None  # backfill: push at most this many (the oldest)
    shards: int = 1  # reindex: the count to split the due index into


@dataclass
class Outcome:
    """What a request did: its JSON form (the Lambda's result, the CLI's --json), its
    lines for a person, problems for stderr or a warning, and the CLI's exit code."""

    result: dict[str, Any]
    lines: list[str]
    problems: list[str] = field(default_factory=list)
    code: int = 0
    backfill: Backfill | None = None


# --------------------------------------------------------------------------- reading

# Each operation's fields: the event's key -> the command line's spelling.
FIELDS: dict[str, dict[str, str]] = {
    "missed": {"names": "NAME"},
    "backfill": {"names": "NAME", "all": "--all", "since": "--since", "until": "--until",
                 "latest_only": "--latest-only", "dry_run": "--dry-run", "yes": "--yes",
                 "max_jobs": "--max-jobs"},
    "trigger": {"name": "NAME", "args": "--args"},
    "history": {"name": "NAME"},
    # The Lambda's way to split the store (a Redis only the function reaches); the command
    # line's is `kiqbeat schedules reindex --shard 0/N`.
    "reindex": {"shards": "--shard 0/N"},
}
OPERATOR = "kiqbeat"  # the event's key naming the operation


def from_args(kind: str, args: argparse.Namespace) -> Request:
    """The request of a command line (`kiqbeat KIND ...`)."""
    flags = FIELDS[kind]
    raw = {f: getattr(args, f) for f in flags
           if getattr(args, f, None) not in (None, False, [])}
    if isinstance(raw.get("args"), str):
        raw["args"] = _json_text(raw["args"], "--args")
    if isinstance(raw.get("max_jobs"), str):
        raw["max_jobs"] = _whole_text(raw["max_jobs"], "--max-jobs")
    return _checked(kind, raw, flags.__getitem__)


def from_event(event: Mapping[str, Any]) -> Request:
    """The request of an operator's event (`{"kiqbeat": KIND, FIELD: VALUE, ...}`);
    ConfigError naming the first field that is unknown, missing or invalid."""
    kind = event[OPERATOR]
    if not (isinstance(kind, str) and kind in FIELDS):
        raise ConfigError(f"{_event_field(OPERATOR)}: {shown(kind)} is not an operation; "
                          f"expected one of {', '.join(FIELDS)}")
    fields = FIELDS[kind]
    for key in event:
        if key != OPERATOR and key not in fields:
            raise ConfigError(f"{_event_field(str(key)[:60])} is not a field of {kind!r}; "
                              f"its fields: {', '.join(fields)}")
    needed = {"trigger": "name", "history": "name", "reindex": "shards"}.get(kind)
    if needed and needed not in event:
        raise ConfigError(f"{kind!r} needs {_event_field(needed)}")
    return _checked(kind, {k: v for k, v in event.items() if k != OPERATOR}, _event_field)


def summary(event: Any) -> dict[str, str] | str:
    """A clipped summary of an event for a log line: never the whole event (its values may
    be megabytes), at most 20 fields, each value `shown`."""
    if not isinstance(event, Mapping):
        return shown(event)
    return {shown(k, 60): shown(v) for k, v in list(event.items())[:20]} | (
        {"...": f"{len(event) - 20} more field(s)"} if len(event) > 20 else {})


def _event_field(key: str) -> str:
    return f"the event's \"{key}\""


def _checked(kind: str, raw: Mapping[str, Any], where: Callable[[str], str]) -> Request:
    """One check of every field, whichever entrypoint read them."""
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "names":
            values[key] = _names(value, where(key))
        elif key == "name":
            values[key] = _name(value, where(key))
        elif key in ("since", "until"):
            if not isinstance(value, str):
                raise ConfigError(f"{where(key)}: expected an ISO 8601 instant such as "
                                  f"\"2026-03-08T07:00:00Z\", not {shown(value)}")
            values[key] = parse_instant(value, where(key))
        elif key == "args":
            values[key] = _job_args(value, where(key))
        elif key == "max_jobs":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{where(key)}: expected a whole number of jobs, 1 or more, "
                                  f"not {shown(value)}")
            values[key] = value
        elif key == "shards":
            if (isinstance(value, bool) or not isinstance(value, int)
                    or not 1 <= value <= MAX_SHARDS):
                raise ConfigError(f"{where(key)}: expected a whole number of shards, 1 to "
                                  f"{MAX_SHARDS:,}, not {shown(value)}")
            values[key] = value
        elif not isinstance(value, bool):
            raise ConfigError(f"{where(key)}: expected true or false, not {shown(value)}")
        else:
            values[key] = value
    if kind == "backfill":
        if bool(values.get("names")) == values.pop("all", False):
            raise ConfigError(f"a backfill needs {where('names')} (the schedules to backfill) "
                              f"or {where('all')} (every schedule with missed ticks recorded), "
                              "one of the two, not both; nothing was done")
        since, until = values.get("since"), values.get("until")
        if since and until and since > until:
            raise ConfigError(f"{where('since')} {shown(raw['since'])} is later than "
                              f"{where('until')} {shown(raw['until'])}; nothing was done")
    return Request(kind, **values)


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not (isinstance(value, list | tuple) and value):
        raise ConfigError(f"{where}: expected a list of schedule names, not {shown(value)}")
    if len(value) > MAX_NAMES:
        raise ConfigError(f"{where}: {len(value):,} names, more than {MAX_NAMES:,} (use --all, "
                          "or several requests)")
    return tuple(_name(n, where) for n in value)


def _name(value: Any, where: str) -> str:
    if not (isinstance(value, str) and value):
        raise ConfigError(f"{where}: expected a schedule name, not {shown(value)}")
    if len(value) > MAX_NAME_CHARS:
        raise ConfigError(f"{where}: {shown(value)} is {len(value):,} characters; no schedule "
                          f"has a name longer than {MAX_NAME_CHARS:,}")
    return value


def _json_text(text: str, where: str) -> Any:
    """A command line's JSON value, within a job's size and Sidekiq's nesting."""
    if len(text) > MAX_JOB_BYTES:
        raise ConfigError(f"{where} is {len(text):,} characters, more than a job may hold "
                          f"({MAX_JOB_BYTES:,} bytes): {shown(text)}")
    try:
        return json.loads(text)
    except RecursionError:
        raise ConfigError(f"{where} nests deeper than the {MAX_JSON_DEPTH} levels Sidekiq's "
                          f"JSON parser reads: {shown(text)}") from None
    except ValueError as exc:
        raise ConfigError(f"{where} {shown(text)} is not JSON ({str(exc)[:MAX_SHOWN_CHARS]}); "
                          "it must be a JSON array, e.g. '[42, \"eu\"]'") from None


def _whole_text(text: str, where: str) -> int | str:
    stripped = text.strip()
    return int(stripped) if stripped.isascii() and stripped.isdigit() and len(stripped) < 10 \
        else text


def _job_args(value: Any, where: str) -> list[Any]:
    """The job's arguments: a JSON array every consumer reads back as written (the checks a
    document's `args` gets, nesting and size included)."""
    if not isinstance(value, list):
        raise ConfigError(f"{where} must be a JSON array (the job's arguments), e.g. "
                          f"'[42, \"eu\"]', not {shown(value)}")
    try:  # the job hash is level 1, its args level 2 (as in a document)
        Shapes().check(value, "args", 2, [MAX_JOB_VALUES, MAX_JOB_BYTES])
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return value


# --------------------------------------------------------------------------- running

def execute(request: Request, store: Store, *, deadline: float,
            stop: Callable[[], bool] | None = None,
            progress: Callable[[int], None] | None = None) -> Outcome:
    """Run a request on the store. A backfill stops between calls at `deadline`
    (time.monotonic()) or once `stop()` is true, and says what it pushed."""
    if request.kind == "missed":
        return _missed(request, store)
    if request.kind == "trigger":
        ran = store.trigger(request.name, request.args)
        return Outcome(ran.as_dict(), [f"pushed {shown(ran.name)} now: jid {ran.jid} into "
                                       f"queue {shown(ran.queue)}"])
    if request.kind == "history":
        pushes = store.history(request.name)
        lines = [p.line() for p in pushes] or [
            f"no pushes recorded for {shown(request.name)}"
            + (" (KIQBEAT_HISTORY / --history is 0: none are kept)"
               if store.keep_history == 0 else "")]
        return Outcome({**json_name(request.name), "history": [p.as_dict() for p in pushes]}, lines)
    if request.kind == "reindex":
        moved = store.resharded(request.shards).reindex()
        return Outcome({"shards": request.shards, "moved": moved},
                       [f"the due index is split into {request.shards} shard(s); {moved:,} "
                        "entries moved"])
    unbounded = not (request.yes or request.max_jobs)
    done = store.backfill(request.names, since=request.since, until=request.until,
                          latest_only=request.latest_only, dry_run=request.dry_run,
                          progress=progress, deadline=deadline, stop=stop,
                          max_jobs=request.max_jobs,
                          confirm_above=BACKFILL_CONFIRM_JOBS if unbounded else None,
                          pre_history=request.yes)
    return _backfilled(request, done)


def _missed(request: Request, store: Store) -> Outcome:
    ranges = store.missed(request.names)
    listed = {r.name for r in ranges}
    unknown = [n for n in request.names if n not in listed and store.get(n) is None]
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
                     + (f" for {', '.join(map(repr, request.names))}" if request.names else ""))
    return Outcome({"missed": [r.as_dict() for r in ranges]}, lines)


STOPS = {"deadline": "stopped at the deadline (--deadline, KIQBEAT_DEADLINE, or the Lambda's "
                     "remaining time)",
         "signal": "stopped by a signal (SIGINT or SIGTERM)",
         "max_jobs": "stopped at --max-jobs"}


def _backfilled(request: Request, result: Backfill) -> Outcome:
    """A backfill's lines and exit code: 1 when a named schedule was skipped or ticks were
    left for another run; STOPPED_EARLY when it stopped before the end."""
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
        lines += [f"pushed {j.schedule} tick {j.tick.isoformat()} jid {j.jid}"
                  for j in result.jobs[:20]]
        if result.pushed > 20:
            lines.append(f"... and {result.pushed - 20:,} more (--json lists the first "
                         f"{len(result.jobs):,})")
        if request.latest_only:
            lines.append("older ticks in scope were taken out of the record unpushed "
                         "(--latest-only)")
    lines += [f"skipped: {shown_name(name)}: {why}" for name, why in result.skipped]
    outcome = Outcome(result.as_dict() | {"dry_run": request.dry_run}, lines, backfill=result)
    if result.stopped:
        last = (f"the last: {result.last.schedule} tick {result.last.tick.isoformat()}"
                if result.last else "none")
        outcome.problems.append(
            f"{STOPS[result.stopped]} after {result.pushed:,} tick(s) pushed ({last}); run "
            "the same backfill again to push the rest (no tick is pushed twice)")
        outcome.code = STOPPED_EARLY
    if request.names and result.skipped:
        outcome.problems.append(f"{len(result.skipped)} named schedule(s) skipped")
    if result.stale:
        outcome.problems.append(f"{result.stale:,} tick(s) left recorded because their "
                                "schedule changed meanwhile; run the backfill again")
    if outcome.problems and not outcome.code:
        outcome.code = 1
    return outcome
