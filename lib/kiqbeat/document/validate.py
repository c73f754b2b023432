"""The last step of every document: plain values in kiqbeat's form into a validated `Config`.

The value checks come from the field table (`fields`); this module adds what depends on
several fields (cron or every, a zone in the cron string against `tz`, a lookahead no
longer than the window, `payload:` against the job options) and collects every problem of
the document, so a file is fixed in one pass. Every message names the schedule, the field,
the value (cut short) and what would be valid.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar, cast

from kiqbeat.core.cron import Cron, Every, parse_cron, parse_every
from kiqbeat.core.durations import duration_s
from kiqbeat.core.schedule import CatchUp, Config, Schedule, TimestampFormat, Timetable
from kiqbeat.document.fields import (
    BY_NAME,
    JOB_OPTIONS,
    RESERVED_PAYLOAD_KEYS,
    SCHEDULE_KEYS,
    TOP_LEVEL_KEYS,
)
from kiqbeat.errors import ConfigError, did_you_mean, shown

# A window shorter than this is shorter than a minute's trigger period plus its jitter, so a
# trigger arriving a little late would find its tick already outside the window.
MIN_SAFE_WINDOW_S = 120.0
# args and payload together, in JSON values: generous for real jobs, and a stop for YAML
# aliases, which PyYAML builds cheaply as shared references but JSON writes out in full.
MAX_JOB_VALUES = 10_000
_NAME_OK = re.compile(r"[^\x00-\x1f\x7f]+")

T = TypeVar("T")


class _Checker:
    """Collects problems; `field` runs one check and records its failure under a label."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.warnings: list[str] = []

    def field(self, where: str, check: Callable[[], T]) -> T | None:
        try:
            return check()
        except ConfigError as exc:
            self.problems.extend(f"{where}: {p}" for p in exc.problems)
        return None


def validate(doc: Mapping[str, Any], *, source: str = "", problems: list[str] | None = None,
             warnings: list[str] | None = None) -> Config:
    """The Config of a document in kiqbeat's form; ConfigError listing every problem.

    `problems` and `warnings` are earlier steps' (duplicate keys, conversion) to report with
    this step's own.
    """
    out = _Checker()
    out.problems.extend(problems or [])
    out.warnings.extend(warnings or [])
    config = _config(doc, out)
    if config is None or out.problems:
        raise ConfigError(out.problems, source=source)
    return config


def with_window(config: Config, value: object, *, what: str) -> Config:
    """The config with its missed-jobs window replaced, checked as the document's own is."""
    try:
        window_s = BY_NAME["missed_jobs_window"].check(value)
    except ConfigError as exc:
        raise ConfigError([f"{what}: {p}" for p in exc.problems]) from None
    problems = [f"{what}: {window_s:g} s is shorter than the lookahead of schedule "
                f"{s.name!r} ({s.lookahead_s:g} s); the lookahead must be at most the window"
                for s in config.schedules if s.lookahead_s > window_s]
    if problems:
        raise ConfigError(problems)
    warnings = [w for w in config.warnings if not w.startswith("missed_jobs_window is ")]
    if window_s < MIN_SAFE_WINDOW_S:
        warnings.append(_short_window_warning(window_s))
    return replace(config, missed_jobs_window_s=window_s, warnings=tuple(warnings))


def _short_window_warning(window_s: float) -> str:
    return (f"missed_jobs_window is {window_s:g} s, shorter than {MIN_SAFE_WINDOW_S:g} s "
            "(a minute's trigger period plus slack): a late trigger would find its tick "
            "outside the window and count it missed")


def _unknown_top(key: object) -> str:
    hint = did_you_mean(key, TOP_LEVEL_KEYS) if isinstance(key, str) else ""
    listed = " (known keys: " + ", ".join(TOP_LEVEL_KEYS) + ")"
    return f"unknown top-level key {shown(key)}{hint or listed}"


def _config(doc: Mapping[str, Any], out: _Checker) -> Config | None:
    out.problems.extend(_unknown_top(k) for k in doc if k not in TOP_LEVEL_KEYS)
    top: dict[str, Any] = {}
    for name in TOP_LEVEL_KEYS:
        spec = BY_NAME[name]
        value = spec.default
        if name in doc and name != "schedules":
            checked = out.field(f"field {name!r}", partial(spec.check, doc[name]))
            value = spec.default if checked is None else checked
        top[name] = value
    window_s = top["missed_jobs_window"]
    if window_s < MIN_SAFE_WINDOW_S:
        out.warnings.append(_short_window_warning(window_s))
    if top["lookahead"] > window_s:
        out.problems.append("field 'lookahead': "
                            + _longer_than_window(doc["lookahead"], top["lookahead"], window_s))
    ns = top["namespace"]
    if ns and not ns.endswith(":"):
        out.warnings.append(f"namespace {ns!r} is a raw key prefix: queues will be "
                            f"'{ns}queue:NAME'; Exq's default is 'exq:'")
    raw_schedules = doc.get("schedules")
    schedules: list[Schedule] = []
    if raw_schedules is None or raw_schedules == {}:
        out.warnings.append("the document defines no schedules")
    elif not isinstance(raw_schedules, dict):
        out.problems.append(f"field 'schedules': expected a mapping of name to fields, got "
                            f"{type(raw_schedules).__name__} {shown(raw_schedules)}")
    else:
        for name, raw in raw_schedules.items():
            schedule = _schedule(name, raw, top, out)
            if schedule is not None:
                schedules.append(schedule)
    if out.problems:
        return None
    return Config(schedules=tuple(schedules), time_zone=top["time_zone"],
                  missed_jobs_window_s=window_s, namespace=ns,
                  sidekiq_scheduler_ui=top["sidekiq_scheduler_ui"],
                  wait_replicas=top["wait_replicas"], wait_timeout_s=top["wait_timeout"],
                  warnings=tuple(out.warnings))


def _longer_than_window(value: object, lookahead_s: float, window_s: float) -> str:
    return (f"{shown(value)} ({lookahead_s:g} s) is longer than missed_jobs_window "
            f"({window_s:g} s); it must be at most the window")


def _schedule(name: object, raw: object, top: Mapping[str, Any],
              out: _Checker) -> Schedule | None:
    if not isinstance(name, str) or not _NAME_OK.fullmatch(name):
        out.problems.append(f"schedule name {shown(name)}: names must be non-empty strings "
                            "without control characters (quote numbers and dates)")
        return None
    label = f"schedule {shown(name)}"
    if not isinstance(raw, dict):
        out.problems.append(f"{label}: expected a mapping of fields (cron, class, ...), got "
                            f"{shown(raw)}")
        return None
    before = len(out.problems)
    out.problems.extend(
        f"{label}: unknown key {shown(k)}"
        + (did_you_mean(k, SCHEDULE_KEYS) if isinstance(k, str) else "")
        for k in raw if k not in SCHEDULE_KEYS)

    def at(key: str) -> str:
        return f"{label} (field {key!r})"

    # The simple fields, straight from the table; a schedule's value wins over the top's.
    values: dict[str, Any] = {}
    for key in SCHEDULE_KEYS:
        spec = BY_NAME[key]
        if key in raw:
            values[key] = out.field(at(key), partial(spec.check, raw[key]))
        else:
            values[key] = top.get(key, spec.default)
    if "class" not in raw:
        out.problems.append(f"{label}: missing 'class' (the worker class to run, e.g. "
                            "'ReportWorker')")
    tz = values["tz"]
    timetable = _timetable(raw, tz or top["time_zone"], label, at, out)
    if isinstance(timetable, Cron) and tz and timetable.zone_name != tz:
        out.warnings.append(f"{label}: the zone in its cron string ({timetable.zone_name}) "
                            f"wins over tz {tz!r}")
    if isinstance(timetable, Every) and tz:
        out.warnings.append(f"{label}: tz has no effect on 'every', which counts from "
                            "1970-01-01 00:00 UTC")
    lookahead_s = values["lookahead"] or 0.0
    if "lookahead" in raw and lookahead_s > top["missed_jobs_window"]:
        out.problems.append(f"{at('lookahead')}: " + _longer_than_window(
            raw["lookahead"], lookahead_s, top["missed_jobs_window"]))
    args = _args(raw.get("args"))
    budget = [MAX_JOB_VALUES]
    out.field(at("args"), lambda: _json_values(list(args), "args", budget))
    extra = {k: values[k] for k in JOB_OPTIONS if k in raw and values[k] is not None}
    if "payload" in raw:
        payload = out.field(at("payload"), lambda: _payload(raw["payload"], extra, budget))
        extra.update(payload or {})
    if len(out.problems) > before or timetable is None:
        return None
    if timetable.has_seconds and lookahead_s == 0:
        out.warnings.append(
            f"{label}: fires between minute boundaries but has no lookahead, so its ticks are "
            "pushed only when an invocation happens (about once a minute); set lookahead "
            "(e.g. 60s) or use `kiqbeat run`")
    timing = (f"{timetable.expr} ({timetable.zone_name})" if isinstance(timetable, Cron)
              else f"every {str(raw['every']).strip()}")
    return Schedule(
        name=name, timetable=timetable, job_class=values["class"], queue=values["queue"],
        args=args, enabled=values["enabled"], description=values["description"],
        catch_up=cast(CatchUp, values["catch_up"]), include_metadata=values["include_metadata"],
        active_job_wrapper=values["active_job"], extra=extra, lookahead_s=lookahead_s,
        timestamp_format=cast(TimestampFormat, values["timestamp_format"]), timing=timing)


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
            out.problems.append(f"{at('cron')}: {shown(expr)} must be a string such as "
                                "'0 * * * *'")
            return None
        return out.field(at("cron"), lambda: parse_cron(expr, zone_name))
    every = raw["every"]
    if isinstance(every, bool) or not isinstance(every, str | int):
        out.problems.append(f"{at('every')}: {shown(every)} must be a duration such as '15m'")
        return None
    return out.field(at("every"), lambda: parse_every(str(every)))


def _args(value: object) -> tuple[Any, ...]:
    """args as a tuple: a list as is, nothing as (), and a scalar or hash as one argument."""
    if value is None:
        return ()
    if isinstance(value, list):
        return tuple(value)
    return (value,)


def _json_values(value: object, path: str, budget: list[int]) -> None:
    """Raise ConfigError unless `value` is plain JSON (and small): what Sidekiq can carry."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ConfigError(f"args and payload hold more than {MAX_JOB_VALUES:,} values "
                          "(YAML aliases?)")
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{path} is {value!r}, which JSON cannot carry")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _json_values(item, f"{path}[{i}]", budget)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(f"{path} has the key {shown(key)}; keys must be strings "
                                  "(quote it)")
            _json_values(item, f"{path}[{shown(key)}]", budget)
        return
    raise ConfigError(f"{path} is a {type(value).__name__} ({shown(value)}), which JSON "
                      "cannot carry")


def _payload(value: object, options: Mapping[str, Any], budget: list[int]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{shown(value)} must be a mapping of job keys to values")
    bad = [k for k in value if not isinstance(k, str) or k in RESERVED_PAYLOAD_KEYS
           or k.startswith("error_")]
    if bad:
        raise ConfigError(
            f"may not set {', '.join(shown(k) for k in bad)}: kiqbeat sets class, args, jid, "
            "queue, wrapped and the timestamps itself (use the schedule's fields), and only "
            "Sidekiq writes at, retry_count and error_* keys")
    twice = [k for k in value if k in options]
    if twice:
        raise ConfigError(f"sets {', '.join(repr(k) for k in twice)}, also given as a "
                          "schedule field; keep one")
    _json_values(value, "payload", budget)
    return cast(dict[str, Any], value)


def setting_duration_s(value: object, *, what: str) -> float:
    """A duration from outside a document (a flag, an environment variable), named `what`."""
    try:
        return duration_s(value)
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None
