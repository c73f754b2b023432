"""Every field a kiqbeat document may hold: one table, from which the key lists, the format
markers, the defaults and the value checks all come (DESIGN §5).

A field is top-level (a document-wide setting), per schedule, or both (a top-level value is
the default of the schedule's). `check` turns a raw value into the model's value or raises
ConfigError saying what would be valid; checks that depend on other fields (a lookahead no
longer than the window, `payload:` against the job options) live in `validate`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from kiqbeat.core.dst import CRON, dst_policy
from kiqbeat.core.durations import duration_s, positive_duration_s
from kiqbeat.core.instants import utc_instant
from kiqbeat.core.limits import (
    MAX_CALENDARS,
    MAX_EXCLUDED_DATES,
    MAX_EXPECT_S,
    MAX_EXPIRES_AFTER_S,
    MAX_FAILURE_STREAK,
    MAX_HISTORY,
    MAX_JITTER_S,
    MAX_RUNS,
)
from kiqbeat.errors import ConfigError, did_you_mean, shown

ACTIVE_JOB_WRAPPER = "Sidekiq::ActiveJob::Wrapper"
LEGACY_ACTIVE_JOB_WRAPPER = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"
CATCH_UP = ("all", "latest", "none")
OVERLAP = ("allow", "skip", "buffer_one")
TIMESTAMP_FORMATS = ("s", "ms")
_WORD_OK = re.compile(r"\S+")
# Worker classes as each ecosystem names them: a Ruby constant path (Reports::DailyWorker),
# an Elixir module (MyApp.DailyWorker, Elixir.MyApp.DailyWorker) or a dotted Python path.
_CLASS_OK = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:(?:::|\.)[A-Za-z_][A-Za-z0-9_]*)*", re.ASCII)
# Unicode categories no name, class or queue may hold: controls (C0 and C1), format
# characters (bidi overrides, zero-width spaces: a queue no worker reads looks like one that
# does), surrogates, private use, unassigned, and line/paragraph separators.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
MAX_NAME_CHARS = 1000


def visible_text(value: str, *, spaces: bool) -> str | None:
    """What is wrong with the characters of a name (None when nothing is)."""
    if value.isascii() and value.isprintable():
        return None  # the common case, without a look at each character
    for char in value:
        category = unicodedata.category(char)
        if category in _INVISIBLE or (not spaces and category.startswith("Z")):
            name = unicodedata.name(char, "")
            return (f"holds the character U+{ord(char):04X}{f' ({name})' if name else ''}, "
                    f"which is invisible or not text; only {'' if spaces else 'non-space '}"
                    "printable characters are allowed")
    return None


# ---------------------------------------------------------------------------- value checks


def boolean(value: object) -> bool:
    """true or false, nothing else (YAML's `yes` is already a bool; "yes" is not)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{shown(value)} must be true or false")
    return value


def word(example: str) -> Callable[[object], str]:
    """A non-empty string of visible characters without spaces: a queue or zone name."""
    def check(value: object) -> str:
        if not isinstance(value, str) or not _WORD_OK.fullmatch(value):
            raise ConfigError(f"{shown(value)} must be a non-empty string without spaces, "
                              f"e.g. {example!r}")
        wrong = visible_text(value, spaces=False) or (
            f"is {len(value):,} characters long; at most {MAX_NAME_CHARS:,}"
            if len(value) > MAX_NAME_CHARS else None)
        if wrong:
            raise ConfigError(f"{shown(value)} {wrong}")
        return value
    return check


def class_name(value: object) -> str:
    """A worker class: a Ruby constant, an Elixir module or a dotted Python path. A Ruby
    constant written from the top level (`::Reports::DailyWorker`) is pushed without its
    leading `::`, as Sidekiq pushes a class (`Class#to_s`) and resolves the name."""
    word("ReportWorker")(value)
    if not _CLASS_OK.fullmatch(str(value).removeprefix("::")):
        raise ConfigError(f"{shown(value)} does not look like a worker class: write a Ruby "
                          "class (Reports::DailyWorker), an Elixir module (MyApp.DailyWorker) "
                          "or a Python path (app.workers.DailyWorker)")
    return str(value).removeprefix("::")


def choice(choices: tuple[str, ...]) -> Callable[[object], str]:
    """One of `choices`, with a did-you-mean hint."""
    def check(value: object) -> str:
        if not isinstance(value, str) or value not in choices:
            hint = did_you_mean(value, choices) if isinstance(value, str) else ""
            raise ConfigError(f"{shown(value)} is not one of {', '.join(choices)}{hint}")
        return value
    return check


def zone_name(value: object) -> str:
    """A zone name `core.zones` reads: IANA ('Europe/Paris'), Rails ('Eastern Time (US &
    Canada)') or a fixed offset ('+05:30', kept in that form)."""
    if not isinstance(value, str) or not value.strip():
        sexagesimal = (" (YAML reads an unquoted +5:30 as the number 330: quote an offset)"
                       if isinstance(value, int) and not isinstance(value, bool) else "")
        raise ConfigError(f"{shown(value)} must be a time zone name, e.g. 'Europe/Paris', "
                          f"'Eastern Time (US & Canada)' or '+05:30'{sexagesimal}")
    wrong = visible_text(value, spaces=True)
    if wrong or len(value) > MAX_NAME_CHARS:
        raise ConfigError(f"{shown(value)} {wrong or 'is too long for a time zone name'}")
    from kiqbeat.core.zones import canonical_zone  # zoneinfo: only where a zone is read

    return canonical_zone(value)


def count_or_bool(value: object) -> bool | int:
    """Sidekiq's `retry` / `backtrace`: true, false or a whole number >= 0."""
    if isinstance(value, bool) or (isinstance(value, int) and 0 <= value <= 1_000_000):
        return value
    raise ConfigError(f"{shown(value)} must be true, false or a whole number from 0 to 1000000")


def whole_number(low: int, high: int, what: str) -> Callable[[object], int]:
    """A whole number from `low` to `high` (a bool is not one); `what`: what it must be, as
    the message says it."""
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{shown(value)} must be {what}")
        return value
    return check


def wait_timeout_s(value: object) -> float:
    """How long one WAIT may block."""
    seconds = duration_s(value)
    if not 0 < seconds <= 10:
        raise ConfigError(f"{shown(value)} must be longer than 0 and at most 10s (each push "
                          "call waits this long at most, inside the invocation's deadline)")
    return seconds


def namespace(value: object) -> str:
    """A raw key prefix: '' (Sidekiq 7+), 'exq:', 'myapp:'."""
    if value is None:
        return ""
    if not isinstance(value, str) or not (value == "" or _WORD_OK.fullmatch(value)):
        raise ConfigError(f"{shown(value)} must be a string without spaces, e.g. '' or 'exq:'")
    return value


def text(value: object) -> str:
    """Free text (a description); nothing is text."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"{shown(value)} must be a string")
    wrong = visible_text(value.replace("\n", " ").replace("\t", " "), spaces=True)
    if wrong:
        raise ConfigError(f"{shown(value)} {wrong}")
    return value


def wrapper(value: object) -> str:
    """`active_job`: the ActiveJob wrapper class name, or '' for a plain Sidekiq job."""
    if value is True:
        return ACTIVE_JOB_WRAPPER
    if value is False or value is None:
        return ""
    if value == "legacy":
        return LEGACY_ACTIVE_JOB_WRAPPER
    raise ConfigError(f"{shown(value)} must be true ({ACTIVE_JOB_WRAPPER}), 'legacy' "
                      f"({LEGACY_ACTIVE_JOB_WRAPPER}) or false")


def retry_for_s(value: object) -> int:
    """Sidekiq 7's `retry_for`, whole seconds."""
    seconds = duration_s(value)
    if seconds < 1:
        raise ConfigError(f"{shown(value)} must be at least 1 second")
    return round(seconds)


def tags(value: object) -> list[str]:
    """Sidekiq's `tags`: a string or a list of non-empty strings."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(t, str) and t for t in items):
        raise ConfigError(f"{shown(value)} must be a list of non-empty strings")
    return list(items)


_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", re.ASCII)


def instant(value: object) -> datetime:
    """`start_at` / `end_at`: an ISO 8601 instant WITH an offset (a wall time alone would
    mean different instants to different readers), as aware UTC (core.instants, the one
    reader of instants, range-checks it before converting)."""
    return utc_instant(value)


def tick_instant(value: object) -> datetime:
    """`at`: an instant (as `instant`) on a whole second, as every tick is."""
    moment = instant(value)
    if moment.microsecond:
        raise ConfigError(f"{shown(value)} must be a whole second (ticks are)")
    return moment


def jitter_s(value: object) -> float:
    """`jitter`: a duration (the grammar `every` reads) of at most a day; 0 is none. Checked
    against the schedule's shortest period in `validate`."""
    seconds = duration_s(value)
    if seconds > MAX_JITTER_S:
        raise ConfigError(f"{shown(value)} is longer than a day (1d); a longer delay is not "
                          "jitter but another schedule")
    if seconds * 1000 != int(seconds * 1000):
        raise ConfigError(f"{shown(value)} must be a whole number of milliseconds")
    return seconds


def expect_within_s(value: object) -> float:
    """`expect_success_within`: a duration (the grammar `every` reads) from 1 second to
    31 days, in whole seconds."""
    seconds = duration_s(value)
    if not 1 <= seconds <= MAX_EXPECT_S or seconds != int(seconds):
        raise ConfigError(f"{shown(value)} must be a whole number of seconds from 1s to "
                          f"{MAX_EXPECT_S // 86_400}d, e.g. '15m' (how long after each tick "
                          "its job must have succeeded)")
    return seconds


def expiry_s(value: object) -> float:
    """`expires_after`: a duration (the grammar `every` reads) of at least a second and at
    most a week, whole milliseconds; a job not started within it of its tick is not run."""
    seconds = duration_s(value)
    if not 1 <= seconds <= MAX_EXPIRES_AFTER_S:
        raise ConfigError(f"{shown(value)} must be from 1s to 7d (a job not started within "
                          "it of its tick is not run)")
    if seconds * 1000 != int(seconds * 1000):
        raise ConfigError(f"{shown(value)} must be a whole number of milliseconds")
    return seconds


def a_date(value: object) -> date:
    """A calendar date written YYYY-MM-DD."""
    if not isinstance(value, str) or not _DATE.fullmatch(value):
        raise ConfigError(f"{shown(value)} is not a date written YYYY-MM-DD")
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise ConfigError(f"{shown(value)} is not a date: {exc}") from None


def exclusions(value: object) -> tuple[date | str, ...]:
    """`except`: dates (YYYY-MM-DD, in the schedule's zone) and names of calendars; one
    string is a list of one. Calendar names are resolved in `validate`."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{shown(value)} must be a list of dates (YYYY-MM-DD) and calendar "
                          "names, e.g. ['2026-12-25', 'holidays']")
    if len(items) > MAX_EXCLUDED_DATES:
        raise ConfigError(f"lists {len(items):,} items; at most {MAX_EXCLUDED_DATES:,}")
    out: list[date | str] = []
    for item in items:
        if isinstance(item, str) and item[:1].isdigit():
            out.append(a_date(item))
        else:
            out.append(word("holidays")(item))
    return tuple(out)


def calendars(value: object) -> dict[str, tuple[date, ...]]:
    """`calendars`: name -> a list of dates (YYYY-MM-DD) that `except:` may name."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{shown(value)} must be a mapping of calendar name to a list of "
                          "dates, e.g. {holidays: ['2026-12-25', '2027-01-01']}")
    if len(value) > MAX_CALENDARS:
        raise ConfigError(f"defines {len(value):,} calendars; at most {MAX_CALENDARS:,}")
    out: dict[str, tuple[date, ...]] = {}
    for name, dates in value.items():
        if isinstance(name, str) and name[:1].isdigit():
            raise ConfigError(f"calendar name {shown(name)} must not start with a digit "
                              "(it would read as a date in 'except')")
        label = word("holidays")(name)
        if not isinstance(dates, list):
            raise ConfigError(f"calendar {shown(label)}: {shown(dates)} must be a list of "
                              "dates (YYYY-MM-DD)")
        if len(dates) > MAX_EXCLUDED_DATES:
            raise ConfigError(f"calendar {shown(label)} lists {len(dates):,} dates; at most "
                              f"{MAX_EXCLUDED_DATES:,}")
        try:
            out[label] = tuple(a_date(d) for d in dates)
        except ConfigError as exc:
            raise ConfigError(f"calendar {shown(label)}: {exc}") from None
    return out


def anything(value: object) -> object:
    """Checked elsewhere (args, payload, cron, every: see `validate`)."""
    return value


# ---------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Field:
    """One key of a document: where it may stand, its check and its default."""

    name: str
    check: Callable[[object], Any]
    default: Any
    top: bool = False  # a document-wide setting (or the default of the schedule's)
    schedule: bool = False  # a schedule's own key
    job_option: bool = False  # Sidekiq's own job option, written into the job hash as is
    doc: str = ""


# `alert_after_failures` / `pause_after_failures`: failed ticks in a row, at least 1.
_failure_streak = whole_number(1, MAX_FAILURE_STREAK, "a whole number of failed ticks in a "
                               f"row from 1 to {MAX_FAILURE_STREAK:,}")
FIELDS: tuple[Field, ...] = (
    Field("time_zone", zone_name, "UTC", top=True, doc="default zone of crons"),
    Field("missed_jobs_window", positive_duration_s, 3600.0, top=True,
          doc="how far back missed ticks are pushed"),
    Field("namespace", namespace, "", top=True, doc="key prefix: '' or 'exq:'"),
    Field("lookahead", duration_s, 0.0, top=True, schedule=True,
          doc="push ticks this far ahead into the schedule set"),
    Field("timestamp_format", choice(TIMESTAMP_FORMATS), "s", top=True, schedule=True,
          doc="s: float seconds; ms: Sidekiq 8's integer milliseconds"),
    Field("sidekiq_scheduler_ui", boolean, False, top=True,
          doc="write sidekiq-scheduler's Recurring Jobs tab"),
    Field("wait_replicas", whole_number(0, 16, "a whole number of replicas from 0 to 16"), 0,
          top=True, doc="WAIT for replicas after each push"),
    Field("wait_timeout", wait_timeout_s, 1.0, top=True, doc="how long each WAIT may take"),
    Field("schedules", anything, None, top=True, doc="name -> schedule"),
    Field("cron", anything, None, schedule=True, doc="cron expression, optional zone"),
    Field("every", anything, None, schedule=True, doc="interval from the epoch"),
    Field("at", tick_instant, None, schedule=True,
          doc="one-shot: a single tick at this instant (instead of cron or every)"),
    Field("start_at", instant, None, schedule=True, doc="no tick before this instant"),
    Field("end_at", instant, None, schedule=True, doc="no tick after this instant"),
    Field("max_runs", whole_number(1, MAX_RUNS, f"a whole number from 1 to {MAX_RUNS}"), None,
          schedule=True, doc="ticks pushed over its life"),
    Field("jitter", jitter_s, 0.0, schedule=True,
          doc="deliver each tick at a fixed offset in [0, jitter)"),
    Field("overlap", choice(OVERLAP), "allow", schedule=True,
          doc="skip: no tick while the previous job waits or runs; buffer_one: hold one, "
              "push it when that job ends"),
    Field("expect_success_within", expect_within_s, None, schedule=True,
          doc="silent when a tick's job has not succeeded within this long"),
    Field("alert_after_failures", _failure_streak, None, schedule=True,
          doc="failing after this many failed ticks in a row"),
    Field("pause_after_failures", _failure_streak, None, schedule=True,
          doc="pause itself after this many failed ticks in a row"),
    Field("expires_after", expiry_s, None, schedule=True,
          doc="a job not started within this of its tick is not run (recorded expired)"),
    Field("history", whole_number(0, MAX_HISTORY, f"a whole number from 0 to {MAX_HISTORY}"),
          None, schedule=True,
          doc="ticks whose outcomes its record keeps (default: the history setting)"),
    Field("except", exclusions, None, schedule=True,
          doc="dates (YYYY-MM-DD) and calendar names with no tick"),
    Field("calendars", calendars, None, top=True, schedule=True,
          doc="name -> dates, for except"),
    Field("class", class_name, None, schedule=True, doc="worker class"),
    Field("queue", word("default"), "default", schedule=True, doc="Sidekiq queue"),
    Field("args", anything, (), schedule=True, doc="job arguments"),
    Field("tz", zone_name, None, schedule=True, doc="the schedule's zone"),
    Field("dst", dst_policy, CRON, top=True, schedule=True,
          doc="a fixed-time cron when clocks change: cron, fugit or {repeated, skipped}"),
    Field("enabled", boolean, True, schedule=True, doc="false: push nothing, keep the mark"),
    Field("description", text, "", schedule=True, doc="free text"),
    Field("catch_up", choice(CATCH_UP), "all", schedule=True, doc="all, latest or none"),
    Field("include_metadata", boolean, False, schedule=True,
          doc="append {scheduled_at} to args"),
    Field("active_job", wrapper, "", schedule=True, doc="wrap in the ActiveJob envelope"),
    Field("payload", anything, None, schedule=True, doc="custom keys for the job hash"),
    # Sidekiq's own job options (Sidekiq wiki, "Advanced Options"). Client-side options
    # (`pool`) and middleware options (Enterprise `unique_for`) do nothing when kiqbeat
    # writes the hash; `payload:` still allows any key.
    Field("retry", count_or_bool, None, schedule=True, job_option=True),
    Field("retry_for", retry_for_s, None, schedule=True, job_option=True),
    Field("retry_queue", word("low"), None, schedule=True, job_option=True),
    Field("backtrace", count_or_bool, None, schedule=True, job_option=True),
    Field("dead", boolean, None, schedule=True, job_option=True),
    Field("tags", tags, None, schedule=True, job_option=True),
)
BY_NAME = {f.name: f for f in FIELDS}
TOP_LEVEL_KEYS = tuple(f.name for f in FIELDS if f.top)
SCHEDULE_KEYS = tuple(f.name for f in FIELDS if f.schedule)
JOB_OPTIONS = tuple(f.name for f in FIELDS if f.job_option)
# A mapping holding any of these is a kiqbeat document (not another tool's file).
KIQBEAT_MARKERS = TOP_LEVEL_KEYS
# Keys kiqbeat sets itself, Sidekiq's scheduling key, and the retry bookkeeping only Sidekiq
# may write (a job carrying them looks like a failed one to the retry set and the Web UI).
RESERVED_PAYLOAD_KEYS = frozenset({
    "class", "args", "jid", "queue", "created_at", "enqueued_at", "wrapped", "at",
    "kiqbeat_schedule", "kiqbeat_tick", "kiqbeat_expires_at",
    "retry_count", "retried_at", "failed_at", "error_message", "error_class",
    "error_backtrace",
})
