"""sidekiq-scheduler and sidekiq-cron schedule files, converted to kiqbeat's document form.

The middle step of every document: `convert` detects the format and rewrites the document
in kiqbeat's form; `validate` then checks the result exactly as it checks kiqbeat's own.
Where the other tool's meaning cannot be kept, the conversion says so in a warning (or,
when jobs would silently change, in a problem):

sidekiq-scheduler (`:scheduler: :schedule:`, the older top-level `:schedule:`, or a bare
hash loaded with `Sidekiq.schedule = YAML.load_file(...)`):
  - the timer is the first of cron / every / at / in / interval, as sidekiq-scheduler picks;
    rufus options (`first_in`, ...) are dropped: kiqbeat's intervals count from the epoch;
  - `at` and `in` are one-shot timers counted from the Sidekiq process's start; kiqbeat has
    no start, so those entries are skipped, with a warning;
  - a missing `class` is the schedule's name (sidekiq-scheduler's README);
  - keys it does not know are pushed into the job hash by sidekiq-scheduler, so they go into
    `payload:` (a key close to a known one is reported as a typo instead).

sidekiq-cron (hash form or list form with `name:`):
  - `klass` is `class`; `status: disabled` is `enabled: false`;
  - string `args` are JSON (falling back to one string argument), a hash is one argument;
  - `active_job: true` uses the wrapper sidekiq-cron pushes,
    `ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper` (`active_job: legacy`), and
    `queue_name_prefix`/`queue_name_delimiter` prefix the queue as ActiveJob does;
  - `date_as_argument` becomes `include_metadata`: the last argument is then
    `{"scheduled_at": <tick, float seconds>}` instead of a bare float of the push time.

Both tools read a cron without a zone in the Sidekiq server's local time; kiqbeat reads it
in UTC, which a warning points out. Both read crons with fugit, which differs from Vixie
cron (and kiqbeat) on some day fields: `0 0 */2 * 1-5` ORs the two day fields in fugit and
ANDs them in Vixie, and day-of-week steps can differ; each such schedule gets a warning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from kiqbeat.core.cron import parse_cron
from kiqbeat.core.fugit import fugit_differences
from kiqbeat.document.fields import JOB_OPTIONS, KIQBEAT_MARKERS, SCHEDULE_KEYS
from kiqbeat.errors import ConfigError, did_you_mean, shown

KIQBEAT = "kiqbeat"
SIDEKIQ_SCHEDULER = "sidekiq-scheduler"
SIDEKIQ_CRON = "sidekiq-cron"

_JOB_MARKERS = ("cron", "class", "klass", "every")
_SCHEDULER_TIMERS = ("cron", "every", "at", "in", "interval")
# Keys only sidekiq-scheduler entries have: a bare hash holding them is sidekiq-scheduler's.
_SCHEDULER_ONLY = ("every", "at", "in", "interval", "include_metadata", "enabled", "rails_env")
_SCHEDULER_KEYS = (*_SCHEDULER_TIMERS, "class", "queue", "args", "description", "enabled",
                   "include_metadata", "rails_env")
_CRON_DROPPED = ("source", "last_enqueue_time", "fetch_missing_args")
_TRUTHY = ("true", "t", "yes", "y", "1")


@dataclass
class Converted:
    """A document in kiqbeat's form, with what the conversion changed or could not keep."""

    format: str
    document: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _looks_like_jobs(doc: dict[Any, Any]) -> bool:
    return bool(doc) and all(
        isinstance(v, dict) and any(k in v for k in _JOB_MARKERS) for v in doc.values())


def detect_format(doc: object) -> str:
    """Which tool wrote `doc` (decoded YAML/JSON): kiqbeat, sidekiq-scheduler or sidekiq-cron."""
    if isinstance(doc, list):
        return SIDEKIQ_CRON
    if not isinstance(doc, dict) or any(k in doc for k in KIQBEAT_MARKERS):
        return KIQBEAT
    if isinstance(doc.get("scheduler"), dict) or isinstance(doc.get("schedule"), dict):
        return SIDEKIQ_SCHEDULER
    if _looks_like_jobs(doc):
        if any(k in entry for entry in doc.values() for k in _SCHEDULER_ONLY):
            return SIDEKIQ_SCHEDULER
        return SIDEKIQ_CRON
    return KIQBEAT


def convert(doc: object) -> Converted:
    """`doc` in kiqbeat's document form, plus warnings and problems from converting it."""
    fmt = detect_format(doc)
    if fmt == KIQBEAT:
        if isinstance(doc, dict):
            return Converted(fmt, doc)
        return Converted(fmt, {}, problems=[
            f"the document is a {type(doc).__name__} ({shown(doc)}), not a mapping; "
            "expected 'schedules:' (kiqbeat), ':scheduler: :schedule:' (sidekiq-scheduler) or "
            "a hash or list of jobs (sidekiq-cron)"])
    out = Converted(fmt, {}, warnings=[f"read as a {fmt} file and converted to kiqbeat's form"])
    schedules: dict[str, Any] = {}
    if fmt == SIDEKIQ_SCHEDULER and isinstance(doc, dict):
        for name, entry in _scheduler_entries(doc, out).items():
            converted = _from_scheduler(name, entry, out)
            if converted is not None:
                schedules[name] = converted
    elif isinstance(doc, dict | list):
        for name, entry in _cron_entries(doc, out).items():
            converted = _from_cron(name, entry, out)
            if converted is not None:
                schedules[name] = converted
    _warn_local_zones(schedules, fmt, out)
    _warn_fugit_readings(schedules, fmt, out)
    out.document = {"schedules": schedules}
    return out


def _warn_fugit_readings(schedules: dict[str, Any], fmt: str, out: Converted) -> None:
    """Warn per schedule where fugit, which both tools use, fired the cron on other days."""
    for name, entry in schedules.items():
        expr = entry.get("cron")
        if not isinstance(expr, str):
            continue
        try:
            differences = fugit_differences(expr)
        except ConfigError:
            continue  # reported when the document is validated
        out.warnings.extend(f"schedule {shown(name)}: {fmt} read this cron differently: {d}"
                            for d in differences)


# ---------------------------------------------------------------------------- sidekiq-scheduler


def _scheduler_entries(doc: dict[Any, Any], out: Converted) -> dict[Any, Any]:
    section = doc.get("scheduler")
    if isinstance(section, dict):
        if section.get("enabled") is False:
            out.warnings.append(":scheduler: :enabled: false is ignored: kiqbeat schedules "
                                "these jobs (disable one with enabled: false)")
        if section.get("listened_queues_only"):
            out.warnings.append(":listened_queues_only: is ignored: kiqbeat pushes every job "
                                "to its queue whether or not a worker listens to it")
        schedule = section.get("schedule")
        if schedule is None and isinstance(doc.get("schedule"), dict):
            schedule = doc["schedule"]
        if not isinstance(schedule, dict):
            out.problems.append(":scheduler: has no :schedule: mapping of jobs")
            return {}
        return schedule
    if isinstance(doc.get("schedule"), dict):
        return dict(doc["schedule"])
    return doc


def _timer(value: object) -> tuple[object, dict[Any, Any]]:
    """The schedule part of a rufus value and its options: '1h' or ['1h', {first_in: '5m'}]."""
    if isinstance(value, list) and value:
        options = value[1] if len(value) == 2 and isinstance(value[1], dict) else {}
        return value[0], options
    return value, {}


def _is_entry(entry: object, label: str, out: Converted) -> TypeGuard[dict[Any, Any]]:
    """True when a job entry is a mapping; a problem naming it otherwise."""
    if not isinstance(entry, dict):
        out.problems.append(f"{label}: expected a mapping of fields (cron, class, ...), got "
                            f"{shown(entry)}")
    return isinstance(entry, dict)


def _from_scheduler(name: object, entry: object, out: Converted) -> dict[str, Any] | None:
    label = f"schedule {shown(name)}"
    if not _is_entry(entry, label, out):
        return None
    timers = [t for t in _SCHEDULER_TIMERS if entry.get(t) not in (None, "", [])]
    converted: dict[str, Any] = {}
    if timers:
        kind = timers[0]
        if len(timers) > 1:
            out.warnings.append(f"{label}: uses {kind!r}; {', '.join(timers[1:])} ignored, as "
                                "sidekiq-scheduler does")
        value, options = _timer(entry[kind])
        if kind in ("at", "in"):
            out.warnings.append(
                f"{label}: skipped: {kind!r} is a one-shot timer counted from when the Sidekiq "
                "process starts, and kiqbeat has no start; use cron or every")
            return None
        if options:
            out.warnings.append(
                f"{label}: rufus options {', '.join(map(str, options))} ignored: kiqbeat's "
                "ticks depend only on the clock (intervals count from 1970-01-01 00:00 UTC)")
        if kind == "interval":
            out.warnings.append(f"{label}: 'interval' read as 'every' (an enqueue takes no "
                                "time, so the gaps are the same)")
        converted["cron" if kind == "cron" else "every"] = value
    converted["class"] = entry.get("class") or name
    payload: dict[str, Any] = {}
    for key, value in entry.items():
        if key in _SCHEDULER_TIMERS or key == "class":
            continue
        if key == "rails_env":
            out.warnings.append(f"{label}: rails_env {shown(value)} ignored: kiqbeat schedules "
                                "it in every environment that loads this file")
        elif key in _SCHEDULER_KEYS or key in SCHEDULE_KEYS or key in JOB_OPTIONS:
            converted[key] = value
        elif isinstance(key, str) and did_you_mean(key, _SCHEDULER_KEYS):
            out.problems.append(f"{label}: unknown key {shown(key)}"
                                f"{did_you_mean(key, _SCHEDULER_KEYS)}")
        else:
            payload[key] = value
    if payload:
        out.warnings.append(f"{label}: {', '.join(map(repr, payload))} put into the job hash "
                            "(payload:), as sidekiq-scheduler pushes unknown keys with the job")
        converted.setdefault("payload", {})
        if isinstance(converted["payload"], dict):
            converted["payload"] = {**payload, **converted["payload"]}
    return converted


# ---------------------------------------------------------------------------- sidekiq-cron


def _cron_entries(doc: dict[Any, Any] | list[Any], out: Converted) -> dict[Any, Any]:
    if isinstance(doc, dict):
        return doc
    entries: dict[Any, Any] = {}
    for i, entry in enumerate(doc):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(entry, dict):
            out.problems.append(f"entry {i + 1}: expected a mapping with name, cron and "
                                f"class, got {shown(entry)}")
        elif not isinstance(name, str) or not name:
            out.problems.append(f"entry {i + 1}: missing 'name' (each job in a list needs one)")
        elif name in entries:
            out.problems.append(f"entry {i + 1}: duplicate name {shown(name)}")
        else:
            entries[name] = {k: v for k, v in entry.items() if k != "name"}
    return entries


def _truthy(value: object) -> bool:
    """sidekiq-cron's reading of a flag: true, or a string matching true|t|yes|y|1."""
    return value is True or str(value).lower() in _TRUTHY


def _cron_args(value: object) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return [value]
        except RecursionError:
            raise ConfigError("args is a JSON string nested too deep to read (Sidekiq's "
                              "parser stops at 100 levels)") from None
        return parsed if isinstance(parsed, list) else [parsed]
    return value if isinstance(value, list) else [value]


def _from_cron(name: object, entry: object, out: Converted) -> dict[str, Any] | None:
    label = f"schedule {shown(name)}"
    if not _is_entry(entry, label, out):
        return None
    converted: dict[str, Any] = {}
    active_job = _truthy(entry.get("active_job", False))
    for key, value in entry.items():
        if key in _CRON_DROPPED or key in ("queue_name_prefix", "queue_name_delimiter"):
            continue
        if key == "klass":
            converted.setdefault("class", value)
        elif key == "class":
            converted["class"] = value
        elif key == "args":
            try:
                converted["args"] = _cron_args(value)
            except ConfigError as exc:
                out.problems.append(f"{label} (field 'args'): {exc}")
        elif key == "status":
            if value not in ("enabled", "disabled"):
                out.problems.append(f"{label} (field 'status'): {shown(value)} must be 'enabled' "
                                    "or 'disabled'")
            converted["enabled"] = value != "disabled"
        elif key == "active_job":
            if active_job:
                converted["active_job"] = "legacy"
        elif key == "date_as_argument":
            if _truthy(value):
                converted["include_metadata"] = True
                out.warnings.append(
                    f"{label}: date_as_argument becomes include_metadata: the last argument is "
                    "{'scheduled_at': <tick as float seconds>} instead of a bare float of the "
                    "push time; update the worker's perform to read it")
        elif key == "symbolize_args":
            if _truthy(value):
                out.warnings.append(f"{label}: symbolize_args ignored: JSON arguments reach "
                                    "the worker with string keys")
        elif key == "namespace":
            out.warnings.append(f"{label}: sidekiq-cron namespace {shown(value)} ignored")
        elif key == "message":
            out.problems.append(f"{label} (field 'message'): a raw job message is not "
                                "supported; use class, args, queue and payload")
        else:
            converted[key] = value  # kiqbeat's own keys, and typos for it to report
    prefix = entry.get("queue_name_prefix")
    if prefix:
        if active_job:
            delimiter = entry.get("queue_name_delimiter") or "_"
            converted["queue"] = f"{prefix}{delimiter}{entry.get('queue') or 'default'}"
        else:
            out.warnings.append(f"{label}: queue_name_prefix ignored: it applies to ActiveJob "
                                "jobs only (set active_job: true if the class is one)")
    return converted


# ---------------------------------------------------------------------------- zones


def _warn_local_zones(schedules: dict[str, Any], fmt: str, out: Converted) -> None:
    """Warn once when crons carry no zone: the other tool read them in server-local time."""
    bare = []
    for name, entry in schedules.items():
        expr = entry.get("cron")
        if not isinstance(expr, str) or "tz" in entry:
            continue
        try:
            if parse_cron(expr, "Etc/GMT-14").zone_name == "Etc/GMT-14":
                bare.append(name)
        except ConfigError:
            continue  # reported when the document is validated
    if bare:
        shown = ", ".join(map(repr, bare[:5])) + (", ..." if len(bare) > 5 else "")
        out.warnings.append(
            f"{len(bare)} cron(s) without a zone ({shown}): {fmt} read them in the Sidekiq "
            "server's local time, kiqbeat reads them in UTC; append a zone to the cron (e.g. "
            "'0 9 * * * Europe/Paris') or add tz: if your servers did not run on UTC")
