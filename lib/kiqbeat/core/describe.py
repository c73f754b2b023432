"""Plain-English readings of timetables, for `kiqbeat validate` and `kiqbeat next`.

Built from the expanded field sets, never from the text, so a reading cannot disagree with
what fires; shapes without a short idiom fall back to a field-by-field wording.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kiqbeat.core.cron import Cron, Every
from kiqbeat.core.cron_fields import runs
from kiqbeat.core.instants import z_text
from kiqbeat.core.lifecycle import Bounded, OneShot, base
from kiqbeat.core.report import counted
from kiqbeat.core.schedule import Expectations, Schedule, Timetable

_DAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MONTH_NAMES = (
    "January", "February", "March", "April", "May", "June", "July",
    "August", "September", "October", "November", "December",
)  # fmt: skip


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _join(words: list[str], conjunction: str = "and") -> str:
    return (words[0] if len(words) == 1
            else ", ".join(words[:-1]) + f" {conjunction} " + words[-1])


def _listing(values: Iterable[int], name: Callable[[int], str] = str) -> str:
    """'1 through 5, 7 and 9': runs of three or more consecutive values become ranges."""
    words: list[str] = []
    for first, last in runs(values):
        if last - first >= 2:
            words.append(f"{name(first)} through {name(last)}")
        else:
            words.extend(name(v) for v in range(first, last + 1))
    return _join(words)


def _plural(word: str, values: tuple[int, ...] | list[int]) -> str:
    return word if len(values) == 1 else word + "s"


def _step(values: tuple[int, ...], size: int) -> int:
    """n when `values` is exactly 0, n, 2n, ... and n divides `size` evenly; else 0."""
    if len(values) < 2 or values[0] != 0:
        return 0
    n = values[1]
    if size % n or values != tuple(range(0, size, n)):
        return 0
    return n


def _clock(h: int, m: int, s: int | None = None) -> str:
    return f"{h:02d}:{m:02d}" if s is None else f"{h:02d}:{m:02d}:{s:02d}"


def _minutes_and_hours(cron: Cron) -> str:
    """The minute/hour part, for a cron firing at second 0 of each matching minute."""
    minutes, hours = cron.minutes, cron.hours
    all_m, all_h = len(minutes) == 60, len(hours) == 24
    m_step, h_step = _step(minutes, 60), _step(hours, 24)
    hour_list = f"{_plural('hour', hours)} {_listing(hours)}"
    if all_m:
        return "every minute" if all_h else f"every minute of {hour_list}"
    if m_step and all_h:
        return f"every {m_step} minutes"
    if len(minutes) * len(hours) <= 4:
        return "at " + _join([_clock(h, m) for h in hours for m in minutes])
    minute_part = f"at {_plural('minute', minutes)} {_listing(minutes)}"
    if all_h:
        return f"every hour at {_plural('minute', minutes)} {_listing(minutes)}"
    if h_step:
        return f"{minute_part} past every {_ordinal(h_step)} hour"
    return f"{minute_part} past {hour_list}"


def _time_of_day(cron: Cron) -> str:
    seconds = cron.seconds
    if seconds == (0,):
        return _minutes_and_hours(cron)
    minutes, hours = cron.minutes, cron.hours
    if len(seconds) == 1 and len(minutes) * len(hours) <= 4:
        return "at " + _join([_clock(h, m, seconds[0]) for h in hours for m in minutes])
    s_step = _step(seconds, 60)
    if len(seconds) == 60:
        part = "every second"
    elif s_step:
        part = f"every {s_step} seconds"
    else:
        part = f"at {_plural('second', seconds)} {_listing(seconds)}"
    if len(minutes) == 60 and len(hours) == 24:
        return part if len(seconds) > 1 else part + " of every minute"
    if len(minutes) * len(hours) <= 4:
        return f"{part} during " + _join([_clock(h, m) for h in hours for m in minutes])
    during = f"{_plural('minute', minutes)} {_listing(minutes)}"
    if len(minutes) == 60:
        during = "every minute"
    if len(hours) == 24:
        return f"{part} during {during} of every hour"
    return f"{part} during {during} of {_plural('hour', hours)} {_listing(hours)}"


def _weekdays(days: frozenset[int]) -> str:
    # Listed Monday first (1..6, then Sunday as 7) so 'Friday through Sunday' reads right.
    ordered = sorted(7 if d == 0 else d for d in days)
    return _listing(ordered, lambda d: _DAY_NAMES[d % 7])


_NTH_WORDS = ("first", "second", "third", "fourth", "fifth")


def _from_end(n: int) -> str:
    """'the last', 'the second-to-last', 'the 10th-to-last'."""
    if n == 1:
        return "the last"
    word = _NTH_WORDS[n - 1] if n <= len(_NTH_WORDS) else _ordinal(n)
    return f"the {word}-to-last"


def _month_days(cron: Cron) -> str:
    """The day-of-month part: 'days 1 and 15', 'the last day', 'day 1 and the last 3
    days', followed by 'of the month'."""
    parts = []
    if cron.days:
        days = sorted(cron.days)
        parts.append(f"{_plural('day', days)} {_listing(days)}")
    ends = sorted(cron.from_end)
    if ends and ends == list(range(1, len(ends) + 1)):
        parts.append("the last day" if len(ends) == 1 else f"the last {len(ends)} days")
    elif ends:
        parts.append(_join([f"{_from_end(n)} day" for n in ends]))
    return f"{_join(parts)} of the month"


def _week_days(cron: Cron, conjunction: str = "and") -> str:
    """The day-of-week part: 'Monday through Friday', 'the first Monday of the month and
    on Tuesday' (`conjunction` 'or' where any one is enough)."""
    parts = [_weekdays(cron.weekdays)] if cron.weekdays else []
    nth = sorted(cron.nth, key=lambda p: (p[1] < 0, abs(p[1]), 7 if p[0] == 0 else p[0]))
    if nth:
        named = [(_from_end(-n) if n < 0 else f"the {_NTH_WORDS[n - 1]}") + " "
                 + _DAY_NAMES[day] for day, n in nth]
        parts.insert(0, f"{_join(named, conjunction)} of the month")
    return f" {conjunction} {'on ' if conjunction == 'and' else 'a '}".join(parts)


def _days(cron: Cron) -> str:
    all_dom, all_dow = len(cron.days) == 31, len(cron.weekdays) == 7
    dom = f"on {_month_days(cron)}"
    dow = _week_days(cron, "and" if cron.days_or or len(cron.days) == 31 else "or")
    if cron.days_or:  # Vixie: both fields restricted, so either one is enough
        if all_dom or all_dow:
            return ""
        return f"{dom} or on {dow}"
    if all_dom and all_dow:
        return ""
    if all_dow:
        return dom
    if all_dom:
        return f"on {dow}"
    return f"{dom}, if it is {'' if cron.nth else 'a '}{dow}"


def describe_cron(cron: Cron) -> str:
    """A plain-English reading of when `cron` fires (in its own zone)."""
    parts = [_time_of_day(cron), _days(cron)]
    if len(cron.months) != 12:
        parts.append("in " + _listing(sorted(cron.months), lambda m: _MONTH_NAMES[m - 1]))
    return " ".join(p for p in parts if p)


_UNITS = (("week", 604_800), ("day", 86_400), ("hour", 3600), ("minute", 60), ("second", 1))


def describe_every(every: Every) -> str:
    """A plain-English reading of an interval, saying where it is anchored when that matters."""
    seconds = every.seconds
    unit, size = next((u, s) for u, s in _UNITS if seconds % s == 0)
    count = seconds // size
    text = f"every {unit}" if count == 1 else f"every {count} {unit}s"
    if 86_400 % seconds:
        return f"{text} (counted from 1970-01-01 00:00 UTC)"
    if seconds >= 3600:
        return f"{text} from 00:00 UTC"
    return text


def duration_text(seconds: float) -> str:
    """A duration as `every` writes it: '5m', '1h30m', '90s', '1.5s'."""
    if seconds != int(seconds):
        return f"{seconds:g}s"
    left, parts = int(seconds), []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts) or "0s"


def describe_timetable(timetable: Timetable) -> str:
    """The plain-English reading of any timetable: a cron, an interval, a one-shot, with
    the cron's or interval's reading under start/end/except (`describe_life` says those)."""
    inner = base(timetable)
    if isinstance(inner, Cron):
        return describe_cron(inner)
    if isinstance(inner, Every):
        return describe_every(inner)
    if isinstance(inner, OneShot):
        return f"once, at {z_text(inner.at, 'seconds')}"
    return ""


def describe_life(schedule: Schedule) -> str:
    """The rules of a schedule's life in plain English ('' when it has none): its bounds,
    excluded dates, run limit, jitter, overlap, expiry, outcome history and what its jobs
    are expected to do."""
    parts: list[str] = []
    timetable = schedule.timetable
    if isinstance(timetable, Bounded):
        if timetable.start is not None:
            parts.append(f"from {z_text(timetable.start, 'seconds')}")
        if timetable.end is not None:
            parts.append(f"until {z_text(timetable.end, 'seconds')}")
        if timetable.excluded:
            count = len(timetable.excluded)
            names = ", ".join(name for name, _ in timetable.calendars)
            parts.append(f"except {count} date{'' if count == 1 else 's'}"
                         + (f" ({names})" if names else "")
                         + f" in {timetable.dates_zone}")
    if schedule.max_runs is not None:
        parts.append(f"at most {schedule.max_runs:,} run{'' if schedule.max_runs == 1 else 's'}")
    if schedule.jitter_s:
        parts.append(f"each job delivered up to {duration_text(schedule.jitter_s)} after its "
                     "tick (jitter)")
    if schedule.overlap == "skip":
        parts.append("no tick while its previous job waits or runs (overlap: skip)")
    elif schedule.overlap == "buffer_one":
        parts.append("a tick due while its previous job waits or runs is held (one at most) "
                     "and pushed when that job ends (overlap: buffer_one)")
    if schedule.expires_after_s:
        parts.append(f"a job not started within {duration_text(schedule.expires_after_s)} of "
                     "its tick is not run (expires_after; with the worker middleware)")
    if schedule.history is not None:
        parts.append(f"the outcomes of its last {schedule.history:,} ticks kept (history)")
    rules = schedule.expectations or Expectations()  # what its jobs must do (alerts/)
    if rules.success_within_ms:
        parts.append(f"silent when a tick's job has not succeeded within "
                     f"{duration_text(rules.success_within_ms / 1000)}")
    if rules.alert_after:
        parts.append(f"failing after {counted(rules.alert_after, 'failed tick')} in a row")
    if rules.pause_after:
        parts.append(f"pauses itself after {counted(rules.pause_after, 'failed tick')} in a "
                     "row")
    return "; ".join(parts)


def life_facts(schedule: Schedule, runs: int = 0, skips: int = 0) -> dict[str, Any]:
    """A schedule's life as data (status, get, the HTTP API, the console): its bounds
    (`start_at`, `end_at`, ISO instants or None), excluded dates (`except`, ISO dates in
    `dates_zone`, and the calendars naming some), `max_runs` and the `runs` used of it (the
    stored count), pending `skips`, `jitter_s`, `overlap`, and `rules`, `describe_life`'s
    words ('' when it has none)."""
    timetable = schedule.timetable
    bounded = timetable if isinstance(timetable, Bounded) else None
    return {
        "start_at": z_text(bounded.start, "seconds") if bounded and bounded.start else None,
        "end_at": z_text(bounded.end, "seconds") if bounded and bounded.end else None,
        "except": sorted(d.isoformat() for d in bounded.excluded) if bounded else [],
        "calendars": [name for name, _ in bounded.calendars] if bounded else [],
        "dates_zone": bounded.dates_zone if bounded and bounded.excluded else None,
        "max_runs": schedule.max_runs,
        "runs": runs,
        "skips": skips,
        "jitter_s": schedule.jitter_s,
        "overlap": schedule.overlap,
        "expect_success_within_s": (
            schedule.expectations.success_within_ms / 1000
            if schedule.expectations and schedule.expectations.success_within_ms else None),
        "alert_after_failures": schedule.expectations and schedule.expectations.alert_after,
        "pause_after_failures": schedule.expectations and schedule.expectations.pause_after,
        "rules": describe_life(schedule),
    }


def describe_usage(facts: dict[str, Any]) -> str:
    """The life state in words ('' when there is none): runs used of `max_runs`, skips
    pending."""
    parts = []
    if facts.get("max_runs") is not None:
        parts.append(f"{facts['runs']:,} of {facts['max_runs']:,} runs used")
    if facts.get("skips"):
        parts.append(f"{facts['skips']:,} tick{'' if facts['skips'] == 1 else 's'} to skip")
    return ", ".join(parts)
