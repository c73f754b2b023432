"""An operator's requests in one model for every front end: read from a command line
(`kiqbeat backfill ...`, `kiqbeat schedules put ...`: an argparse Namespace), from a Lambda
event (`{"kiqbeat": "backfill", ...}`, `{"kiqbeat": "put", ...}`) or from the console's JSON
body or form (`from_fields`), checked by the same code, run by the same dispatch
(`kiqbeat.entrypoints.outcomes`). The front ends only adapt: they name the fields their own
way (`--since`, the event's "since") and print, return or render the outcome.

The requests: `status`; `missed`, `backfill`, `trigger`, `history`; the schedules changes
`add`, `put`, `update`, `remove`, `pause`, `resume` and `get`; `reindex`. Every check names
the field and clips the value (`kiqbeat.errors.shown`): since after until, names, job args
as a JSON array within MAX_JOB_BYTES and Sidekiq's MAX_JSON_DEPTH levels, whole numbers
(--max-jobs, --limit, --offset, shards) in their bounds. A definition is checked by the
store, as a document's schedule is, with the same messages whichever entrypoint gave it.
docs/operations.md says how each request is written in either form.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kiqbeat.core.instants import option_instant
from kiqbeat.core.limits import (
    MAX_AUDIT_NOTE_CHARS,
    MAX_JSON_DEPTH,
    MAX_PENDING_SKIPS,
    MAX_REQUEST_NAME_CHARS,
    MAX_SHARDS,
    MAX_SHOWN_CHARS,
)
from kiqbeat.core.records import REASONS
from kiqbeat.document.jobs import MAX_JOB_BYTES, MAX_JOB_VALUES, Shapes
from kiqbeat.errors import ConfigError, shown

# Names one request may list, and schedules one status may show (more: --all, paging, or
# several requests).
MAX_NAMES = 10_000
DEFAULT_STATUS_ROWS = 50


@dataclass(frozen=True)
class Request:
    """One operator request, its fields checked: what to do, on which schedules."""

    kind: str  # one of FIELDS
    names: tuple[str, ...] = ()  # status, missed, backfill: these schedules (none: all)
    name: str = ""  # trigger, history and the schedules changes
    args: list[Any] | None = None  # trigger: instead of the schedule's own
    since: datetime | None = None  # backfill: ticks at or after; report: ticks after
    until: datetime | None = None  # backfill, report: ticks at or before
    latest_only: bool = False
    dry_run: bool = False
    yes: bool = False  # backfill: push above BACKFILL_CONFIRM_JOBS, and before first-seen
    max_jobs: int | None = None  # backfill: push at most this many (the oldest)
    count: int = 1  # skip: the next ticks to skip
    reasons: tuple[str, ...] = ()  # backfill: ranges recorded for these (none: all but overlap)
    shards: int | None = None  # reindex: the count to split the due index into (None: the
    # deployment's, --shard-count or --shard's N, else the one recorded)
    definition: Any = None  # add, put, update: as a document's schedule (the store checks it)
    force_owner: bool = False  # put, update, remove: whatever source the schedule names
    limit: int = DEFAULT_STATUS_ROWS  # status: schedules shown
    offset: int = 0  # status: skipped first (paging)
    # Every request: who asks (default: the entrypoint's: --actor / KIQBEAT_ACTOR, else
    # user@host; the Lambda's function name) and why, for the audit trail (kiqbeat.audit).
    actor: str = ""
    note: str = ""


# Each operation's fields: the event's key -> the command line's spelling.
_WRITE = {"name": "NAME", "definition": "--json-definition"}
_AUDITED = {"actor": "--actor", "note": "--note"}  # every operation's, for the audit trail
FIELDS: dict[str, dict[str, str]] = {
    "missed": {"names": "NAME"},
    "backfill": {"names": "NAME", "all": "--all", "since": "--since", "until": "--until",
                 "latest_only": "--latest-only", "dry_run": "--dry-run", "yes": "--yes",
                 "max_jobs": "--max-jobs", "reasons": "--reason"},
    "trigger": {"name": "NAME", "args": "--args"},
    "history": {"name": "NAME"},
    "report": {"name": "NAME", "since": "--since", "until": "--until"},
    # The command line's is `kiqbeat schedules reindex` (--shard-count N, or --shard 0/N).
    "reindex": {"shards": "--shard-count"},
    "status": {"names": "NAME", "limit": "--limit", "offset": "--offset"},
    "add": _WRITE,
    "put": _WRITE | {"force_owner": "--force-owner"},
    "update": _WRITE | {"force_owner": "--force-owner"},
    "remove": {"name": "NAME", "force_owner": "--force-owner"},
    # The audit note (--note) is also the pause's own note, shown by status and get.
    "pause": {"name": "NAME", "until": "--until"},
    "resume": {"name": "NAME"},
    "skip": {"name": "NAME", "count": "--count"},
    "get": {"name": "NAME"},
}
FIELDS = {kind: fields | _AUDITED for kind, fields in FIELDS.items()}
# The fields an event must give when its operation has them: the schedule's name, a write's
# definition, a reindex's count (a command line's parser requires its own).
NEEDED = ("name", "definition", "shards")
OPERATOR = "kiqbeat"  # the event's key naming the operation


def from_args(kind: str, args: argparse.Namespace) -> Request:
    """The request of a command line (`kiqbeat KIND ...`, `kiqbeat schedules KIND ...`); the
    definition of a write is the parsed value the command read (`args.definition`)."""
    flags = FIELDS[kind]
    raw = {f: value for f in flags
           if (value := getattr(args, f, None)) is not None and value is not False
           and value != []}
    return _checked(kind, _read_text(raw, flags.__getitem__), flags.__getitem__)


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
    for needed in NEEDED:
        if needed in fields and needed not in event:
            raise ConfigError(f"{kind!r} needs {_event_field(needed)}")
    return _checked(kind, {k: v for k, v in event.items() if k != OPERATOR}, _event_field)


def from_fields(kind: str, raw: Mapping[str, Any], *, text: bool = False) -> Request:
    """The request of fields named as the event names them, from another front end (the
    console's JSON body or form): the same checks, messages naming the bare field. `text`:
    a form's values, read as a command line's are (`args` as JSON, whole numbers)."""
    unknown = sorted(str(k)[:60] for k in raw if k not in FIELDS[kind])
    if unknown:
        raise ConfigError([f"{shown(k)} is not a field of {kind!r}; its fields: "
                           f"{', '.join(FIELDS[kind])}" for k in unknown])
    return _checked(kind, _read_text(dict(raw), str) if text else raw, str)


def summary(event: Any) -> dict[str, str] | str:
    """A clipped summary of an event for a log line: never the whole event (its values may
    be megabytes), at most 20 fields, each value `shown`."""
    if not isinstance(event, Mapping):
        return shown(event)
    return {shown(k, 60): shown(v) for k, v in list(event.items())[:20]} | (
        {"...": f"{len(event) - 20} more field(s)"} if len(event) > 20 else {})


def _event_field(key: str) -> str:
    return f"the event's \"{key}\""


# Whole-number fields: (smallest, largest, what they count).
_WHOLE = {"max_jobs": (1, None, "jobs"), "shards": (1, MAX_SHARDS, "shards"),
          "limit": (1, MAX_NAMES, "schedules"), "offset": (0, None, "schedules"),
          "count": (1, MAX_PENDING_SKIPS, "ticks")}


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
            values[key] = option_instant(value, where(key))
        elif key == "args":
            values[key] = _job_args(value, where(key))
        elif key in _WHOLE:
            values[key] = _whole(value, where(key), *_WHOLE[key])
        elif key == "reasons":
            values[key] = _reasons(value, where(key))
        elif key == "definition":
            values[key] = value  # the store checks it, with a document's messages
        elif key in _AUDITED:
            values[key] = _text(value, where(key), _TEXT_CHARS[key])
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


# The longest actor and note a request may give (the audit trail keeps them whole).
_TEXT_CHARS = {"actor": MAX_SHOWN_CHARS, "note": MAX_AUDIT_NOTE_CHARS}


def _text(value: Any, where: str, most: int) -> str:
    if not isinstance(value, str) or len(value) > most:
        raise ConfigError(f"{where}: expected text of at most {most:,} characters, not "
                          f"{shown(value)}")
    return value.strip()


def _reasons(value: Any, where: str) -> tuple[str, ...]:
    """A backfill's reasons: recorded ones (core/records.py REASONS)."""
    if (not isinstance(value, list | tuple) or not value
            or any(not isinstance(v, str) or v not in REASONS for v in value)):
        raise ConfigError(f"{where}: expected a list of reasons a range is recorded for "
                          f"({', '.join(REASONS)}), not {shown(value)}")
    return tuple(dict.fromkeys(value))


def _whole(value: Any, where: str, least: int, most: int | None, unit: str) -> int:
    if (isinstance(value, bool) or not isinstance(value, int) or value < least
            or (most is not None and value > most)):
        bound = f"{least} to {most:,}" if most is not None else f"{least} or more"
        raise ConfigError(f"{where}: expected a whole number of {unit}, {bound}, not "
                          f"{shown(value)}")
    return value


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
    if len(value) > MAX_REQUEST_NAME_CHARS:
        raise ConfigError(f"{where}: {shown(value)} is {len(value):,} characters, more than a "
                          f"request may give ({MAX_REQUEST_NAME_CHARS:,}); kiqbeat writes no "
                          "name over 1,000")
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


def _read_text(raw: dict[str, Any], where: Callable[[str], str]) -> dict[str, Any]:
    """Text values as a command line or a form gives them: `args` read as JSON, whole
    numbers as digits (anything else left as it is, for the checks to refuse)."""
    if isinstance(raw.get("args"), str):
        raw["args"] = _json_text(raw["args"], where("args"))
    for key in ("max_jobs", "limit", "offset", "count"):
        if isinstance(raw.get(key), str):
            raw[key] = _whole_text(raw[key])
    return raw


def _whole_text(text: str) -> int | str:
    """A command line's whole number as an int (negative too, refused as an event's would
    be); anything else as it is (refused, shown)."""
    digits = (stripped := text.strip()).removeprefix("-")
    return int(stripped) if digits.isascii() and digits.isdigit() and len(digits) < 10 \
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
