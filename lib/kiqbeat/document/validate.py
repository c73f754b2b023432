"""The last step of every document: plain values in kiqbeat's form into a validated `Config`.

The value checks come from the field table (`fields`); this module adds what depends on
several fields (cron or every, a zone in the cron string against `tz`, a lookahead no
longer than the window, `payload:` against the job options) and collects every problem of
the document, so a file is fixed in one pass. Every message names the schedule, the field,
the value (cut short) and what would be valid.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar, cast

from kiqbeat.core import json_text
from kiqbeat.core.cron import Cron, Every, parse_cron, parse_every
from kiqbeat.core.dst import CRON, DstPolicy
from kiqbeat.core.lifecycle import OneShot
from kiqbeat.core.limits import MAX_CHECKED_TEMPLATES, MAX_DEFINITION_BYTES
from kiqbeat.core.schedule import (
    CatchUp,
    Config,
    Expectations,
    Overlap,
    Schedule,
    TimestampFormat,
    Timetable,
)
from kiqbeat.core.zones import zone_key, zone_label
from kiqbeat.document.fields import (
    BY_NAME,
    JOB_OPTIONS,
    MAX_NAME_CHARS,
    SCHEDULE_KEYS,
    TOP_LEVEL_KEYS,
    visible_text,
)
from kiqbeat.document.jobs import (
    MAX_JOB_BYTES,
    MAX_JOB_VALUES,
    MIDDLEWARE_KEYS,
    Shapes,
    encoding_problem,
    job_bytes,
    payload_keys,
    plain_values,
)
from kiqbeat.document.lifecycle import lifecycle_rules
from kiqbeat.errors import ConfigError, did_you_mean, shown

# A window shorter than this is shorter than a minute's trigger period plus its jitter, so a
# trigger arriving a little late would find its tick already outside the window.
MIN_SAFE_WINDOW_S = 120.0
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
    config = _config(doc, out, source)
    if config is None or out.problems:
        raise ConfigError(out.problems, source=source)
    return replace(config, source=source)


_encode_sorted = json.JSONEncoder(sort_keys=True, separators=(",", ":"),
                                  ensure_ascii=False).encode


def encode_definition(definition: Mapping[str, Any], source: str = "") -> bytes:
    """A schedule's stored form: its definition as compact JSON (keys sorted, so equal
    definitions are equal bytes), with `"source"` when a document wrote it."""
    fields = {**definition, "source": source} if source else definition
    try:
        return _encode_sorted(fields).encode()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"the definition cannot be stored as JSON: {exc}") from None


def size_problem(name: str, data: bytes) -> str | None:
    """Why a definition in its stored form is too large to store, or None."""
    if len(data) <= MAX_DEFINITION_BYTES:
        return None
    return (f"schedule {shown(name)}: its definition is {len(data):,} bytes as stored, over "
            f"the limit of {MAX_DEFINITION_BYTES:,} bytes; keep large data out of a schedule "
            "(its args carry an id, the data lives elsewhere)")


def check_size(name: str, data: bytes) -> None:
    """Refuse (ConfigError) a definition whose stored form is over MAX_DEFINITION_BYTES:
    an invocation would set it aside unread."""
    problem = size_problem(name, data)
    if problem:
        raise ConfigError(problem)


def read_definition(name: str, data: bytes, *, window_s: float = 3600.0,
                    checks: Checks | None = None,
                    fields: Mapping[str, Any] | None = None) -> Schedule:
    """A stored definition (JSON, in a document's schedule form) as a Schedule, checked as a
    document's schedule is and with the same messages; ConfigError listing every problem.

    Document-wide settings take their defaults, except the missed-jobs window (`window_s`,
    the deployment's), against which a lookahead is checked.

    With `checks`, definitions that differ only in name, args and timing (per-tenant
    schedules: the same class and options for each customer, at each one's time) share one
    check of everything else: its result is kept by content (`Checks.templates`), as is each
    timing's (`Checks.timings`), and each schedule's name and args are checked on their own.
    A definition in kiqbeat's stored form (keys sorted, compact) whose fields but its args
    are, byte for byte, those of one read before is not even decoded beyond its args and the
    keys before them (`Checks.by_rest`). `fields`: the writer's definition that `data` is
    the stored form of (`encode_definition(fields) == data`); with `checks`, when its values
    are plain JSON scalars but its args (`_plain`), a definition read through a checked
    template and timing is not decoded from `data` at all (the Schedule is then for checking:
    its nested values are the caller's, in the caller's key order). Without `checks`, every
    definition is checked in full (the reference: the same schedule or the same messages).
    """
    if checks is None:
        return _checked(name, *_decoded(name, data), window_s)
    raw = None if fields is None else _plain(fields)
    if raw is not None:
        key, timing_key = _template_keys(raw, window_s)
        template = None if key is None else checks.templates.get(key)
        timing = None if template is None else _timing(raw, timing_key, checks)
        if template is not None and timing is not None:
            schedule = template.schedule(name, {**raw, **timing[2]} if timing[2] else raw,
                                         len(data), timing)
            if schedule is not None:
                return schedule
    return _read_checked(name, data, window_s, checks, _split_args(data))


_SCALARS = (str, int, bool, type(None))


def _plain(fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """A writer's definition as decoding its stored form gives it (keys sorted, no "source")
    when that is sure without decoding it — every key a string, every value but args a JSON
    scalar of Python's own types (a finite float), args absent or a list (which the
    template's `fits` checks with `plain_values`, as for any definition) — and so holds
    nothing the caller could change after but args (a schedule read through a template keeps
    them; no check kept by content does); else None (then `data` is decoded)."""
    if type(fields) is not dict or "source" in fields:
        return None
    for key, value in fields.items():
        kind = type(value)
        if type(key) is not str or not (kind in _SCALARS or (
                kind is float and math.isfinite(value)) or (key == "args" and kind is list)):
            return None
    return {key: fields[key] for key in sorted(fields)}


def _read_checked(name: str, data: bytes, window_s: float, checks: Checks,
                  rest: tuple[Any, str] | None) -> Schedule:
    """`read_definition` with `checks`; `rest`: `_split_args(data)`, split once by the caller."""
    if rest is not None and isinstance(rest[0], list | None):  # else: one argument, in full
        known = checks.by_rest.get((window_s, rest[1]))
        if known is not None:
            checked, its_timing, fields = known  # fields: with the timing's written in
            schedule = checked.schedule(name, {"args": rest[0], **fields}, len(data), its_timing)
            if schedule is not None:
                return schedule
    raw, source = _decoded(name, data)
    key, timing_key = _template_keys(raw, window_s) if isinstance(source, str) else (None, ())
    if key is not None:
        template = checks.templates.get(key)
        if template is not None:
            timing = _timing(raw, timing_key, checks)
            if timing is not None and timing[2]:
                raw = {**raw, **timing[2]}
            schedule = timing and template.schedule(name, raw, len(data), timing)
            if timing is not None and schedule is not None:
                checks.know_rest(rest, window_s, template, timing, raw)
                return schedule
    schedule = _checked(name, raw, source, window_s)
    if key is not None:
        template = checks.keep(checks.templates, key, _Template.of(schedule))
        checks.know_rest(rest, window_s, template,
                         (schedule.timetable, schedule.timing, _written(raw, schedule.definition)),
                         dict(schedule.definition))
    return schedule


def _decoded(name: str, data: bytes) -> tuple[dict[str, Any], object]:
    """A stored definition's fields (without "source") and its "source"."""
    try:
        raw = json_text.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"schedule {shown(name)}: the stored definition is not JSON "
                          f"({str(exc)[:120]})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"schedule {shown(name)}: the stored definition must be a JSON "
                          f"object of fields (cron, class, ...), got {shown(raw)}")
    source = raw.pop("source", "")
    return raw, source


def _checked(name: str, raw: dict[str, Any], source: object, window_s: float) -> Schedule:
    """The full check of a definition's fields; ConfigError listing every problem."""
    out = _Checker()
    if not isinstance(source, str):
        out.problems.append(f"schedule {shown(name)}: 'source' must be a string, got "
                            f"{shown(source)}")
    top = {key: BY_NAME[key].default for key in TOP_LEVEL_KEYS}
    top["missed_jobs_window"] = window_s
    schedule = _schedule(name, raw, top, out, Shapes())
    if schedule is None or out.problems:
        raise ConfigError(out.problems)
    return schedule


# A definition's timing: the fields its timetable comes from (a cron or an interval in a
# zone, or an instant), those of its life that bound or replace it (document/lifecycle.py),
# and those checked against it (`jitter` against its shortest period, `max_runs` against
# `at`); nothing else does. `jitter` and `max_runs` are the template's too (`_template_keys`).
_TIMING_FIELDS = ("cron", "every", "tz", "dst", "at", "start_at", "end_at", "except", "calendars",
                  "jitter", "max_runs")
_BOTH_FIELDS = ("jitter", "max_runs")
# The life fields lifecycle_rules reads the checked values of (the rest: from `raw`).
_LIFE_VALUES = ("at", "start_at", "end_at", "except", "calendars", "jitter")


def _template_keys(raw: dict[str, Any], window_s: float
                   ) -> tuple[tuple[object, ...] | None, tuple[object, ...]]:
    """What a definition's check depends on besides its name and args, in two keys: its
    timing fields, and its other fields with the window (None when its args share a budget
    with `payload:` or are not a list: then it is checked in full). Each field is keyed by
    content with its type (`1` is not `true`, nor `1.0`), in the order the JSON gives (a
    definition written in another order is only checked once more)."""
    args = raw.get("args")
    if "payload" in raw or not (args is None or isinstance(args, list)):
        return None, ()
    template: list[object] = [window_s]
    timing: list[object] = []
    for field, value in raw.items():
        if field != "args":
            kind = type(value)
            keyed = ((field, "json", _encode_sorted(value)) if kind is list or kind is dict
                     else (field, kind, value))
            if field in _TIMING_FIELDS:
                timing.append(keyed)
                if field in _BOTH_FIELDS:
                    template.append(keyed)
            else:
                template.append(keyed)
    return tuple(template), tuple(timing)


# A definition's checked timing: its timetable (its life applied), the timing text, and the
# fields its stored definition has written in by the life checks (`lifecycle_rules`).
_Timing = tuple[Timetable, str, dict[str, Any]]


def _timing(raw: dict[str, Any], key: tuple[object, ...], checks: Checks) -> _Timing | None:
    """The checked timing of a definition's timing fields, when they pass the checks a full
    validation makes of them (document/lifecycle.py's included); None otherwise (then it is
    validated in full, for the messages). `key`: its timing fields' content
    (`_template_keys`)."""
    known = checks.timings.get(key)
    if known is None:
        out = _Checker()
        tz = out.field("tz", partial(BY_NAME["tz"].check, raw["tz"])) if "tz" in raw else None
        zone = tz or BY_NAME["time_zone"].default
        dst = (out.field("dst", partial(BY_NAME["dst"].check, raw["dst"])) if "dst" in raw
               else BY_NAME["dst"].default)
        timetable = _timetable(raw, zone, "", str, out, dst or BY_NAME["dst"].default)
        values = {name: (out.field(name, partial(BY_NAME[name].check, raw[name]))
                         if name in raw else BY_NAME[name].default) for name in _LIFE_VALUES}
        if timetable is None or out.problems:
            return None
        top = {name: BY_NAME[name].default for name in TOP_LEVEL_KEYS}
        life = lifecycle_rules(raw, values, top, timetable, zone, "", str, out)
        if life is None or out.problems:
            return None
        known = checks.keep(checks.timings, key,
                            (life[0], _timing_text(timetable, raw), life[1]))
    return known


def _written(raw: Mapping[str, Any], definition: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a full validation wrote into a definition's stored form beyond `raw`."""
    return {k: v for k, v in definition.items() if k not in raw or raw[k] != v}


def _split_args(data: bytes) -> tuple[Any, str] | None:
    """A definition in kiqbeat's stored form (`encode_definition`: keys sorted, compact)
    holding args: its args, decoded, and the text of the rest (the keys before args, a
    NUL, the text after them: a NUL is escaped in JSON text, so no other split gives the
    same); None for any other. Keys sorted before "args" ("active_job", ...) are decoded."""
    if not data.startswith(b'{"'):
        return None
    try:
        text = data.decode()
        at = 1
        while True:
            key, end = _decode_at(text, at)
            if not isinstance(key, str) or text[end] != ":" or key > "args":
                return None  # not a key, not compact, or no args where sorted keys put them
            value, after = _decode_at(text, end + 1)
            if key == "args":
                return value, f"{text[:at]}\0{text[after:]}"
            if text[after] != ",":
                return None
            at = after + 1
    except (ValueError, RecursionError, IndexError):
        return None


_decode_at = json.JSONDecoder().raw_decode


@dataclass(frozen=True)
class _Template:
    """A checked definition, to give other names and args to: `checked` is the schedule it
    was checked as; a definition over `room_bytes` as stored is checked in full (its args
    could make a job over MAX_JOB_BYTES)."""

    checked: Schedule
    args_level: int  # where the args list sits in the job hash (4: in ActiveJob's envelope)
    room_bytes: int

    @classmethod
    def of(cls, schedule: Schedule) -> _Template:
        # A job's JSON holds its args in at most 8 times their stored bytes (a float such as
        # 1e15 is written out in full; nothing else grows), and `Shapes.check` counts at most
        # 8 bytes more per value than JSON writes (an integer is counted as 8): within the
        # room left by the job without args, neither check can fail.
        empty = job_bytes(_renamed(schedule, schedule.name, (), {}))
        room = (MAX_JOB_BYTES - 8 * MAX_JOB_VALUES - empty - 64) // 8
        return cls(schedule, 4 if schedule.active_job_wrapper else 2, room)

    def fits(self, name: str, args: list[Any] | None, size_bytes: int) -> bool:
        """Whether this name and args pass the checks a full validation makes of them (False:
        validate in full, and give its messages)."""
        return not (size_bytes > self.room_bytes or not isinstance(name, str) or not name
                    or len(name) > MAX_NAME_CHARS or visible_text(name, spaces=True)
                    or (args and plain_values(args, self.args_level) < 0))

    def schedule(self, name: str, raw: dict[str, Any], size_bytes: int,
                 timing: _Timing) -> Schedule | None:
        """The checked schedule with this name, args and `timing` (and `raw` as its
        definition), when they `fit`; None otherwise."""
        args = raw.get("args")
        if not self.fits(name, args, size_bytes):
            return None
        return _renamed(self.checked, name, tuple(args or ()), raw, timing)


def _renamed(schedule: Schedule, name: str, args: tuple[Any, ...], definition: dict[str, Any],
             timing: _Timing | None = None) -> Schedule:
    """`schedule` with another name, args, definition and timing: a copy of its fields
    without `dataclasses.replace`'s keyword round trip through `__init__` (a tenth of the
    cost; Schedule derives nothing from its fields)."""
    renamed = object.__new__(Schedule)
    fields = renamed.__dict__
    fields.update(schedule.__dict__, name=name, args=args, definition=definition)
    if timing is not None:
        fields["timetable"], fields["timing"] = timing[0], timing[1]
    return renamed


_K = TypeVar("_K")
_V = TypeVar("_V")


class Checks:
    """Checked definition templates and timings kept by content (`read_definition`), owned
    by whoever reads many definitions (an engine, a store); in each of the three, past
    MAX_CHECKED_TEMPLATES entries the oldest goes first."""

    # OrderedDicts: the oldest goes in O(1) (a dict's first key, after many removals from its
    # front, is found by a scan past every removed slot: ~5 % of a 50,000-definition import).
    def __init__(self) -> None:
        self.templates: OrderedDict[tuple[object, ...], _Template] = OrderedDict()
        self.timings: OrderedDict[tuple[object, ...], _Timing] = OrderedDict()
        # (window, the text of a stored definition's fields but its args: `_split_args`)
        # -> its template, timing and those fields decoded (without "source").
        self.by_rest: OrderedDict[tuple[float, str],
                                  tuple[_Template, _Timing, dict[str, Any]]] = OrderedDict()

    @staticmethod
    def keep(cache: OrderedDict[_K, _V], key: _K, value: _V) -> _V:
        """`value`, kept in one of the three under `key`: past MAX_CHECKED_TEMPLATES entries
        the oldest goes first (insertion order)."""
        if len(cache) >= MAX_CHECKED_TEMPLATES:
            cache.popitem(last=False)
        cache[key] = value
        return value

    def know_rest(self, rest: tuple[Any, str] | None, window_s: float, template: _Template,
                  timing: _Timing, raw: dict[str, Any]) -> None:
        """Keep a definition's checked template and timing by the text of its fields other
        than args (`_split_args`), for the next definition with that text; `raw`: its fields
        with those its checks write in."""
        if rest is None or not isinstance(rest[0], list | None) or '"args":' in rest[1]:
            return  # args twice in the text (or so it seems): json.loads keeps the last
        fields = {k: v for k, v in raw.items() if k != "args"}
        self.keep(self.by_rest, (window_s, rest[1]), (template, timing, fields))

    def forget(self) -> None:
        """Drop every checked template and timing (the next read of each checks it in full)."""
        self.templates.clear()
        self.timings.clear()
        self.by_rest.clear()


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


def _config(doc: Mapping[str, Any], out: _Checker, source: str = "") -> Config | None:
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
        shapes = Shapes()
        for name, raw in raw_schedules.items():
            schedule = _schedule(name, raw, top, out, shapes)
            if schedule is None:
                continue
            # As the engine stores it (with its source): no larger than an invocation reads.
            too_large = size_problem(name, encode_definition(schedule.definition, source))
            if too_large:
                out.problems.append(too_large)
            else:
                schedules.append(schedule)
    in_ms = [s.name for s in schedules if s.timestamp_format == "ms"]
    if ns.startswith("exq") and in_ms:
        out.warnings.append(
            f"timestamp_format ms for {', '.join(map(repr, in_ms[:5]))} with namespace "
            f"{ns!r}: Exq reads float seconds, and its Telemetry middleware crashes on "
            "millisecond stamps; keep 's' for Exq")
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


def _schedule(name: object, raw: object, top: Mapping[str, Any], out: _Checker,
              shapes: Shapes) -> Schedule | None:
    if not isinstance(name, str) or not name:
        out.problems.append(f"schedule name {shown(name)}: names must be non-empty strings "
                            "(quote numbers and dates)")
        return None
    wrong = visible_text(name, spaces=True) or (
        f"is {len(name):,} characters long; at most {MAX_NAME_CHARS:,}"
        if len(name) > MAX_NAME_CHARS else None)
    if wrong:
        out.problems.append(f"schedule name {shown(name)} {wrong}")
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
    timetable = _timetable(raw, tz or top["time_zone"], label, at, out,
                           values["dst"] or BY_NAME["dst"].default)
    if isinstance(timetable, Cron) and tz and zone_key(timetable.zone_name) != zone_key(tz):
        out.warnings.append(f"{label}: the zone in its cron string "
                            f"({zone_label(timetable.zone_name)}) wins over tz {tz!r}")
    if isinstance(timetable, Cron) and timetable.phrase_note:
        out.warnings.append(f"{label}: {timetable.phrase!r} reads as the cron "
                            f"{timetable.expr!r} (as fugit reads it), but "
                            f"{timetable.phrase_note}")
    if isinstance(timetable, Every) and tz and "except" not in raw:
        out.warnings.append(f"{label}: tz has no effect on 'every', which counts from "
                            "1970-01-01 00:00 UTC")
    lookahead_s = values["lookahead"] or 0.0
    if "lookahead" in raw and lookahead_s > top["missed_jobs_window"]:
        out.problems.append(f"{at('lookahead')}: " + _longer_than_window(
            raw["lookahead"], lookahead_s, top["missed_jobs_window"]))
    args = _args(raw.get("args"))
    budget = [MAX_JOB_VALUES, MAX_JOB_BYTES]
    # The args list sits at level 2 of the job hash, or 4 inside ActiveJob's envelope.
    args_depth = 4 if values["active_job"] else 2
    # The document's own list when it is one: shared through an alias, it is checked once.
    args_value = raw["args"] if isinstance(raw.get("args"), list) else list(args)
    out.field(at("args"), lambda: shapes.check(args_value, "args", args_depth, budget))
    extra = {k: values[k] for k in JOB_OPTIONS if k in raw and values[k] is not None}
    if "payload" in raw:
        payload = out.field(at("payload"),
                            lambda: payload_keys(raw["payload"], extra, shapes, budget))
        extra.update(payload or {})
    if len(out.problems) > before or timetable is None:
        return None
    owned = [f"{k!r} ({MIDDLEWARE_KEYS[k]})" for k in extra if k in MIDDLEWARE_KEYS]
    if owned:
        out.warnings.append(f"{label}: payload sets {', '.join(owned)}: those keys belong to "
                            "another middleware, which may act on them unexpectedly")
    # A seconds field of one value (`0 30 4 * * *`) fires at most once a minute.
    sub_minute = timetable.has_seconds and not (isinstance(timetable, Cron)
                                                and len(timetable.seconds) == 1)
    if sub_minute and lookahead_s == 0:
        out.warnings.append(
            f"{label}: fires between minute boundaries but has no lookahead, so its ticks are "
            "pushed only when an invocation happens (about once a minute from EventBridge or "
            "a CronJob; within about a second of each under `kiqbeat run`); elsewhere, set "
            "lookahead (e.g. 60s)")
    timing = _timing_text(timetable, raw)
    definition = dict(raw)  # with the document-wide values it relies on written in
    for key in ("lookahead", "timestamp_format", "dst"):
        if key not in raw and top[key] != BY_NAME[key].default and (
                key != "dst" or isinstance(timetable, Cron)):
            definition[key] = (f"{top[key]!r}s" if key == "lookahead" else top[key].written
                               if key == "dst" else top[key])
    if (isinstance(timetable, Cron) and "tz" not in raw and timetable.zone_name != "UTC"
            and timetable.zone_name == top["time_zone"]):  # the document's zone, not the cron's
        definition["tz"] = timetable.zone_name
    life = lifecycle_rules(raw, values, top, timetable, tz or top["time_zone"], label,
                           at, out)
    if life is None:
        return None
    timetable, written_in = life
    definition.update(written_in)
    schedule = Schedule(
        name=name, timetable=timetable, definition=definition, job_class=values["class"],
        queue=values["queue"],
        args=args, enabled=values["enabled"], description=values["description"],
        catch_up=cast(CatchUp, values["catch_up"]), include_metadata=values["include_metadata"],
        active_job_wrapper=values["active_job"], extra=extra, lookahead_s=lookahead_s,
        timestamp_format=cast(TimestampFormat, values["timestamp_format"]), timing=timing,
        max_runs=values["max_runs"], jitter_s=values["jitter"],
        overlap=cast(Overlap, values["overlap"]), expires_after_s=values["expires_after"] or 0.0,
        history=values["history"], expectations=_expectations(values))
    wrong = encoding_problem(schedule)
    if wrong:
        out.problems.append(f"{label}: {wrong}")
        return None
    return schedule


def _expectations(values: Mapping[str, Any]) -> Expectations | None:
    """A schedule's expectations from its checked fields (None when it has none)."""
    within, alert, pause = (values["expect_success_within"], values["alert_after_failures"],
                            values["pause_after_failures"])
    if within is None and alert is None and pause is None:
        return None
    return Expectations(None if within is None else int(within * 1000), alert, pause)


def _timing_text(timetable: Timetable, raw: dict[Any, Any]) -> str:
    """How a schedule's timing reads: "0 9 * * * (Asia/Kolkata)", "every 15m"."""
    return (f"{timetable.written} ({zone_label(timetable.zone_name)}"
            + (f", dst {timetable.dst.preset or timetable.dst.text}" if timetable.is_fixed_time
               and timetable.dst != CRON else "") + ")" if isinstance(timetable, Cron)
            else f"at {timetable.at.isoformat().replace('+00:00', 'Z')}"
            if isinstance(timetable, OneShot) else f"every {str(raw['every']).strip()}")


def _timetable(raw: dict[Any, Any], zone_name: str, label: str,
               at: Callable[[str], str], out: _Checker, dst: DstPolicy) -> Timetable | None:
    given = [k for k in ("cron", "every", "at") if k in raw]
    if "dst" in raw and given and given[0] != "cron":
        out.problems.append(f"{at('dst')}: applies to a cron only; {given[0]!r} counts in "
                            "UTC, which daylight saving never moves: remove 'dst'")
    if len(given) > 1:
        out.problems.append(f"{label}: has both {given[0]!r} and {given[1]!r}; keep one")
        return None
    if not given:
        out.problems.append(f"{label}: needs 'cron' (e.g. '0 * * * *'), 'every' (e.g. '15m') "
                            "or 'at' (e.g. '2026-03-01T17:00:00+01:00')")
        return None
    if given == ["at"]:
        try:
            return OneShot(BY_NAME["at"].check(raw["at"]), zone_name)
        except ConfigError:  # reported with the other fields' checks
            return None
    if given == ["cron"]:
        expr = raw["cron"]
        if not isinstance(expr, str):
            out.problems.append(f"{at('cron')}: {shown(expr)} must be a string such as "
                                "'0 * * * *'")
            return None
        cron = out.field(at("cron"), lambda: parse_cron(expr, zone_name, dst))
        if cron is not None and "dst" in raw and not cron.is_fixed_time and dst != CRON:
            out.warnings.append(f"{at('dst')}: has no effect on {cron.expr!r}, whose minute "
                                "or hour starts with '*': such a cron fires at every instant "
                                "whose wall time matches (both passes of a repeated hour, "
                                "nothing in a gap) whatever the policy")
        return cron
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
