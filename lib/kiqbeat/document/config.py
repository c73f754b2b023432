"""The schedule document (DESIGN §5) into a validated `Config`, reporting every problem at once.

A document is kiqbeat's own, or a sidekiq-scheduler / sidekiq-cron file that `formats`
converts to kiqbeat's form first; the same validation then runs on both. Text is parsed
safely (no object tags, a size limit, duplicate keys refused) and every message names the
schedule, the field, the value and what would be valid.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml

from kiqbeat.core.cron import Cron, Every, parse_cron, parse_every, zone
from kiqbeat.core.schedule import CatchUp, Config, Schedule, TimestampFormat, Timetable
from kiqbeat.document import formats
from kiqbeat.errors import ConfigError, did_you_mean

MAX_DOCUMENT_BYTES = 1024 * 1024
# A window shorter than this is shorter than a minute's trigger period plus its jitter, so a
# trigger arriving a little late would find its tick already outside the window.
MIN_SAFE_WINDOW_S = 120.0
DEFAULT_WINDOW_S = 3600.0
# args and payload together, in JSON values: generous for real jobs, and a stop for YAML
# alias bombs, which PyYAML builds cheaply as shared references but JSON writes out in full.
MAX_JOB_VALUES = 10_000
ACTIVE_JOB_WRAPPER = "Sidekiq::ActiveJob::Wrapper"
LEGACY_ACTIVE_JOB_WRAPPER = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"

TOP_LEVEL_KEYS = ("time_zone", "missed_jobs_window", "namespace", "lookahead",
                  "timestamp_format", "sidekiq_scheduler_ui", "wait_replicas", "wait_timeout",
                  "schedules")
# Sidekiq's own job options that live in the job hash (Sidekiq wiki, "Advanced Options").
# Client-side options (`pool`) and middleware options (Enterprise `unique_for`, Pro
# `expires_in`) do nothing when kiqbeat writes the hash; `payload:` still allows any key.
JOB_OPTIONS = ("retry", "retry_for", "retry_queue", "backtrace", "dead", "tags")
SCHEDULE_KEYS = ("cron", "every", "class", "queue", "args", "tz", "enabled", "description",
                 "catch_up", "include_metadata", "active_job", "lookahead", "timestamp_format",
                 "payload", *JOB_OPTIONS)
# Keys kiqbeat sets itself, Sidekiq's scheduling key, and the retry bookkeeping only Sidekiq
# may write (a job carrying them looks like a failed one to the retry set and the Web UI).
RESERVED_PAYLOAD_KEYS = frozenset({
    "class", "args", "jid", "queue", "created_at", "enqueued_at", "wrapped", "at",
    "retry_count", "retried_at", "failed_at", "error_message", "error_class",
    "error_backtrace",
})
_CATCH_UP = ("all", "latest", "none")
_FORMATS = ("s", "ms")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_NAME_OK = re.compile(r"[^\x00-\x1f\x7f]+")
_WORD_OK = re.compile(r"\S+")


T = TypeVar("T")


class _Bad(Exception):
    """One invalid value: the message says what would be valid."""


# ---------------------------------------------------------------------------- loading


class _Loader(yaml.SafeLoader):
    """SafeLoader that records duplicate keys, reads `:sym:` keys as `sym`, keeps dates as text."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        keep = []
        for pair in node.value:
            key_node = pair[0]
            if key_node.tag != "tag:yaml.org,2002:merge":  # `<<:` may be overridden
                key = _strip_symbol(self.construct_object(key_node, deep=True))
                line = key_node.start_mark.line + 1
                try:
                    if key in seen:
                        self.duplicates.append(
                            f"line {line}: duplicate key {key!r} (first at line {seen[key]})")
                        continue  # the first one is kept and validated
                    seen[key] = line
                except TypeError:  # an unhashable key; the constructor reports it below
                    pass
            keep.append(pair)
        node.value = keep
        mapping = super().construct_mapping(node, deep=deep)
        return {_strip_symbol(k): v for k, v in mapping.items()}


# Unquoted dates stay strings, as written: a `date` in args would not survive JSON anyway.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _strip_symbol(key: object) -> object:
    """Ruby symbol keys (`:schedule:`) are plain strings in YAML; read them without the ':'."""
    return key[1:] if isinstance(key, str) and key.startswith(":") else key


def _decode(text: str, source: str) -> tuple[object, list[str]]:
    """The decoded document and any duplicate-key problems; ConfigError when it cannot parse."""
    stripped = text.lstrip()
    if source.endswith(".json") or stripped.startswith(("{", "[")):
        duplicates: list[str] = []

        def pairs(items: list[tuple[str, Any]]) -> dict[object, Any]:
            out: dict[object, Any] = {}
            for key, value in items:
                key2 = _strip_symbol(key)
                if key2 in out:
                    duplicates.append(f"duplicate key {key2!r}")
                out[key2] = value
            return out

        try:
            return json.loads(text, object_pairs_hook=pairs), duplicates
        except json.JSONDecodeError as exc:
            if source.endswith(".json"):
                raise ConfigError(f"invalid JSON at line {exc.lineno}, column {exc.colno}: "
                                  f"{exc.msg}", source=source) from exc
            # Not JSON after all: flow-style YAML such as `[{name: a, cron: ...}]`.
    if "<%" in text:
        raise ConfigError("the document contains ERB tags (<% %>), which kiqbeat does not "
                          "evaluate; render it to plain YAML first", source=source)
    loader = None
    try:
        loader = _Loader(text)  # its reader refuses non-printable characters at once
        return loader.get_single_data(), loader.duplicates
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = "; ".join(p for p in (exc.context, exc.problem) if p)
        raise ConfigError(f"invalid YAML{where}: {what}", source=source) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=source) from exc
    finally:
        if loader is not None:
            loader.dispose()


def load_config_text(text: str, *, source: str = "") -> Config:
    """The validated Config of a YAML or JSON document (any supported format)."""
    size = len(text) if len(text) * 4 <= MAX_DOCUMENT_BYTES else len(text.encode())
    if size > MAX_DOCUMENT_BYTES:
        raise ConfigError(f"the document is {size:,} bytes; the limit is "
                          f"{MAX_DOCUMENT_BYTES:,} bytes (1 MiB)", source=source)
    doc, duplicates = _decode(text, source)
    return _validate(doc, source, duplicates)


def load_config_file(path: str | Path) -> Config:
    """The validated Config of a schedule file."""
    source = str(path)
    try:
        size = Path(path).stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise ConfigError(f"the file is {size:,} bytes; the limit is "
                              f"{MAX_DOCUMENT_BYTES:,} bytes (1 MiB)", source=source)
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the file: {exc.strerror or exc}", source=source) from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})", source=source) from exc
    return load_config_text(text, source=source)


def parse_config(doc: object, *, source: str = "") -> Config:
    """The validated Config of an already decoded document (any supported format)."""
    return _validate(doc, source, [])


# ---------------------------------------------------------------------------- values


def duration_s(value: object, *, what: str) -> float:
    """`parse_duration_s` for a value from outside a document; ConfigError names `what`."""
    try:
        return parse_duration_s(value)
    except _Bad as exc:
        raise ConfigError(f"{what}: {exc}") from None


def with_window(config: Config, value: object, *, what: str) -> Config:
    """The config with its missed-jobs window replaced, checked as the document's own is."""
    try:
        window_s = _window_s(value)
    except _Bad as exc:
        raise ConfigError(f"{what}: {exc}") from None
    problems = [f"{what}: {window_s:g} s is shorter than the lookahead of schedule "
                f"{s.name!r} ({s.lookahead_s:g} s); the lookahead must be at most the window"
                for s in config.schedules if s.lookahead_s > window_s]
    if problems:
        raise ConfigError(problems)
    warnings = [w for w in config.warnings if not w.startswith("missed_jobs_window is ")]
    if window_s < MIN_SAFE_WINDOW_S:
        warnings.append(_short_window_warning(window_s))
    return replace(config, missed_jobs_window_s=window_s, warnings=tuple(warnings))


def parse_duration_s(value: object) -> float:
    """Seconds from 90, '90s', '15m', '1h30m', '2d' or '90'; raises _Bad with a hint."""
    hint = "write e.g. '90s', '15m', '1h30m' or a number of seconds"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _Bad(f"{value!r} is not a duration; {hint}")
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        elif text and _DURATION_PART.sub("", text) == "":
            seconds = sum(float(n) * _UNIT_S[u] for n, u in _DURATION_PART.findall(text))
        else:
            raise _Bad(f"{value!r} is not a duration; {hint}")
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise _Bad(f"{value!r} must be a finite, non-negative duration")
    return seconds


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"{value!r} must be true or false")
    return value


def _word(value: object, example: str) -> str:
    if not isinstance(value, str) or not _WORD_OK.fullmatch(value):
        raise _Bad(f"{value!r} must be a non-empty string without spaces, e.g. {example!r}")
    return value


def _choice(value: object, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        raise _Bad(f"{value!r} is not one of {', '.join(choices)}{hint}")
    return value


def _count_or_bool(value: object) -> bool | int:
    if isinstance(value, bool) or (isinstance(value, int) and value >= 0):
        return value
    raise _Bad(f"{value!r} must be true, false or a whole number of at least 0")


def _json_values(value: object, path: str, budget: list[int]) -> None:
    """Raise _Bad unless `value` is plain JSON (and small): what Sidekiq can carry."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _Bad(f"args and payload hold more than {MAX_JOB_VALUES:,} values (YAML aliases?)")
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Bad(f"{path} is {value!r}, which JSON cannot carry")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _json_values(item, f"{path}[{i}]", budget)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Bad(f"{path} has the key {key!r}; keys must be strings (quote it)")
            _json_values(item, f"{path}[{key!r}]", budget)
        return
    raise _Bad(f"{path} is a {type(value).__name__} ({value!r}), which JSON cannot carry")


# ---------------------------------------------------------------------------- validation


class _Checker:
    """Collects problems; `field` runs one check and records its failure under a label."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.warnings: list[str] = []

    def field(self, where: str, check: Callable[[], T]) -> T | None:
        try:
            return check()
        except _Bad as exc:
            self.problems.append(f"{where}: {exc}")
        except ConfigError as exc:
            self.problems.extend(f"{where}: {p}" for p in exc.problems)
        return None


def _validate(doc: object, source: str, duplicates: list[str]) -> Config:
    if doc is None:
        raise ConfigError("the document is empty; expected a mapping with 'schedules:'",
                          source=source)
    converted = formats.convert(doc)
    out = _Checker()
    out.problems.extend(duplicates)
    out.problems.extend(converted.problems)
    out.warnings.extend(converted.warnings)
    config = _config(converted.document, out)
    if config is None or out.problems:
        raise ConfigError(out.problems, source=source)
    return config


def _config(doc: Mapping[str, Any], out: _Checker) -> Config | None:
    for key in doc:
        if key not in TOP_LEVEL_KEYS:
            shown = key if isinstance(key, str) else str(key)
            hint = did_you_mean(shown, TOP_LEVEL_KEYS) or (
                f" (known keys: {', '.join(TOP_LEVEL_KEYS)})")
            out.problems.append(f"unknown top-level key {key!r}{hint}")
    time_zone = "UTC"
    if "time_zone" in doc:
        time_zone = out.field("field 'time_zone'", lambda: zone(_word(doc["time_zone"],
                                                                      "Europe/Paris")).key) or "UTC"
    window_s = DEFAULT_WINDOW_S
    if "missed_jobs_window" in doc:
        window_s = out.field("field 'missed_jobs_window'",
                             lambda: _window_s(doc["missed_jobs_window"])) or DEFAULT_WINDOW_S
        if window_s < MIN_SAFE_WINDOW_S:
            out.warnings.append(_short_window_warning(window_s))
    lookahead_s = 0.0
    if "lookahead" in doc:
        lookahead_s = out.field("field 'lookahead'",
                                lambda: _lookahead_s(doc["lookahead"], window_s)) or 0.0
    fmt: TimestampFormat = "s"
    if "timestamp_format" in doc:
        fmt = cast(TimestampFormat, out.field(
            "field 'timestamp_format'", lambda: _choice(doc["timestamp_format"], _FORMATS)) or "s")
    namespace = ""
    if "namespace" in doc:
        namespace = out.field("field 'namespace'", lambda: _namespace(doc["namespace"])) or ""
        if namespace and not namespace.endswith(":"):
            out.warnings.append(f"namespace {namespace!r} is a raw key prefix: queues will be "
                                f"'{namespace}queue:NAME'; Exq's default is 'exq:'")
    ui = False
    if "sidekiq_scheduler_ui" in doc:
        ui = bool(out.field("field 'sidekiq_scheduler_ui'",
                            lambda: _bool(doc["sidekiq_scheduler_ui"])))
    wait_replicas = 0
    if "wait_replicas" in doc:
        wait_replicas = out.field("field 'wait_replicas'",
                                  lambda: _replicas(doc["wait_replicas"])) or 0
    wait_timeout_s = 1.0
    if "wait_timeout" in doc:
        wait_timeout_s = out.field("field 'wait_timeout'",
                                   lambda: _wait_timeout_s(doc["wait_timeout"])) or 1.0
    raw_schedules = doc.get("schedules")
    schedules: list[Schedule] = []
    if raw_schedules is None:
        out.warnings.append("the document defines no schedules")
    elif not isinstance(raw_schedules, dict):
        out.problems.append(f"field 'schedules': expected a mapping of name to fields, got "
                            f"{type(raw_schedules).__name__} {_short(raw_schedules)}")
    else:
        if not raw_schedules:
            out.warnings.append("the document defines no schedules")
        defaults = _Defaults(time_zone, window_s, lookahead_s, fmt)
        for name, raw in raw_schedules.items():
            schedule = _schedule(name, raw, defaults, out)
            if schedule is not None:
                schedules.append(schedule)
    if out.problems:
        return None
    return Config(schedules=tuple(schedules), time_zone=time_zone, missed_jobs_window_s=window_s,
                  namespace=namespace, sidekiq_scheduler_ui=ui, wait_replicas=wait_replicas,
                  wait_timeout_s=wait_timeout_s, warnings=tuple(out.warnings))


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _short_window_warning(window_s: float) -> str:
    return (f"missed_jobs_window is {window_s:g} s, shorter than {MIN_SAFE_WINDOW_S:g} s "
            "(a minute's trigger period plus slack): a late trigger would find its tick "
            "outside the window and count it missed")


def _window_s(value: object) -> float:
    seconds = parse_duration_s(value)
    if seconds <= 0:
        raise _Bad(f"{value!r} must be longer than 0")
    return seconds


def _replicas(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 16:
        raise _Bad(f"{value!r} must be a whole number of replicas from 0 to 16")
    return value


def _wait_timeout_s(value: object) -> float:
    seconds = parse_duration_s(value)
    if not 0 < seconds <= 10:
        raise _Bad(f"{value!r} must be longer than 0 and at most 10s (each push call waits "
                   "this long at most, inside the invocation's deadline)")
    return seconds


def _lookahead_s(value: object, window_s: float) -> float:
    seconds = parse_duration_s(value)
    if seconds > window_s:
        raise _Bad(f"{value!r} ({seconds:g} s) is longer than missed_jobs_window "
                   f"({window_s:g} s); it must be at most the window")
    return seconds


def _namespace(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or not (value == "" or _WORD_OK.fullmatch(value)):
        raise _Bad(f"{value!r} must be a string without spaces, e.g. '' or 'exq:'")
    return value


class _Defaults:
    def __init__(self, zone_name: str, window_s: float, lookahead_s: float,
                 fmt: TimestampFormat) -> None:
        self.zone_name = zone_name
        self.window_s = window_s
        self.lookahead_s = lookahead_s
        self.fmt = fmt


def _schedule(name: object, raw: object, d: _Defaults, out: _Checker) -> Schedule | None:
    if not isinstance(name, str) or not _NAME_OK.fullmatch(name):
        out.problems.append(f"schedule name {name!r}: names must be non-empty strings without "
                            "control characters (quote numbers and dates)")
        return None
    label = f"schedule {name!r}"
    if not isinstance(raw, dict):
        out.problems.append(f"{label}: expected a mapping of fields (cron, class, ...), got "
                            f"{_short(raw)}")
        return None
    before = len(out.problems)
    for key in raw:
        if key not in SCHEDULE_KEYS:
            hint = did_you_mean(key, SCHEDULE_KEYS) if isinstance(key, str) else ""
            out.problems.append(f"{label}: unknown key {key!r}{hint}")

    def at(key: str) -> str:
        return f"{label} (field {key!r})"

    tz = None
    if "tz" in raw:
        tz = out.field(at("tz"), lambda: zone(_word(raw["tz"], "Europe/Paris")).key)
    timetable = _timetable(raw, tz or d.zone_name, label, at, out)
    if isinstance(timetable, Cron) and tz and timetable.zone_name != tz:
        out.warnings.append(f"{label}: the zone in its cron string ({timetable.zone_name}) "
                            f"wins over tz {tz!r}")
    if isinstance(timetable, Every) and tz:
        out.warnings.append(f"{label}: tz has no effect on 'every', which counts from "
                            "1970-01-01 00:00 UTC")
    job_class = None
    if "class" not in raw:
        out.problems.append(f"{label}: missing 'class' (the worker class to run, e.g. "
                            "'ReportWorker')")
    else:
        job_class = out.field(at("class"), lambda: _word(raw["class"], "ReportWorker"))
    queue = "default"
    if "queue" in raw:
        queue = out.field(at("queue"), lambda: _word(raw["queue"], "default")) or "default"
    args = _args(raw.get("args"))
    budget = [MAX_JOB_VALUES]
    out.field(at("args"), lambda: _json_values(list(args), "args", budget))
    enabled = out.field(at("enabled"), lambda: _bool(raw.get("enabled", True)))
    description = out.field(at("description"), lambda: _text(raw.get("description")))
    catch_up = out.field(at("catch_up"), lambda: _choice(raw.get("catch_up", "all"), _CATCH_UP))
    metadata = out.field(at("include_metadata"), lambda: _bool(raw.get("include_metadata", False)))
    wrapper = out.field(at("active_job"), lambda: _wrapper(raw.get("active_job", False)))
    lookahead_s = d.lookahead_s
    if "lookahead" in raw:
        lookahead_s = out.field(at("lookahead"),
                                lambda: _lookahead_s(raw["lookahead"], d.window_s)) or 0.0
    fmt = out.field(at("timestamp_format"),
                    lambda: _choice(raw.get("timestamp_format", d.fmt), _FORMATS))
    extra: dict[str, Any] = {}
    for option, check in _OPTION_CHECKS.items():
        if option in raw:
            value = out.field(at(option), _bind(check, raw[option]))
            if value is not None:
                extra[option] = value
    if "payload" in raw:
        payload = out.field(at("payload"), lambda: _payload(raw["payload"], extra, budget))
        extra.update(payload or {})
    if len(out.problems) > before or timetable is None or job_class is None:
        return None
    if timetable.has_seconds and lookahead_s == 0:
        out.warnings.append(
            f"{label}: fires between minute boundaries but has no lookahead, so its ticks are "
            "pushed only when an invocation happens (about once a minute); set lookahead "
            "(e.g. 60s) or use `kiqbeat run`")
    timing = (f"{timetable.expr} ({timetable.zone_name})" if isinstance(timetable, Cron)
              else f"every {str(raw['every']).strip()}")
    return Schedule(
        name=name, timetable=timetable, job_class=job_class, queue=queue, args=args,
        enabled=bool(enabled), description=description or "",
        catch_up=cast(CatchUp, catch_up), include_metadata=bool(metadata),
        active_job_wrapper=wrapper or "", extra=extra, lookahead_s=lookahead_s,
        timestamp_format=cast(TimestampFormat, fmt), timing=timing)


def _timetable(raw: dict[Any, Any], zone_name: str, label: str,
               at: Callable[[str], str], out: _Checker) -> Timetable | None:
    has_cron, has_every = "cron" in raw, "every" in raw
    if has_cron and has_every:
        out.problems.append(f"{label}: has both 'cron' and 'every'; keep one")
        return None
    if not (has_cron or has_every):
        out.problems.append(f"{label}: needs 'cron' (e.g. '0 * * * *') or 'every' (e.g. '15m')")
        return None
    if has_cron:
        expr = raw["cron"]
        if not isinstance(expr, str):
            out.problems.append(f"{at('cron')}: {expr!r} must be a string such as '0 * * * *'")
            return None
        return out.field(at("cron"), lambda: parse_cron(expr, zone_name))
    every = raw["every"]
    if isinstance(every, bool) or not isinstance(every, str | int):
        out.problems.append(f"{at('every')}: {every!r} must be a duration such as '15m'")
        return None
    return out.field(at("every"), lambda: parse_every(str(every)))


def _bind(check: Callable[[object], object], value: object) -> Callable[[], object]:
    return lambda: check(value)


def _args(value: object) -> tuple[Any, ...]:
    """args as a tuple: a list as is, nothing as (), and a scalar or hash as one argument."""
    if value is None:
        return ()
    if isinstance(value, list):
        return tuple(value)
    return (value,)


def _text(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Bad(f"{_short(value)} must be a string")
    return value


def _wrapper(value: object) -> str:
    if value is True:
        return ACTIVE_JOB_WRAPPER
    if value is False or value is None:
        return ""
    if value == "legacy":
        return LEGACY_ACTIVE_JOB_WRAPPER
    raise _Bad(f"{value!r} must be true ({ACTIVE_JOB_WRAPPER}), 'legacy' "
               f"({LEGACY_ACTIVE_JOB_WRAPPER}) or false")


def _retry_for(value: object) -> int:
    seconds = parse_duration_s(value)
    if seconds < 1:
        raise _Bad(f"{value!r} must be at least 1 second")
    return round(seconds)


def _tags(value: object) -> list[str]:
    tags = [value] if isinstance(value, str) else value
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise _Bad(f"{_short(value)} must be a list of non-empty strings")
    return list(tags)


_OPTION_CHECKS: dict[str, Callable[[object], object]] = {
    "retry": _count_or_bool,
    "retry_for": _retry_for,
    "retry_queue": lambda v: _word(v, "low"),
    "backtrace": _count_or_bool,
    "dead": _bool,
    "tags": _tags,
}


def _payload(value: object, options: Mapping[str, Any], budget: list[int]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"{_short(value)} must be a mapping of job keys to values")
    bad = [k for k in value if not isinstance(k, str) or k in RESERVED_PAYLOAD_KEYS
           or k.startswith("error_")]
    if bad:
        raise _Bad(f"may not set {', '.join(repr(k) for k in bad)}: kiqbeat sets class, args, "
                   "jid, queue, wrapped and the timestamps itself (use the schedule's fields), "
                   "and only Sidekiq writes at, retry_count and error_* keys")
    twice = [k for k in value if k in options]
    if twice:
        raise _Bad(f"sets {', '.join(repr(k) for k in twice)}, also given as a schedule field; "
                   "keep one")
    _json_values(value, "payload", budget)
    return cast(dict[str, Any], value)

