"""The cron field grammar of DESIGN §3: expressions into the values each field allows.

The field grammar is checked and expanded here rather than by croniter, whose `expand`
reads `5-5` as `*` (firing every minute) and whose search gets DST wrong. Its decisions:

- Only ASCII digits are numbers: `str.isdigit` also takes '٣' and '５' (read as 3 and 5)
  and '¹' (which int() then refuses), so a copy-pasted digit would change the schedule.
- Fields are split on ASCII blanks only, as cron splits them; a no-break space stays in its
  field and is refused there, shown escaped, rather than read as a separator.
- Every problem is a ConfigError naming the field and the value; a value shown is cut to
  40 characters (the expression to 60), and numbers past 6 digits are never converted
  (int() refuses 4300+), since they are out of every range anyway.
- Six tokens are six fields unless the last is a zone: a zone is a name no field could be,
  so `mon-fri/2` or `sun,wed` stays a day-of-week.
- A zone at the end is any name `zones` reads: IANA ('Asia/Tokyo'), Rails ('Tokyo',
  'Eastern Time (US & Canada)', spaces and all) or a fixed UTC offset ('+05:30', '-0800'),
  a zone without daylight saving; a malformed offset ('GMT+9', '+5') is refused saying
  what to write.
- Day-of-week `N/S` is refused: Vixie cron and cronie refuse it, fugit (sidekiq-cron,
  sidekiq-scheduler) reads it as N alone, older kiqbeat as N-6/S; no reading is safe.
  `*/S` and `A-B/S` mean the same everywhere. In other fields N/S stays N-max/S, as fugit
  reads it (cronie refuses N/S in every field).
- Day-of-month and day-of-week read what fugit 1.14 reads there (its README and
  spec/cron_spec.rb): `L` or `last` (the last day of the month), `-N` (the Nth day from the
  end: `-1` is the last, `-2` the day before), ranges of those (`-7-L`, `-10--1/3`, wrapping
  from -1 to -31 as fugit's `range` does), `N-L` (N through the last day); `day#n` with n
  1-5, -1 to -5, `L` or `last` (the nth, or nth-from-last, such weekday of the month); and
  a trailing `&` on either day field, which makes both day fields required (AND) where
  Vixie's rule would OR them. Forms fugit refuses or reads surprisingly (`L/2`, `L-3`,
  `5--3`, `mon-fri#1`, Quartz's `5L` and `W`, `?`, fugit's `%` and `~`) are refused with
  the nearest form to write.
- `fugit_differences` warns where fugit fires a valid expression on other days, so an
  importer can say which sidekiq-cron or sidekiq-scheduler schedules change meaning.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Any

from kiqbeat.core.zones import (
    canonical_zone,
    is_zone_name,
    offset_problem,
    trailing_rails_zone,
    zone,
    zone_key,
)
from kiqbeat.errors import ConfigError, did_you_mean, shown

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Longest day of each month, February counted in a leap year.
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] is the value low + i


_SECOND_F = _FieldSpec("second", 0, 59)
_MINUTE_F = _FieldSpec("minute", 0, 59)
_HOUR_F = _FieldSpec("hour", 0, 23)
_DOM_F = _FieldSpec("day-of-month", 1, 31)
_MONTH_F = _FieldSpec("month", 1, 12, _MONTHS)
# 0-7 are accepted (7 is Sunday again); * and wrapped ranges run over 0-6.
_DOW_F = _FieldSpec("day-of-week", 0, 7, _DAYS)
_GRAMMAR = "numbers, names, *, ranges a-b, steps /n and lists a,b"
# Characters no field but the day fields may hold ('l' and '#' there only in their forms).
_DAY_ONLY = {"l": "'L' (last)", "#": "'#' (nth weekday)", "&": "'&' (both day fields)"}
# Forms no field reads, each with what to write instead.
_REFUSED = {
    "w": "'W' (nearest weekday), which fugit refuses too; the nearest: 'L' (the last day) or,"
         " in day-of-week, 'fri#L' (the last Friday)",
    "?": "'?' (Quartz's 'no specific value'); write '*'",
    "%": "fugit's '%' (every Nth week, counted from 2019-01-01), which kiqbeat does not"
         " read; the nearest: the weekly cron without it, the job skipping the other weeks",
    "~": "fugit's '~' (a value picked at random when the cron is read), which would differ"
         " between kiqbeat's copies; pick the value yourself (e.g. 17 for 0~59)",
}
# One day-of-month item that counts from the end: L, last, -N, and ranges using them.
_DOM_ENDS = re.compile(r"(-?[^-/]+)(?:-(-?[^-/]+))?")
_NTH = {**{str(n): n for n in range(1, 6)}, **{f"-{n}": -n for n in range(1, 6)},
        "l": -1, "last": -1}



# Fields are split on ASCII blanks only, as cron splits them; any other space or control
# character stays inside its field and is refused there, shown escaped.
_BLANKS = " \t\r\n\f\v"
_SPLIT = re.compile("[ \t\r\n\f\v]+")
# Messages cut a value they show to this many characters, and the expression to _EXPR_CLIP.
_CLIP = 40
_EXPR_CLIP = 60
# A number with more significant digits than this is out of every range and larger than
# every field's span, so it is not converted (int() refuses strings of 4300+ digits).
_MAX_DIGITS = 6
_HUGE = 10**_MAX_DIGITS
# Words a day-of-week field may hold; a last token made of them is a field, not a zone.
_FIELD_WORDS = frozenset((*_DAYS, *_MONTHS, "l", "w", "last"))


def _clip(text: str, limit: int = _CLIP) -> str:
    """A value for a message, cut after `limit` characters: never a whole huge value."""
    return shown(text, limit)


def _number(text: str) -> int | None:
    """The number `text` writes in ASCII digits (any huge one as _HUGE), or None."""
    if not (text.isascii() and text.isdigit()):
        return None
    significant = text.lstrip("0")
    return _HUGE if len(significant) > _MAX_DIGITS else int(significant or "0")


def _value(text: str, spec: _FieldSpec, where: str, written: str) -> int:
    """The number or month/day name `text`, in the field's range; `where` opens messages."""
    number = _number(text)
    lowered = text.lower()
    if number is None and lowered in spec.names:
        number = spec.low + spec.names.index(lowered)
    if number is None:
        if spec.names and text.isalpha():
            what = "month" if spec is _MONTH_F else "day"
            hint = did_you_mean(lowered, spec.names) if len(text) <= _CLIP else ""
            raise ConfigError(f"{where} has unknown {what} name {_clip(text)}{hint}")
        foreign = any(not c.isascii() and c.isnumeric() for c in text)
        raise ConfigError(
            f"{where} has {_clip(text)} where a number {spec.low}-{spec.high} was expected"
            + ("; only ASCII digits 0-9 are numbers" if foreign else "")
        )
    if not spec.low <= number <= spec.high:
        shown = f": {_clip(text)}" if text != written else ""
        midnight = ("; fugit reads hour 24 as 0 (midnight): write 0"
                    if spec is _HOUR_F and number == 24 else "")
        raise ConfigError(f"{where}{shown} is out of range {spec.low}-{spec.high}{midnight}")
    return number


def _step(text: str, where: str) -> int:
    step = _number(text)
    if not step:
        raise ConfigError(
            f"{where} has step {_clip(text)}; a step must be a whole number of at least 1,"
            " in ASCII digits"
        )
    return step


def _dow_n_slash_s(item: str, base: str, first: int, step: int, where: str) -> ConfigError:
    """The refusal of day-of-week N/S, saying what to write instead."""
    named = base.isalpha()
    start = ("sun" if named else "0") if first in (0, 7) else (base.lower() if named else first)
    end = "sat" if named else "6"
    return ConfigError(
        f"{where} has {_clip(item)}, N/S in day-of-week, which crons read differently (Vixie"
        f" cron and cronie refuse it, fugit reads it as {_clip(base)} alone), so kiqbeat refuses"
        f" it too; write '{start}-{end}/{step}' ({start} through {end} in steps of {step})"
        f" or '*/{step}' (Sunday through Saturday in steps of {step})"
    )


def _item(item: str, spec: _FieldSpec, where: str, written: str) -> tuple[int, int, int]:
    """(first, last, step) of one list item; last < first for a wrapped range like 22-2."""
    if not item:
        raise ConfigError(f"{where} has an empty list item; remove the extra ','")
    base, slash, step_text = item.partition("/")
    step = _step(step_text, where) if slash else 1
    top = 6 if spec is _DOW_F else spec.high  # the cycle wrapped ranges run over
    if base == "*":
        return spec.low, top, step
    if not base:
        raise ConfigError(
            f"{where} has nothing before '/' in {_clip(item)}; write '*/{step}' (a step needs"
            " a '*', a value or a range before it)"
        )
    if "-" in base:
        left, _, right = base.partition("-")
        if not left or not right or "-" in right:
            problem = "no start" if not left else "no end" if not right else "more than one '-'"
            raise ConfigError(f"{where} has range {_clip(base)} with {problem}")
        first = _value(left, spec, where, written)
        last = _value(right, spec, where, written)
        if spec is _DOW_F and first == 7:  # 7-7 is Sunday, 7-2 is Sunday-Tuesday
            first, last = 0, 0 if last == 7 else last
        return first, last, step
    first = _value(base, spec, where, written)
    if not slash:
        return first, first, 1
    if spec is _DOW_F:
        raise _dow_n_slash_s(item, base, first, step, where)
    return first, top, step  # N/S means N-max/S, as fugit (sidekiq-cron) reads it


def _run(first: int, last: int, spec: _FieldSpec) -> list[int]:
    """first..last, wrapping past the field's top (day-of-week: 6) when last < first."""
    if first <= last:
        return list(range(first, last + 1))
    top = 6 if spec is _DOW_F else spec.high
    return list(range(first, top + 1)) + list(range(spec.low, last + 1))


def _where(shown: str, spec: _FieldSpec, written: str) -> str:
    return f"cron {shown}: {spec.name} field {_clip(written)}"


def _refuse_unread(lowered: str, spec: _FieldSpec, where: str) -> None:
    """ConfigError for a character no field reads, or one only the day fields read."""
    for char, what in _REFUSED.items():
        if char in lowered and not (char == "w" and spec.names and lowered.isascii()
                                    and _only_names(lowered, spec)):
            raise ConfigError(f"{where} uses {what}")
    if spec in (_DOM_F, _DOW_F):
        return
    for char, what in _DAY_ONLY.items():
        if char in lowered and not (char == "l" and spec.names and lowered.isascii()
                                    and _only_names(lowered, spec)):
            raise ConfigError(
                f"{where} uses {what}, which only the day fields read (day-of-month 'L',"
                f" day-of-week 'fri#L', a trailing '&'); here use {_GRAMMAR}")


def _expand(written: str, spec: _FieldSpec, shown: str) -> tuple[int, ...]:
    """The sorted values a field allows (day-of-week 7 folded to 0); `shown` is the cron."""
    return _expand_days(written, spec, shown, written)[0]


def _expand_days(written: str, spec: _FieldSpec, shown: str, field: str
                 ) -> tuple[tuple[int, ...], tuple[Any, ...]]:
    """A field's plain values (day-of-week 7 folded to 0) and, for a day field, its other
    items: days counted from the end (1 = the last) for day-of-month, (weekday, n) pairs for
    day-of-week `day#n`; `written` is without its trailing '&', `field` (which messages
    name) as written. (Another field with a '&' is refused by `_refuse_unread`.)"""
    where = _where(shown, spec, field)
    _refuse_unread(written.lower(), spec, where)
    if "&" in written:
        raise ConfigError(f"{where} has '&' inside it; it goes at the end of a day field"
                          " ('1-7&'), making both day fields required")
    values: set[int] = set()
    extra: set[Any] = set()
    for item in written.split(","):
        if spec is _DOM_F:
            ends = _dom_ends(item, where, written)
            if ends is not None:
                values.update(ends[0])
                extra.update(ends[1])
                continue
        elif spec is _DOW_F:
            nth = _dow_nth(item, where, written)
            if nth is not None:
                extra.add(nth)
                continue
        first, last, step = _item(item, spec, where, written)
        values.update(_run(first, last, spec)[::step])
    if spec is _DOW_F and 7 in values:
        values.discard(7)
        values.add(0)
    return tuple(sorted(values)), tuple(sorted(extra))


def _end_value(text: str, where: str, written: str) -> tuple[int, bool]:
    """A day-of-month bound: positive, or negative counted from the end (-1 the last);
    and whether it was written 'L' or 'last'."""
    if text in ("l", "last"):
        return -1, True
    if text.startswith("-"):
        number = _number(text[1:])
        if number is None or not 1 <= number <= 31:
            raise ConfigError(f"{where} has {_clip(text)}; days counted from the end run from"
                              " -1 (the last day, also 'L') to -31")
        return -number, False
    return _value(text, _DOM_F, where, written), False


def _dom_ends(item: str, where: str, written: str) -> tuple[list[int], list[int]] | None:
    """(days, days counted from the end: 1 the last) of a day-of-month item using L, last or
    -N, read as fugit reads it; None for an item of the plain grammar."""
    base, slash, step_text = item.lower().partition("/")
    if not ("l" in base or base.startswith("-") or "--" in base):
        return None
    found = _DOM_ENDS.fullmatch(base)
    if found is None:
        raise ConfigError(f"{where} has {_clip(item)}, which is neither a day counted from"
                          " the end (L, last, -1 to -31) nor a range of days")
    step = _step(step_text, where) if slash else 1
    first, first_l = _end_value(found[1], where, written)
    if found[2] is None:
        if slash:
            raise ConfigError(
                f"{where} has {_clip(item)}, a step after one day counted from the end, which"
                " fugit refuses too; write a range counted from the end with its step, such"
                f" as '-7-L/{step}' (the 7th-to-last through the last day, in steps of {step})")
        return [], [-first]
    last, last_l = _end_value(found[2], where, written)
    if first > 0 and last < 0:
        if last_l:  # N-L: N through the last day, as fugit reads it
            return _run(first, 31, _DOM_F)[::step], []
        raise ConfigError(
            f"{where} has {_clip(item)}, from a day of the month to one counted from the end;"
            f" fugit reads it as '{first}-L' ({first} through the last day), dropping"
            f" {found[2]}, so kiqbeat refuses it; write '{first}-L' for that")
    if first < 0 < last:
        quartz = (f"; Quartz's 'L-{last}' ({last} days before the last) is '{first - last}'"
                  " here" if first_l else "")
        raise ConfigError(
            f"{where} has {_clip(item)}, a range from a day counted from the end to one"
            f" counted from the start, which fugit refuses too{quartz}")
    values, cur = [], first
    while True:  # fugit's range: -1 wraps to -31, as 31 wraps to 1
        values.append(cur)
        if cur == last:
            break
        cur = -31 if cur == -1 else cur + 1
    return [], [-v for v in values[::step]]


_QUARTZ_LAST = re.compile(rf"([0-7]|{'|'.join(_DAYS)})l")


def _dow_nth(item: str, where: str, written: str) -> tuple[int, int] | None:
    """(weekday, n) of a day-of-week item `day#n` (n 1-5, -1 to -5, or L/last = -1); None
    for an item of the plain grammar."""
    lowered = item.lower()
    day_text, hashed, n_text = lowered.partition("#")
    if not hashed:
        quartz = _QUARTZ_LAST.fullmatch(lowered)
        if quartz:
            raise ConfigError(f"{where} has {_clip(item)}, Quartz's last such day of the"
                              f" month; write '{quartz[1]}#L'")
        if "l" in lowered and not _only_names(lowered, _DOW_F):
            raise ConfigError(f"{where} uses 'L' (last), which day-of-week reads only after"
                              " '#' ('fri#L': the last Friday of the month)")
        return None
    if not day_text or any(c in day_text for c in "-/*"):
        raise ConfigError(f"{where} has {_clip(item)}; '#' follows one day ('mon#1'): for"
                          " several, list each ('mon#1,tue#1')")
    n = _NTH.get(n_text)
    if n is None:
        raise ConfigError(f"{where} has {_clip(item)}; after '#' comes 1 to 5, -1 to -5,"
                          " L or last (the nth such day of the month, or the nth from its"
                          " end)")
    return _value(day_text, _DOW_F, where, written) % 7, n


def nth_in_month(dom: int, month_days: int) -> tuple[int, int]:
    """(n, -m): day `dom` is the nth of its weekday in a month of `month_days` days, and
    the mth from the month's end (fugit's `wday_in_month`)."""
    return (dom - 1) // 7 + 1, -((month_days - dom) // 7 + 1)


def _only_names(field_text: str, spec: _FieldSpec) -> bool:
    """True when every letter in the field belongs to a month/day name (e.g. 'wed', 'jul')."""
    words = re.findall(r"[a-z]+", field_text)
    return all(w in spec.names for w in words)


def _looks_like_zone(token: str) -> bool:
    """True for an IANA-style name; False for a field, even one written with names."""
    if not (token.isascii() and token[:1].isalpha()):
        return False
    return not all(w in _FIELD_WORDS for w in re.findall(r"[a-z]+", token.lower()))


def _split_zone(tokens: list[str], tz: str, shown: str) -> tuple[list[str], str]:
    """The field tokens and the zone: a trailing zone name in the expression wins over `tz`."""
    last = tokens[-1]
    if len(tokens) < 2:
        return tokens, tz
    if is_zone_name(last):
        return tokens[:-1], canonical_zone(last)
    problem = offset_problem(last)
    if problem:
        raise ConfigError(f"cron {shown}: time zone {problem}")
    # 6 tokens are 6 fields or 5 fields and a zone: a zone is a name that no field could be.
    if (tokens[0].startswith("@") and len(tokens) == 2) or (
        len(tokens) in (6, 7) and _looks_like_zone(last)
    ):
        try:
            zone(last)
        except ConfigError as exc:
            raise ConfigError(f"cron {shown}: {exc}") from exc
        return tokens[:-1], last
    return tokens, tz


def runs(values: Iterable[int]) -> list[tuple[int, int]]:
    """The runs of consecutive values, as (first, last): [(1, 5), (7, 7)] for 1-5,7."""
    found: list[tuple[int, int]] = []
    for value in values:
        if found and value == found[-1][1] + 1:
            found[-1] = (found[-1][0], value)
        else:
            found.append((value, value))
    return found


def _compact(values: tuple[int, ...]) -> str:
    """'1-5,7' for (1, 2, 3, 4, 5, 7)."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs(values))


def _never_fires(months: tuple[int, ...], doms: tuple[int, ...]) -> bool:
    return not any(d <= _MONTH_DAYS[m - 1] for m in months for d in doms)


@dataclass(frozen=True)
class CronFields:
    """A valid expression, read: what `Cron` is built from."""

    expr: str  # normalised: lower case (L upper), single spaces, without the zone
    zone_name: str
    has_seconds: bool
    is_fixed_time: bool
    key: str  # equal for expressions that fire at the same instants
    sets: tuple[tuple[int, ...], ...]  # seconds, minutes, hours, days, months, weekdays
    days_or: bool  # Vixie: OR the day fields when neither starts with '*' (and no '&')
    from_end: tuple[int, ...] = ()  # days counted from the month's end: 1 = the last
    nth: tuple[tuple[int, int], ...] = ()  # (weekday, n): day#n, n in 1..5 or -5..-1


def day_fits(days: Collection[int], from_end: Collection[int], weekdays: Collection[int],
             nth: Collection[tuple[int, int]], days_or: bool, dom: int, weekday: int,
             month_days: int) -> bool:
    """The one day rule: True when day `dom` of a month of `month_days` days, on `weekday`
    (0 = Sunday), matches these day fields (`days_or`: either field is enough)."""
    dom_ok = dom in days or (month_days - dom + 1) in from_end
    dow_ok = weekday in weekdays
    if nth and not dow_ok:
        n, from_last = nth_in_month(dom, month_days)
        dow_ok = (weekday, n) in nth or (weekday, from_last) in nth
    return (dom_ok or dow_ok) if days_or else (dom_ok and dow_ok)


def _fires_some_day(f: CronFields) -> bool:
    """True when some month of `f` has a day its day fields match: every month of every
    length it can have starts on each weekday in some year of the Gregorian calendar."""
    for month in f.sets[4]:
        for month_days in (28, 29) if month == 2 else (_MONTH_DAYS[month - 1],):
            for first in range(7):
                if any(day_fits(f.sets[3], f.from_end, f.sets[5], f.nth, f.days_or, d,
                                (first + d - 1) % 7, month_days)
                       for d in range(1, month_days + 1)):
                    return True
    return False


_L_WORD = re.compile(r"(?<![a-z])(?:last|l)(?![a-z])")


def read_fields(expr: str, tz: str = "UTC") -> CronFields:
    """`expr` in zone `tz` read field by field (a trailing zone wins); ConfigError naming
    the field and the value."""
    stripped = expr.strip(_BLANKS)
    if not stripped:
        raise ConfigError("cron expression is empty")
    shown = _clip(stripped, _EXPR_CLIP)
    rails = trailing_rails_zone(stripped)
    if rails is not None:  # 'Eastern Time (US & Canada)': a zone name with blanks in it
        tokens, zone_name = _SPLIT.split(rails[0]), rails[1]
    else:
        tokens, zone_name = _split_zone(_SPLIT.split(stripped), canonical_zone(tz), shown)
    if tokens[0].startswith("@"):
        macro = tokens[0].lower()
        if macro == "@reboot":
            raise ConfigError(f"cron {shown}: @reboot is not supported (kiqbeat has no boot)")
        if macro not in _MACROS:
            hint = (" (fugit's @noon: write '0 12 * * *')" if macro == "@noon"
                    else did_you_mean(macro, _MACROS) if len(macro) <= _CLIP else "")
            raise ConfigError(
                f"cron {shown}: unknown shortcut {_clip(tokens[0])}{hint}; expected one of "
                + ", ".join(_MACROS)
            )
        if len(tokens) != 1:
            raise ConfigError(
                f"cron {shown}: {tokens[0]!r} may be followed only by a time zone name"
            )
        tokens = _MACROS[macro].split()
    if len(tokens) not in (5, 6):
        raise ConfigError(
            f"cron {_clip(' '.join(tokens), _EXPR_CLIP)} has {len(tokens)} fields; expected 5"
            " (min hour dom month dow) or 6 (sec min hour dom month dow)"
        )
    has_seconds = len(tokens) == 6
    written = [*tokens] if has_seconds else ["0", *tokens]
    as_written = [*written]
    days_and = False
    for i in (3, 5):  # fugit's '&' after a day field: both day fields must match
        if len(written[i]) > 1 and written[i].endswith("&"):
            written[i], days_and = written[i][:-1], True
    fields = [t.lower() for t in written]
    for i in (3, 5):
        fields[i] = _L_WORD.sub("L", fields[i])
    specs = (_SECOND_F, _MINUTE_F, _HOUR_F, _MONTH_F)
    seconds, minutes, hours, months = (
        _expand(written[i], spec, shown) for i, spec in zip((0, 1, 2, 4), specs, strict=True))
    days, from_end = _expand_days(written[3], _DOM_F, shown, as_written[3])
    weekdays, nth = _expand_days(written[5], _DOW_F, shown, as_written[5])
    sets = (seconds, minutes, hours, days, months, weekdays)
    dom_star, dow_star = fields[3].startswith("*"), fields[5].startswith("*")
    days_or = not (dom_star or dow_star or days_and)
    read = CronFields("", zone_name, has_seconds, False, "", sets, days_or, from_end, nth)
    if from_end or nth or days_and:
        if not _fires_some_day(read):
            raise ConfigError(f"cron {shown} never fires: no day of its months matches"
                              " its day fields")
    elif (dom_star or dow_star) and _never_fires(sets[4], sets[3]):
        raise ConfigError(
            f"cron {shown} never fires: none of its months has day {_compact(sets[3])}"
        )
    if days_and:
        fields[5] += "&"
    norm = " ".join(fields if has_seconds else fields[1:])
    is_fixed = not (fields[1].startswith("*") or fields[2].startswith("*"))
    canon = " ".join(_compact(s) for s in sets)
    if from_end or nth:
        canon += (f" L{_compact(from_end)} #"
                  + ",".join(f"{w}#{n}" for w, n in nth))
    flags = ("fixed" if is_fixed else "wild") + (" or" if days_or else "")
    return replace(read, expr=norm, is_fixed_time=is_fixed,
                   key=f"cron:{canon} {flags} {zone_key(zone_name)}")
