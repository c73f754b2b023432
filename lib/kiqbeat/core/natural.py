"""Natural-language schedules as fugit reads them, translated to the cron fugit produces.

sidekiq-cron, GoodJob and Solid Queue hand a schedule that is not a cron to fugit's
natural-language reader (floraison/fugit `lib/fugit/nat.rb`, `Fugit::Nat.parse`), which
turns `every day at 3:20 am Australia/Sydney` into the cron `20 3 * * * Australia/Sydney`.
kiqbeat reads crons only, so an import translates the forms real files use, exactly as
fugit does (the expected crons in the tests come from fugit's `test/_nat_single_crons.txt`):

- `every N second(s)|sec|s|minute(s)|min|m|hour(s)|h|day(s)|d|month(s)|M`, and `every
  second|minute|hour|day|week|month|year`: `*/N` in that field (`*` when N is 1), the
  smaller fields 0 (`every 3 hours` is `0 */3 * * *`, `every 4 months` `0 0 1 */4 *`);
- `every day|weekday|monday..sunday|mon..sun` (lists with `,` `and` `or`, ranges with `-`
  `to` `through`), each with optional times: midnight unless `at` gives one;
- times: `H:MM`, `H`, either with `am`/`pm` (12 am is 0, 12 pm is 12), `noon`, `midnight`,
  the hours `zero`..`twelve` spelt out, several joined with `,` `and` `or` (fugit
  collects them into one cron when they share their minutes: 18:00 and 20:00 is `0 18,20`);
  `at ...` alone is every day, and may come first (`at 5am every day`);
- a zone at the end, `in`/`on` optional: `Europe/Paris`, `UTC`, `Z`; kiqbeat also reads
  a Rails zone name there (`Tokyo`, `Eastern Time (US & Canada)`), as `core.zones` does;
- `every [N] hour(s)|h at minute(s)|min M[, M2 and M3]` (Solid Queue's own example, `every
  hour at minute 12`) is `M * * * *` (`M */N * * *`), and `every [N] minute(s)|min|m at
  second(s)|sec S` is `S * * * * *` (`S */N * * * *`): fugit's `at_p` points fill the
  smaller field of the interval's cron;
- `every week on monday 18:23` is `every monday 18:23` (fugit's `on` days replace the
  week's Sunday); ordinals may be words (`every first of the month`);
- `12 midnight` is hour 24 in fugit's cron, which fugit's cron reader takes as 0: midnight.

`every N months` and `every 2 days` are fugit's crons too (`*/2` in the day field restarts
each month), and `every 90 minutes` becomes `*/90 * * * *`, which fires once an hour; the
translation says so. Anything else is refused, saying it is natural language and giving
the nearest cron (or `every:` interval) to write instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiqbeat.core.limits import MAX_NATURAL_CHARS
from kiqbeat.core.zones import is_zone_name, trailing_rails_zone
from kiqbeat.errors import ConfigError, shown

_WEEKDAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
_DAY_RX = "|".join([*_WEEKDAYS, *(d[:3] for d in _WEEKDAYS)])
_NAMED_HOURS = {n: i for i, n in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
     "eleven", "twelve"])}
_NAMED_HOURS |= {"oh": 0, "midnight": 0, "noon": 12}
_HOUR_WORDS = "|".join(sorted(_NAMED_HOURS, key=len, reverse=True))
# One time of day: 16:30, 5, 5pm, 5 pm, 12:15 am, noon, five pm.
_TIME = re.compile(
    rf"(?:(?P<h>2[0-4]|[01]?[0-9])(?::(?P<m>[0-5][0-9]))?|(?P<word>{_HOUR_WORDS}))"
    r"(?:\s*(?P<ampm>am|pm|noon|midday|midnight))?$")
_UNITS = {"second": "s", "seconds": "s", "sec": "s", "secs": "s", "s": "s",
          "minute": "m", "minutes": "m", "min": "m", "mins": "m", "m": "m",
          "hour": "h", "hours": "h", "h": "h", "day": "d", "days": "d", "d": "d",
          "month": "M", "months": "M", "M": "M", "week": "w", "year": "y"}
_EVERY = re.compile(r"every\s+(?:(?P<n>\d+)\s*)?(?P<unit>[A-Za-z]+)$", re.IGNORECASE)
_ZONE = re.compile(r"(?:\s+(?:in|on))?\s+(?P<zone>[A-Z][A-Za-z0-9+\-]+(?:/[A-Z][A-Za-z0-9+\-_]+)"
                   r"{0,2}|UTC|Z)$")
_JOIN = re.compile(r"\s*,\s*and\s+|\s*,\s*|\s+and\s+|\s+or\s+", re.IGNORECASE)
_RANGE = re.compile(rf"({_DAY_RX})(?:\s*-\s*|\s+to\s+|\s+through\s+)({_DAY_RX})$")
# fugit's field spans: a step that does not divide its span restarts at each boundary.
_SPAN = {"s": (60, "minute"), "m": (60, "hour"), "h": (24, "day"), "M": (12, "year")}
_ORDINAL_WORDS = (
    "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
    "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth",
    "seventeenth", "eighteenth", "nineteenth", "twentieth", "twenty-first", "twenty-second",
    "twenty-third", "twenty-fourth", "twenty-fifth", "twenty-sixth", "twenty-seventh",
    "twenty-eighth", "twenty-ninth", "thirtieth", "thirty-first")
_ORDINAL_RX = ("(?:(?:3[01]|[12]?[0-9])(?:st|nd|rd|th)|"
               + "|".join(sorted(_ORDINAL_WORDS, key=len, reverse=True)) + ")")
_ORDINALS = rf"(?:(?:the\s+)?{_ORDINAL_RX})"
# 'every 15th of the month', 'every month on the 1st and the 2nd', 'every month on days 1,15'
_MONTH_DAYS = re.compile(
    rf"every\s+(?P<a>{_ORDINALS}(?:(?:\s*,\s*and\s+|\s*,\s*|\s+and\s+){_ORDINALS})*)\s+of"
    rf"\s+the\s+month|every\s+month\s+on\s+(?:(?P<b>{_ORDINALS}(?:(?:\s*,\s*and\s+|\s*,"
    r"\s*|\s+and\s+)" rf"{_ORDINALS})*)|days?\s+(?P<c>\d+(?:\s*(?:,|and)\s*\d+)*))")
# 'every hour at minute 12', 'every 12h at min 50', 'every minute at seconds 10 and 40'
_AT_POINT = re.compile(
    r"every\s+(?:(?P<n>\d+)\s*)?(?P<unit>hours?|h|minutes?|min|m)\s+at\s+"
    r"(?P<point>minutes?|mins?|seconds?|secs?)\s+(?P<counts>\d+(?:(?:\s*,\s*and\s+|\s*,\s*|"
    r"\s+and\s+|\s+or\s+)\d+)*)", re.IGNORECASE)
# Intervals fugit's natural-language reader has no words for ('every 2 weeks'): it returns
# nil, so sidekiq-cron skips the job and Solid Queue refuses to start.
_FUGIT_REFUSES = re.compile(r"every\s+(?:0*[02-9]|0*1\d+|0*[2-9]\d+)\s*(?:weeks?|years?)\b",
                            re.IGNORECASE)
_LETTER_START = re.compile(r"\s*(every|at|from|on)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Reading:
    """The cron fugit makes of a natural-language schedule, and what it does not mean."""

    cron: str
    note: str = ""  # where that cron does not do what the words say ('' when it does)


def is_natural(text: str) -> bool:
    """True when `text` is a natural-language schedule (fugit's), not a cron expression."""
    return bool(_LETTER_START.match(text))


def natural_cron(text: str) -> Reading:
    """The cron fugit produces for `text`; ConfigError naming the nearest cron to write when
    the form is not one kiqbeat translates (see the module docstring)."""
    if len(text) > MAX_NATURAL_CHARS:
        raise ConfigError(f"{shown(text)} is {len(text):,} characters long; a natural-language "
                          f"schedule may have at most {MAX_NATURAL_CHARS} (fugit's own limit)")
    reading = _translate(" ".join(text.split()))
    if reading is None:
        unread = ("fugit cannot read it either (it knows 'every week' and 'every year', "
                  "not several), so the tool never ran this job; " if _FUGIT_REFUSES.search(text)
                  else "")
        raise ConfigError(f"{shown(text)} is natural language (fugit's reader, used by "
                          "sidekiq-cron, GoodJob and Solid Queue), in a form kiqbeat does "
                          f"not translate; {unread}{_nearest(text)}")
    return reading


def _translate(text: str) -> Reading | None:
    tz = ""
    found = _ZONE.search(text)
    rails = trailing_rails_zone(text)  # 'Eastern Time (US & Canada)': kiqbeat's reading
    if rails is not None:
        tz, text = " " + rails[1], re.sub(r"\s+(?:in|on)$", "", rails[0])
    elif found and (found.group("zone") == "Z" or is_zone_name(found.group("zone"))):
        name = found.group("zone")  # a zone kiqbeat knows, not a day name like 'Monday'
        tz, text = " " + ("UTC" if name == "Z" else name), text[: found.start()]
    point = _AT_POINT.fullmatch(text)
    if point:
        return _at_point(point, tz)
    every, times = text, ""
    at = re.search(r"(?:^|\s)at\s", text, re.IGNORECASE)
    if at:
        every, times = text[: at.start()].strip(), text[at.end():].strip()
        cut = re.search(r"\severy\s", times, re.IGNORECASE)
        if not every and cut:  # 'at 5am every day': fugit reads the parts in any order
            times, every = times[: cut.start()].strip(), times[cut.start():].strip()
    elif text.lower().startswith(("every ", "from ")) and re.search(
            r"\d:\d\d|\d\s*[ap]m|noon|midnight", text, re.IGNORECASE):
        every, times = _split_bare_time(text)  # 'every monday 18:24': fugit's 'at' is optional
    hms = _times(times.lower()) if times else []
    if hms is None:
        return None
    every = every.rstrip(", ") or "every day"  # 'at noon' is every day
    if every.lower().startswith("from "):  # 'from Monday through Friday at 19:21'
        every = "every " + every[5:]
    head = _EVERY.fullmatch(every)
    unit = head.group("unit") if head else ""
    unit = _UNITS.get(unit if unit == "M" else unit.lower(), "")
    if head and unit:
        return _interval(int(head.group("n") or 1), unit, hms, tz)
    every = every.lower()
    if not every.startswith("every "):
        return None
    minute, hour = _hm(hms) if hms else ("0", "0")
    monthly = _MONTH_DAYS.fullmatch(every)
    if monthly and minute:
        listed = monthly.group("a") or monthly.group("b") or monthly.group("c")
        days = sorted({int(d) if d.isdigit() else _ORDINAL_WORDS.index(d) + 1
                       for d in re.findall(rf"\d+|{_ORDINAL_RX}", listed)})
        if not all(1 <= d <= 31 for d in days):
            return None
        dom = ",".join(map(str, days))
        return Reading(f"{minute} {hour} {dom} * *{tz}")
    days_text = every.removeprefix("every ")
    if days_text.startswith("week on "):  # 'every week on monday': the days replace Sunday
        days_text = days_text.removeprefix("week on ")
    dow = _weekdays(days_text)
    if dow is None or not minute:
        return None
    return Reading(f"{minute} {hour} * * {dow}{tz}")


def _split_bare_time(text: str) -> tuple[str, str]:
    words = text.split(" ")
    for i in range(1, len(words)):
        if _times(" ".join(words[i:]).lower()) is not None:
            return " ".join(words[:i]), " ".join(words[i:])
    return text, ""


def _times(text: str) -> list[tuple[int, int]] | None:
    """Each (hour, minute) of a list of times, as fugit's `adjust_h` reads them; None if a
    part is not a time."""
    out = []
    for part in _JOIN.split(text):
        found = _TIME.fullmatch(part.strip())
        if not found:
            return None
        if found.group("word"):
            hour, minute = _NAMED_HOURS[found.group("word")], 0
        else:
            hour, minute = int(found.group("h")), int(found.group("m") or 0)
        ampm = found.group("ampm")
        if ampm == "pm" and hour < 12:
            hour += 12
        elif ampm == "am" and hour == 12:
            hour = 0
        if ampm == "midnight" and hour == 12:
            hour = 0  # fugit writes hour 24, which its cron reader takes as 0
        if hour > 23:  # fugit's cron reader takes hour 24 as 0
            hour = 0
        out.append((hour, minute))
    return out


def _hm(hms: list[tuple[int, int]]) -> tuple[str, str]:
    """The minute and hour fields of a list of times: fugit groups the hours by minute and
    makes one cron per distinct set of hours ('' when that is more than one cron)."""
    hours_by_minute: dict[int, set[int]] = {}
    for hour, minute in hms:
        hours_by_minute.setdefault(minute, set()).add(hour)
    groups = {tuple(sorted(h)) for h in hours_by_minute.values()}
    if len(groups) > 1:
        return "", ""
    (hours,) = groups
    return ",".join(map(str, sorted(hours_by_minute))), ",".join(map(str, hours))


def _weekdays(text: str) -> str | None:
    """The day-of-week field of 'day', 'weekday' or a list/range of day names."""
    if text == "day":
        return "*"
    if text == "weekday":
        return "1-5"
    days: set[int] = set()
    ranges = []
    for part in _JOIN.split(text):
        found = _RANGE.fullmatch(part)
        if found:
            ranges.append(f"{_day(found.group(1))}-{_day(found.group(2))}")
        elif re.fullmatch(_DAY_RX, part):
            days.add(_day(part))
        else:
            return None
    return ",".join([*map(str, sorted(days)), *ranges])


def _day(name: str) -> int:
    return [d[:3] for d in _WEEKDAYS].index(name[:3])


def _interval(n: int, unit: str, hms: list[tuple[int, int]], zone_: str) -> Reading | None:
    step = "*" if n == 1 else f"*/{n}"
    if unit in "smh" and hms:  # 'every 2 hours at 10:00': a mix fugit resolves its own way
        return None
    if unit in "wy" and n != 1:  # fugit refuses 'every 2 weeks'
        return None
    minute, hour = _hm(hms) if hms else ("0", "0")
    if not minute:
        return None
    fields = {"s": f"{step} * * * * *", "m": f"{step} * * * *", "h": f"0 {step} * * *",
              "d": f"{minute} {hour} {step} * *", "M": f"{minute} {hour} 1 {step} *",
              "w": f"{minute} {hour} * * 0", "y": f"{minute} {hour} 1 1 *"}
    note = ""
    span = _SPAN.get(unit)
    if unit == "d" and n > 1:
        note = (f"it restarts each month (day 1, 1+{n}, ...), so it does not fire exactly "
                f"every {n} days; for that, write every: {n}d")
    elif span and n > 1 and span[0] % n:
        name = {"s": "seconds", "m": "minutes", "h": "hours", "M": "months"}[unit]
        every = f"; for that, write every: {n}{unit}" if unit in "smh" else ""
        note = (f"a step of {n} does not divide the {span[0]} {name} of a {span[1]}, so it "
                f"restarts each {span[1]} and does not fire every {n} {name}{every}")
    return Reading(fields[unit] + zone_, note)


def _at_point(found: re.Match[str], zone_: str) -> Reading | None:
    """'every [N] hours at minute M' or 'every [N] minutes at second S' (fugit's `at_p`)."""
    raw = found.group("unit")
    unit = _UNITS.get(raw if raw == "M" else raw.lower(), "")
    point = found.group("point").lower()[0]
    values = sorted({int(v) for v in re.findall(r"\d+", found.group("counts"))})
    if (unit, point) not in (("h", "m"), ("m", "s")) or values[-1] > 59:
        return None  # fugit resolves the other mixes its own way
    reading = _interval(int(found.group("n") or 1), unit, [], "")
    if reading is None:
        return None
    fields = reading.cron.split()
    listed = ",".join(map(str, values))
    fields = [listed, *fields[1:]] if unit == "h" else [listed, *fields]
    return Reading(" ".join(fields) + zone_, reading.note)


def _nearest(text: str) -> str:
    """A suggestion built from the parts of `text` that are recognisable."""
    low = " ".join(text.lower().split())
    interval = re.search(r"every\s+(\d+)\s*(seconds?|secs?|minutes?|mins?|hours?|days?|weeks?|"
                         r"h|m|s|d|w)\b", low)
    if interval:
        n, unit = int(interval.group(1)), interval.group(2)[0]
        return f"write the interval as every: {n}{unit} (kiqbeat counts it from the epoch)"
    times = [t for t in (_times(m.group()) for m in re.finditer(
        r"\b(?:\d{1,2}:\d\d(?:\s*[ap]m)?|\d{1,2}\s*[ap]m|noon|midnight)\b", low)) if t]
    hour, minute = times[0][0] if times else (0, 0)
    days = sorted({_day(m.group(1)) for m in re.finditer(rf"\b({_DAY_RX})\b", low)})
    dow = "1-5" if "weekday" in low else ",".join(map(str, days)) or "*"
    dom = "*"
    ordinal = re.search(rf"\b({_ORDINAL_RX})(?:\s+day)?\s+of\s+the\s+month|\b([12]?[0-9]|3[01])"
                        r"(?:st|nd|rd|th)\b", low)
    if ordinal and ordinal.group(1):
        word = ordinal.group(1)
        dom = str(_ORDINAL_WORDS.index(word) + 1) if word in _ORDINAL_WORDS else word[:-2]
    elif ordinal:
        dom = ordinal.group(2)
    cron = f"{minute} {hour} {dom} * {dow}"
    return (f"the nearest cron is {cron!r} (minute hour day-of-month month day-of-week, "
            "with an optional zone at the end)")
