"""sidekiq-scheduler and sidekiq-cron entries, converted to kiqbeat's document form.

sidekiq-scheduler (`:scheduler: :schedule:`, the older top-level `:schedule:`, or a bare
hash loaded with `Sidekiq.schedule = YAML.load_file(...)`):
  - the timer is the first of cron / every / at / in / interval, as sidekiq-scheduler picks;
    rufus options (`first_in`, ...) are dropped: kiqbeat's intervals count from the epoch;
  - `at` and `in` are one-shot timers counted from the Sidekiq process's start; kiqbeat has
    no start, so those entries are skipped, with a warning; so is an entry with no timer
    (sidekiq-scheduler loads it and never runs it), disabled or not;
  - a cron is read by rufus-scheduler (fugit's cron reader, not its natural-language one):
    `every day at 3am` is refused there and here, saying what fugit would make of it;
  - a missing `class` is the schedule's name (sidekiq-scheduler's README);
  - `keyword_argument: true` with a hash of `args` is read only when sidekiq-scheduler
    enqueues through ActiveJob, so the job is pushed in the ActiveJob envelope with the
    hash as keyword arguments;
  - `every` counted from the Sidekiq process's start; kiqbeat's from the epoch: one warning;
  - a job without `queue` went to its class's `sidekiq_options` queue (both gems merge the
    class's options), which kiqbeat cannot read: one warning per file, as for GoodJob;
  - keys it does not know are pushed into the job hash by sidekiq-scheduler, so they go into
    `payload:` (a key close to a known one gets a did-you-mean hint in the warning); a
    per-job zone key is not read by it, so it is ignored unless `honour_tz` is set.

sidekiq-cron (hash form or list form with `name:`; sidekiq-cron/sidekiq-cron
`lib/sidekiq/cron/job.rb`, `Job#initialize`):
  - `klass` is `class`; `status: disabled` is `enabled: false`;
  - `cron` may be natural language, which sidekiq-cron hands to fugit (`parse_cronish`):
    translated to fugit's cron, with a warning;
  - string `args` are JSON (falling back to one string argument), a hash is one argument;
  - `active_job: true` uses the wrapper sidekiq-cron pushes,
    `ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper` (`active_job: legacy`), and
    `queue_name_prefix`/`queue_name_delimiter` prefix the queue as ActiveJob does;
  - with `active_job`, `symbolize_args` marks each hash argument as ActiveJob marks Symbol
    keys (`_aj_symbol_keys`), as sidekiq-cron symbolizes them;
  - `date_as_argument` becomes `include_metadata`: the last argument is then
    `{"scheduled_at": <tick, float seconds>}` instead of a bare float of the push time;
  - kiqbeat's own scheduling keys (`catch_up`, `dst`, `jitter`, ... : `KIQBEAT_OWN_KEYS`),
    which sidekiq-cron ignores, are kept and listed once in a warning, so that a team can
    write `catch_up: latest` or `dst: fugit` into the file it moves;
  - any other key (`desc`, `output`, `enabled`, `tz`, ...) is ignored, as sidekiq-cron
    ignores it, and listed once in a warning;
  - an entry with neither cron nor class (a holder of YAML anchors) is skipped with a
    warning: sidekiq-cron fails to save it and loads the others.
"""

from __future__ import annotations

import json
from typing import Any, TypeGuard

from kiqbeat.document.fields import JOB_OPTIONS, SCHEDULE_KEYS
from kiqbeat.document.imported import KIQBEAT_OWN_KEYS, ZONE_KEYS, Converted
from kiqbeat.document.rails import active_job_keywords, symbolized
from kiqbeat.errors import ConfigError, did_you_mean, shown

_SCHEDULER_TIMERS = ("cron", "every", "at", "in", "interval")
_SCHEDULER_KEYS = (*_SCHEDULER_TIMERS, "class", "queue", "args", "description", "enabled",
                   "include_metadata", "rails_env")
CRON_KEYS = ("name", "cron", "description", "klass", "class", "status", "last_enqueue_time",
             "symbolize_args", "args", "message", "queue", "queue_name_prefix",
             "queue_name_delimiter", "active_job", "date_as_argument", "source", "retry",
             "namespace")
_CRON_DROPPED = ("source", "last_enqueue_time", "fetch_missing_args")
_TRUTHY = ("true", "t", "yes", "y", "1")


# ---------------------------------------------------------------------------- sidekiq-scheduler


def scheduler_entries(doc: dict[Any, Any], out: Converted) -> dict[Any, Any]:
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


def is_entry(entry: object, label: str, out: Converted) -> TypeGuard[dict[Any, Any]]:
    """True when a job entry is a mapping; a problem naming it otherwise."""
    if not isinstance(entry, dict):
        out.problems.append(f"{label}: expected a mapping of fields (cron, class, ...), got "
                            f"{shown(entry)}")
    return isinstance(entry, dict)


def from_scheduler(name: object, entry: object, out: Converted) -> dict[str, Any] | None:
    label = f"schedule {shown(name)}"
    if not is_entry(entry, label, out):
        return None
    timers = [t for t in _SCHEDULER_TIMERS if entry.get(t) not in (None, "", [])]
    converted: dict[str, Any] = {}
    if not timers:
        disabled = " and is disabled" if entry.get("enabled") is False else ""
        out.warnings.append(f"{label}: skipped: it has no timer (cron, every, ...){disabled}, "
                            "so sidekiq-scheduler never ran it either")
        return None
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
    if kind == "cron":  # rufus-scheduler reads it with Fugit::Cron.parse
        value = out.timer(label, value, translate=False)
        if value is None:
            return None
    converted["cron" if kind == "cron" else "every"] = value
    converted["class"] = entry.get("class") or name
    payload: dict[str, Any] = {}
    for key, value in entry.items():
        if key in _SCHEDULER_TIMERS or key == "class":
            continue
        if key == "keyword_argument":
            continue  # read below, once args are
        if key in ZONE_KEYS:
            out.zone_key(label, key, value, converted)
        elif key == "rails_env":
            out.warnings.append(f"{label}: rails_env {shown(value)} ignored: kiqbeat schedules "
                                "it in every environment that loads this file")
        elif key in _SCHEDULER_KEYS or key in SCHEDULE_KEYS or key in JOB_OPTIONS:
            converted[key] = value
            if key in KIQBEAT_OWN_KEYS:
                out.keep(name, key)
        else:
            payload[key] = value
    if "keyword_argument" in entry:
        _keyword_argument(label, entry, converted, out)
    if payload:
        keys = ", ".join(shown(k) + (did_you_mean(k, _SCHEDULER_KEYS) if isinstance(k, str)
                                     else "") for k in payload)
        out.warnings.append(f"{label}: {keys} put into the job hash (payload:), as "
                            "sidekiq-scheduler pushes unknown keys with the job")
        converted.setdefault("payload", {})
        if isinstance(converted["payload"], dict):
            converted["payload"] = {**payload, **converted["payload"]}
    return converted


def _keyword_argument(label: str, entry: dict[Any, Any], converted: dict[str, Any],
                      out: Converted) -> None:
    """`keyword_argument: true`: sidekiq-scheduler reads it only when it enqueues through
    ActiveJob (`initialize_active_job`: `klass.new(**args)` for a hash of args), so the class
    is an ActiveJob class and the hash its keyword arguments."""
    args = converted.get("args")
    if not _truthy(entry.get("keyword_argument")):
        return
    if not isinstance(args, dict):
        out.warnings.append(f"{label}: keyword_argument ignored: args is not a hash, so "
                            "sidekiq-scheduler passed the arguments as they are")
        return
    converted["active_job"] = True
    converted["args"] = [active_job_keywords(args)]
    out.warnings.append(
        f"{label}: keyword_argument: true with a hash of args is read only for ActiveJob "
        f"classes, so {shown(converted.get('class'))} is one: kiqbeat pushes it in Sidekiq's "
        "ActiveJob envelope (active_job: true), the hash as keyword arguments, as "
        "sidekiq-scheduler enqueued it through ActiveJob")


def warn_intervals(schedules: dict[str, Any], out: Converted) -> None:
    """One warning for the `every` schedules: rufus counted them from the process's start."""
    names = [n for n, s in schedules.items() if isinstance(s, dict) and "every" in s]
    if names:
        listed = ", ".join(map(shown, names[:5])) + (", ..." if len(names) > 5 else "")
        out.warnings.append(
            f"{len(names)} 'every' schedule(s) ({listed}): sidekiq-scheduler (rufus) counted "
            "each interval from when the Sidekiq process started, so the times moved at each "
            "restart; kiqbeat counts from 1970-01-01 00:00 UTC (every: 1h fires at each full "
            "hour, every: 1w on Thursdays at 00:00 UTC). For a fixed time, write a cron")


def unqueued(schedules: dict[str, Any]) -> list[str]:
    """The schedules without a queue, which the tool took from their class."""
    return [str(n) for n, s in schedules.items() if isinstance(s, dict) and "queue" not in s]


# The queue a Sidekiq class or an ActiveJob class declares.
CLASS_QUEUE = "their class's queue (sidekiq_options queue:, or queue_as for ActiveJob classes)"


# ---------------------------------------------------------------------------- sidekiq-cron


def cron_entries(doc: dict[Any, Any] | list[Any], out: Converted) -> dict[Any, Any]:
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


def stored_cron_job(fields: dict[str, Any]) -> dict[str, Any]:
    """A job hash as sidekiq-cron stores it in Redis (`cron_job:NAME`: every value a string,
    the queue and Sidekiq options inside the JSON `message`) as an entry of a sidekiq-cron
    file, which `from_cron` reads: `message`'s queue and retry become the entry's (its other
    keys are left out), and the bookkeeping fields and empty strings are dropped."""
    entry = {k: v for k, v in fields.items()
             if k not in ("message", "last_enqueue_time") and v != ""}
    message = fields.get("message")
    try:
        parsed = json.loads(message) if isinstance(message, str) else message
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict):
        for key in ("queue", "retry"):
            if key not in entry and parsed.get(key) is not None:
                entry[key] = parsed[key]
    return entry


def from_cron(name: object, entry: object, out: Converted) -> dict[str, Any] | None:
    label = f"schedule {shown(name)}"
    if not is_entry(entry, label, out):
        return None
    if not any(entry.get(k) not in (None, "") for k in ("cron", "class", "klass")):
        # sidekiq-cron's load_from_hash saves each valid job and skips this one (its
        # errors are returned, and the schedule loader drops them): often a holder of
        # YAML anchors (`x-defaults: &defaults`).
        out.warnings.append(f"{label}: skipped: it has no cron and no class, so sidekiq-cron "
                            "could not save it and loaded the other jobs (a holder of YAML "
                            "anchors?)")
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
            if _truthy(value) and not active_job:  # sidekiq-cron ignores it too, and says so
                out.warnings.append(f"{label}: symbolize_args ignored: JSON arguments reach "
                                    "the worker with string keys")
        elif key == "namespace":
            out.warnings.append(f"{label}: sidekiq-cron namespace {shown(value)} ignored")
        elif key == "message":
            out.problems.append(f"{label} (field 'message'): a raw job message is not "
                                "supported; use class, args, queue and payload")
        elif key in ZONE_KEYS:
            out.zone_key(label, key, value, converted)
        elif key in ("cron", "queue", "description", "retry"):
            converted[key] = out.timer(label, value) if key == "cron" else value
            if converted[key] is None and key == "cron":
                return None
        elif key in KIQBEAT_OWN_KEYS:
            converted[key] = value
            out.keep(name, key)
        else:
            out.ignore(name, key)  # sidekiq-cron reads only its own keys
    if active_job and _truthy(entry.get("symbolize_args")) and converted.get("args"):
        # sidekiq-cron symbolizes each hash argument (shallow), and ActiveJob then writes
        # them with `_aj_symbol_keys`, so perform gets Symbol keys.
        converted["args"] = symbolized(converted["args"], deep=False)
    prefix = entry.get("queue_name_prefix")
    if prefix:
        if active_job:
            delimiter = entry.get("queue_name_delimiter") or "_"
            converted["queue"] = f"{prefix}{delimiter}{entry.get('queue') or 'default'}"
        else:
            out.warnings.append(f"{label}: queue_name_prefix ignored: it applies to ActiveJob "
                                "jobs only (set active_job: true if the class is one)")
    return converted
