"""When schedules fire: cron expressions and epoch-anchored intervals, with cron's DST rules.

Everything here is pure: instants in, instants out. Internally an instant is an integer of
epoch seconds (UTC) and a *wall time* is an integer of local seconds counted as if the zone
were UTC; each zone's offset changes are found once per year and cached, so mapping a wall
time to its real instants is arithmetic (DESIGN §3):

- wildcard jobs (minute or hour field starts with '*') fire at every real instant whose
  wall time matches: both passes of a repeated hour, nothing in a gap;
- fixed-time jobs fire once per matching wall time: the first pass of a repeated hour, and
  a wall time that does not exist fires once, at the instant the gap ends.

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
- A UTC offset where a zone goes (`+09:00`, `UTC+9`) is refused as such: zones are IANA
  names, which follow daylight saving; `Etc/GMT-9` is one and works.
- Day-of-week `N/S` is refused: Vixie cron and cronie refuse it, fugit (sidekiq-cron,
  sidekiq-scheduler) reads it as N alone, older kiqbeat as N-6/S; no reading is safe.
  `*/S` and `A-B/S` mean the same everywhere. In other fields N/S stays N-max/S, as fugit
  reads it (cronie refuses N/S in every field).
- `fugit_differences` warns where fugit fires a valid expression on other days, so an
  importer can say which sidekiq-cron or sidekiq-scheduler schedules change meaning.
"""

from __future__ import annotations

import re
import zoneinfo
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache

from kiqbeat.errors import ConfigError, did_you_mean

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY_S = 86_400
# Offset changes within this distance of a window are taken into account; any real DST
# shift (at most 2 h today, 24 h when Samoa crossed the date line) is smaller.
_NEAR_S = 2 * _DAY_S
# Offsets are sampled this often when a zone's year is scanned for changes; two changes
# closer together than this would be missed (none exists in the tz database).
_SCAN_STEP_S = 3600
# next_after gives up past this horizon (a cron that fires only on 29 Feb of a Monday
# still fires within 28 years; one that cannot fire is rejected by parse_cron).
_NEXT_HORIZON_S = 400 * 366 * _DAY_S

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
_UNSUPPORTED = {
    "l": "'L' (last)",
    "w": "'W' (nearest weekday)",
    "#": "'#' (nth weekday)",
    "?": "'?'",
}


# ---------------------------------------------------------------------------- zones


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) | {"UTC"}


@lru_cache(maxsize=1024)
def zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone `name`; ConfigError (with a did-you-mean hint) when unknown."""
    if name not in _zone_names():
        hint = did_you_mean(name, _zone_names()) if len(name) <= _CLIP else ""
        raise ConfigError(f"unknown time zone {_clip(name)}{hint}")
    return zoneinfo.ZoneInfo(name)


def _offset_s(tz: zoneinfo.ZoneInfo, instant_s: int) -> int:
    offset = datetime.fromtimestamp(instant_s, tz).utcoffset()
    return 0 if offset is None else offset // _SECOND


# A change of UTC offset: (instant it takes effect, offset before, offset after).
_Change = tuple[int, int, int]


@lru_cache(maxsize=4096)
def _changes_in_year(zone_name: str, year: int) -> tuple[_Change, ...]:
    """Offset changes taking effect in (1 Jan, next 1 Jan] (UTC) of `year`, to the second."""
    tz = zone(zone_name)
    start = (datetime(year, 1, 1, tzinfo=UTC) - _EPOCH) // _SECOND
    end = (datetime(year + 1, 1, 1, tzinfo=UTC) - _EPOCH) // _SECOND
    changes: list[_Change] = []
    t, off = start, _offset_s(tz, start)
    while t < end:
        nxt = min(t + _SCAN_STEP_S, end)
        nxt_off = _offset_s(tz, nxt)
        if nxt_off != off:
            lo, hi = t, nxt  # offset(lo) == off, offset(hi) != off: find the first instant
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _offset_s(tz, mid) == off:
                    lo = mid
                else:
                    hi = mid
            changes.append((hi, off, nxt_off))
        t, off = nxt, nxt_off
    return tuple(changes)


def _year_of(instant_s: int) -> int:
    return date.fromordinal(_EPOCH_ORDINAL + instant_s // _DAY_S).year


def _changes(zone_name: str, lo_s: int, hi_s: int) -> list[_Change]:
    """Offset changes taking effect in (lo_s, hi_s], ascending."""
    if zone_name == "UTC":
        return []
    found: list[_Change] = []
    for year in range(_year_of(lo_s), _year_of(hi_s) + 1):
        found.extend(c for c in _changes_in_year(zone_name, year) if lo_s < c[0] <= hi_s)
    return found


@dataclass(frozen=True)
class _Segments:
    """The zone's offsets around a stretch of time: a constant offset between changes."""

    changes: list[_Change]
    first_offset: int

    @property
    def offsets(self) -> list[int]:
        return [self.first_offset] + [c[2] for c in self.changes]

    def instants(self, wall: int) -> list[int]:
        """Real instants whose local wall time is `wall`: 1 normally, 2 in a repeat, 0 in a gap."""
        found = []
        start = None
        off = self.first_offset
        for i in range(len(self.changes) + 1):
            end = self.changes[i][0] if i < len(self.changes) else None
            u = wall - off
            if (start is None or u >= start) and (end is None or u < end):
                found.append(u)
            if end is not None:
                start, off = end, self.changes[i][2]
        return found

    def gap_end(self, wall: int) -> int | None:
        """The instant the gap containing `wall` ends, or None when `wall` is in no gap."""
        for when, before, after in self.changes:
            if when + before <= wall < when + after:
                return when
        return None


def _segments(zone_name: str, lo_s: int, hi_s: int) -> _Segments:
    changes = _changes(zone_name, lo_s - _NEAR_S, hi_s + _NEAR_S)
    if changes:
        return _Segments(changes, changes[0][1])
    if zone_name == "UTC":
        return _Segments([], 0)
    return _Segments([], _offset_s(zone(zone_name), lo_s))


# ---------------------------------------------------------------------------- parsing

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
_FIELD_WORDS = frozenset((*_DAYS, *_MONTHS, "l", "w"))
_OFFSET = re.compile(r"(utc|gmt)?([+\-\u2212])([0-9]{1,2})(:?([0-9]{2}))?", re.IGNORECASE)


def _clip(text: str, limit: int = _CLIP) -> str:
    """repr(text) for a message, cut after `limit` characters: never a whole huge value."""
    head = repr(text[:limit])
    if len(text) <= limit and len(head) <= limit + 2:
        return head
    return head[: limit + 1] + "..."


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
        raise ConfigError(f"{where}{shown} is out of range {spec.low}-{spec.high}")
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
        raise ConfigError(f"{where} has an empty list item")
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


def _expand(written: str, spec: _FieldSpec, shown: str) -> tuple[int, ...]:
    """The sorted values a field allows (day-of-week 7 folded to 0); `shown` is the cron."""
    where = _where(shown, spec, written)
    lowered = written.lower()
    for char, what in _UNSUPPORTED.items():
        if char in lowered and not (
            char in "lw" and spec.names and lowered.isascii() and _only_names(lowered, spec)
        ):
            raise ConfigError(
                f"{where} uses {what}, which kiqbeat does not support (use numbers, names, *,"
                " ranges a-b, steps /n and lists a,b)"
            )
    values: set[int] = set()
    for item in written.split(","):
        first, last, step = _item(item, spec, where, written)
        values.update(_run(first, last, spec)[::step])
    if spec is _DOW_F and 7 in values:
        values.discard(7)
        values.add(0)
    return tuple(sorted(values))


def _only_names(field_text: str, spec: _FieldSpec) -> bool:
    """True when every letter in the field belongs to a month/day name (e.g. 'wed', 'jul')."""
    words = re.findall(r"[a-z]+", field_text)
    return all(w in spec.names for w in words)


def _looks_like_zone(token: str) -> bool:
    """True for an IANA-style name; False for a field, even one written with names."""
    if not (token.isascii() and token[:1].isalpha()):
        return False
    return not all(w in _FIELD_WORDS for w in re.findall(r"[a-z]+", token.lower()))


def _offset_problem(token: str) -> str:
    """For a token written as a UTC offset (+09:00, UTC+9, -0500), why it is refused; else ''."""
    match = _OFFSET.fullmatch(token)
    # A bare -5 is left to the day-of-week field: it reads as a range with no start.
    if match is None or not (match[1] or match[2] != "-" or match[4]):
        return ""
    east = match[2] == "+"
    hours, minutes = int(match[3]), int(match[5] or 0)
    fixed = ""
    if minutes == 0 and hours <= (14 if east else 12):
        name = "UTC" if hours == 0 else f"Etc/GMT{'-' if east else '+'}{hours}"
        fixed = f"; for a fixed offset that never changes, write {name!r} (POSIX signs: inverted)"
    return (
        f"time zone {_clip(token)} is a UTC offset: zones are IANA names such as 'Asia/Tokyo',"
        f" not UTC offsets, so that daylight saving is followed{fixed}"
    )


def _split_zone(tokens: list[str], tz: str, shown: str) -> tuple[list[str], str]:
    """The field tokens and the zone: a trailing zone name in the expression wins over `tz`."""
    last = tokens[-1]
    if len(tokens) < 2:
        return tokens, tz
    if last in _zone_names():
        return tokens[:-1], last
    problem = _offset_problem(last)
    if problem:
        raise ConfigError(f"cron {shown}: {problem}")
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


def _compact(values: tuple[int, ...]) -> str:
    """'1-5,7' for (1, 2, 3, 4, 5, 7)."""
    runs: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        runs.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(runs)


def _never_fires(months: tuple[int, ...], doms: tuple[int, ...]) -> bool:
    return not any(d <= _MONTH_DAYS[m - 1] for m in months for d in doms)


@lru_cache(maxsize=65_536)
def parse_cron(expr: str, tz: str = "UTC") -> Cron:
    """The Cron for `expr` in zone `tz` (a trailing zone name in `expr` wins); ConfigError."""
    stripped = expr.strip(_BLANKS)
    if not stripped:
        raise ConfigError("cron expression is empty")
    shown = _clip(stripped, _EXPR_CLIP)
    tokens, zone_name = _split_zone(_SPLIT.split(stripped), tz, shown)
    zone(zone_name)
    if tokens[0].startswith("@"):
        macro = tokens[0].lower()
        if macro == "@reboot":
            raise ConfigError(f"cron {shown}: @reboot is not supported (kiqbeat has no boot)")
        if macro not in _MACROS:
            hint = did_you_mean(macro, _MACROS) if len(macro) <= _CLIP else ""
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
    written = tokens if has_seconds else ["0", *tokens]
    fields = [t.lower() for t in written]
    specs = (_SECOND_F, _MINUTE_F, _HOUR_F, _DOM_F, _MONTH_F, _DOW_F)
    sets = [_expand(f, s, shown) for f, s in zip(written, specs, strict=True)]
    dom_star, dow_star = fields[3].startswith("*"), fields[5].startswith("*")
    if (dom_star or dow_star) and _never_fires(sets[4], sets[3]):
        raise ConfigError(
            f"cron {shown} never fires: none of its months has day {_compact(sets[3])}"
        )
    norm = " ".join(fields if has_seconds else fields[1:])
    is_fixed = not (fields[1].startswith("*") or fields[2].startswith("*"))
    canon = " ".join(_compact(s) for s in sets)
    flags = ("fixed" if is_fixed else "wild") + ("" if dom_star or dow_star else " or")
    return Cron(
        expr=norm,
        zone_name=zone_name,
        has_seconds=has_seconds,
        is_fixed_time=is_fixed,
        key=f"cron:{canon} {flags} {zone_name}",
        seconds=sets[0],
        minutes=sets[1],
        hours=sets[2],
        days=frozenset(sets[3]),
        months=frozenset(sets[4]),
        weekdays=frozenset(sets[5]),
        days_or=not (dom_star or dow_star),
    )


# ---------------------------------------------------------------------------- fugit

_FUGIT = "fugit (sidekiq-cron, sidekiq-scheduler)"


def _fugit_weekdays(dow: str, where: str) -> tuple[frozenset[int] | None, list[str]]:
    """fugit's days for a day-of-week field kiqbeat accepts (None: '*'), and the items it
    reads differently from kiqbeat, each with a note (fugit's `determine_weekdays`)."""
    days: set[int] = set()
    notes: list[str] = []
    star_noted = False
    items = dow.split(",")
    for item in items:
        base, slash, step_text = item.partition("/")
        step = _step(step_text, where) if slash else 1
        if base == "*":
            if slash:
                days.update(range(0, 7, step))
            elif len(items) > 1 and not star_noted:  # a bare '*' adds no day in fugit
                star_noted = True
                rest = ",".join(i for i in items if i != "*")
                notes.append(
                    f"day-of-week {dow!r}: {_FUGIT} skips a '*' inside a day-of-week list"
                    f" and reads {dow!r} as {rest!r}; kiqbeat reads it as every day"
                )
            continue
        left, dash, right = base.partition("-")
        first = _value(left, _DOW_F, where, dow)  # 7 stays 7 here, as in fugit
        last = _value(right, _DOW_F, where, dow) if dash else first
        if slash and first > last:  # Ruby's (first..last).step(n) is empty
            ours = _compact(_expand(item, _DOW_F, where))
            notes.append(
                f"day-of-week {dow!r}: {_FUGIT} reads a range with a step whose start is"
                f" after its end ({item!r}) as no day at all; kiqbeat reads it as {ours};"
                f" write {ours!r} to mean the same in both"
            )
        elif slash:
            days.update(range(first, last + 1, step))
        else:  # a wrapped range runs on past Saturday: fri-mon is 5..8
            days.update(range(first, last + 1 if first <= last else last + 8))
    return (frozenset(d % 7 for d in days) or None), notes


def fugit_differences(expr: str) -> list[str]:
    """Warnings where fugit, the cron reader of sidekiq-cron and sidekiq-scheduler, fires a
    valid kiqbeat `expr` on other days ([] when both read it alike); ConfigError if invalid."""
    cron = parse_cron(expr)
    fields = cron.expr.split()
    dom, dow = fields[-3], fields[-1]
    where = _where(_clip(cron.expr, _EXPR_CLIP), _DOW_F, dow)
    # fugit reads a day-of-month item covering 1-31 in steps of 1 (*, */1, 1-31, 1/1) as '*'.
    full = any(_item(i, _DOM_F, where, dom) == (1, 31, 1) for i in dom.split(","))
    fugit_doms = None if full else cron.days
    fugit_dows, notes = _fugit_weekdays(dow, where)
    # Like Vixie, fugit ORs the day fields when both are restricted, but "restricted" means
    # "not read as '*'" rather than "not starting with '*'" (its `day_match?`).
    fugit_or = fugit_doms is not None and fugit_dows is not None

    def fugit_fits(d: int, w: int) -> bool:
        dom_ok = fugit_doms is None or d in fugit_doms
        dow_ok = fugit_dows is None or w in fugit_dows
        return (dom_ok or dow_ok) if fugit_or else (dom_ok and dow_ok)

    longest = max(_MONTH_DAYS[m - 1] for m in cron.months)
    pairs = [(d, w) for d in range(1, longest + 1) for w in range(7)]
    if all(cron._day_fits(d, w) == fugit_fits(d, w) for d, w in pairs):
        return []
    both = f"day-of-month {dom!r} and day-of-week {dow!r}"
    if fugit_or and not cron.days_or:
        stars = [t for t in (dom, dow) if t.startswith("*")]
        starts = " and ".join(map(repr, stars)) + (" start" if len(stars) > 1 else " starts")
        notes.insert(
            0,
            f"{both}: kiqbeat, like Vixie cron, fires only on days matching both, because"
            f" {starts} with '*'; {_FUGIT} fires on days matching either one, as it does"
            " unless it reads one of them as '*'",
        )
    elif cron.days_or and not fugit_or:
        star, other = (("day-of-month", dom), ("day-of-week", dow))[:: 1 if full else -1]
        every = " (here: every day)" if all(cron._day_fits(d, w) for d, w in pairs) else ""
        notes.insert(
            0,
            f"{both}: kiqbeat, like Vixie cron, fires on days matching either one, because"
            f" neither starts with '*'{every}; {_FUGIT} reads {star[0]} {star[1]!r} as '*'"
            f" and fires only on days matching {other[0]} {other[1]!r}",
        )
    return notes


# ---------------------------------------------------------------------------- instants


def _epoch_s(instant: datetime, name: str) -> int:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {instant!r}")
    return (instant - _EPOCH) // _SECOND


def _utc(instant_s: int) -> datetime:
    return datetime.fromtimestamp(instant_s, UTC)


def _hm(wall: int, seconds: bool) -> str:
    tod = wall % _DAY_S
    text = f"{tod // 3600:02d}:{tod // 60 % 60:02d}"
    return text + f":{tod % 60:02d}" if seconds else text


@dataclass(frozen=True)
class Cron:
    """A parsed cron expression in a zone: the instants it fires at, under cron's DST rules."""

    expr: str
    zone_name: str
    has_seconds: bool
    is_fixed_time: bool
    key: str
    seconds: tuple[int, ...] = field(repr=False)
    minutes: tuple[int, ...] = field(repr=False)
    hours: tuple[int, ...] = field(repr=False)
    days: frozenset[int] = field(repr=False)
    months: frozenset[int] = field(repr=False)
    weekdays: frozenset[int] = field(repr=False)  # 0 = Sunday
    days_or: bool = field(repr=False)  # both day fields restricted: either may match

    def _day_fits(self, dom: int, weekday: int) -> bool:
        """True when a day numbered `dom` in its month, on `weekday` (0 = Sunday), matches."""
        dom_ok = dom in self.days
        dow_ok = weekday in self.weekdays
        return (dom_ok or dow_ok) if self.days_or else (dom_ok and dow_ok)

    def _day_matches(self, day: date) -> bool:
        return self._day_fits(day.day, (day.weekday() + 1) % 7)

    def _times(self, start: int, end: int) -> Iterator[int]:
        """Matching seconds-of-day in [start, end], ascending."""
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        h0, m0, s0 = start // 3600, start // 60 % 60, start % 60
        for h in hours[bisect_left(hours, h0) :]:
            first_hour = h == h0
            for m in minutes[bisect_left(minutes, m0) if first_hour else 0 :]:
                base = h * 3600 + m * 60
                if base > end:
                    return
                for s in seconds[bisect_left(seconds, s0) if first_hour and m == m0 else 0 :]:
                    if base + s > end:
                        return
                    yield base + s

    def _walls(self, lo: int, hi: int) -> Iterator[int]:
        """Matching wall times in [lo, hi], ascending."""
        day_n, last_n = lo // _DAY_S, hi // _DAY_S
        day = date.fromordinal(_EPOCH_ORDINAL + day_n)
        one_day = timedelta(days=1)
        while day_n <= last_n:
            if day.month not in self.months:
                nxt = date(day.year + day.month // 12, day.month % 12 + 1, 1)
                day_n += (nxt - day).days
                day = nxt
                continue
            if self._day_matches(day):
                start = lo - day_n * _DAY_S if day_n == lo // _DAY_S else 0
                end = hi - day_n * _DAY_S if day_n == last_n else _DAY_S - 1
                base = day_n * _DAY_S
                for tod in self._times(start, end):
                    yield base + tod
            day_n += 1
            day += one_day

    def _fires(self, segs: _Segments, wall: int) -> list[int]:
        """The instants a matching wall time fires at, under DESIGN §3's DST rules."""
        found = segs.instants(wall)
        if len(found) == 1:
            return found
        if self.is_fixed_time:
            if found:
                return [min(found)]
            end = segs.gap_end(wall)
            return [] if end is None else [end]
        return found

    def _between_s(self, a: int, b: int) -> list[int]:
        if b <= a:
            return []
        segs = _segments(self.zone_name, a, b)
        if not segs.changes:
            off = segs.first_offset
            return [w - off for w in self._walls(a + off + 1, b + off)]
        offs = segs.offsets
        found = {
            u
            for w in self._walls(a + min(offs) + 1, b + max(offs))
            for u in self._fires(segs, w)
            if a < u <= b
        }
        return sorted(found)

    def _first_after_s(self, a: int, b: int) -> int | None:
        """The first fire instant in (a, b], or None."""
        segs = _segments(self.zone_name, a, b)
        offs = segs.offsets
        if not segs.changes:
            for w in self._walls(a + offs[0] + 1, b + offs[0]):
                return w - offs[0]
            return None
        spread = max(offs) - min(offs)
        best: int | None = None
        best_wall = 0
        for w in self._walls(a + min(offs) + 1, b + max(offs)):
            # Later walls can only give earlier instants within a repeat, never further.
            if best is not None and w > best_wall + spread:
                break
            for u in self._fires(segs, w):
                if a < u <= b and (best is None or u < best):
                    best, best_wall = u, w
        return best

    def between(self, after: datetime, until: datetime) -> list[datetime]:
        """Every fire instant in (after, until], aware UTC, ascending, without duplicates."""
        a, b = _epoch_s(after, "after"), _epoch_s(until, "until")
        return [_utc(u) for u in self._between_s(a, b)]

    def next_after(self, after: datetime) -> datetime:
        """The first fire instant strictly after `after` (aware UTC)."""
        a = _epoch_s(after, "after")
        lo, width = a, 3600 if self.has_seconds or len(self.hours) > 1 else _DAY_S
        while lo - a < _NEXT_HORIZON_S:
            hi = lo + width
            found = self._first_after_s(lo, hi)
            if found is not None:
                return _utc(found)
            lo, width = hi, width * 8
        raise ValueError(f"cron {self.expr!r} does not fire within 400 years of {after}")

    def dst_note(self, instant: datetime) -> str:
        """'' normally; else a short note saying how DST moved or doubled this fire instant."""
        u = _epoch_s(instant, "instant")
        segs = _segments(self.zone_name, u, u)
        if not segs.changes:
            return ""
        if self.is_fixed_time:
            for when, before, after in segs.changes:
                if when == u and after > before:
                    skipped = next(self._walls(when + before, when + after - 1), None)
                    if skipped is not None:
                        hm = _hm(skipped, self.has_seconds)
                        return f"{hm} skipped by DST; fired when the gap ended"
        for off in set(segs.offsets):
            passes = segs.instants(u + off)
            if u in passes and len(passes) > 1:
                return (
                    "repeated hour: first pass"
                    if u == min(passes)
                    else ("repeated hour: second pass")
                )
        return ""


def fire_times(cron: str, *, tz: str = "UTC", after: datetime, until: datetime) -> list[datetime]:
    """Every instant in (after, until] at which `cron` (in zone `tz`) fires, aware UTC."""
    _epoch_s(after, "after")
    _epoch_s(until, "until")
    return parse_cron(cron, tz).between(after, until)


# ---------------------------------------------------------------------------- intervals

_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": _DAY_S, "w": 7 * _DAY_S}
_DURATION = re.compile(r"(\d+)\s*([smhdw])")


@dataclass(frozen=True)
class Every:
    """A fixed interval, anchored to the Unix epoch in UTC so every instance agrees."""

    seconds: int

    def __post_init__(self) -> None:
        if self.seconds <= 0:
            raise ConfigError(f"interval must be at least 1 second, got {self.seconds}")

    @property
    def key(self) -> str:
        """Equal for intervals of the same length."""
        return f"every:{self.seconds}"

    @property
    def has_seconds(self) -> bool:
        """True unless the interval is a whole number of minutes."""
        return self.seconds % 60 != 0

    def between(self, after: datetime, until: datetime) -> list[datetime]:
        """Every multiple of the interval (since the epoch) in (after, until], aware UTC."""
        a, b = _epoch_s(after, "after"), _epoch_s(until, "until")
        first = (a // self.seconds + 1) * self.seconds
        return [_utc(u) for u in range(first, b + 1, self.seconds)]

    def next_after(self, after: datetime) -> datetime:
        """The first multiple of the interval strictly after `after`."""
        a = _epoch_s(after, "after")
        return _utc((a // self.seconds + 1) * self.seconds)


def parse_every(text: str) -> Every:
    """An Every from '30s', '15m', '1h30m', '2d', '1w' or plain seconds; ConfigError if bad."""
    raw = str(text).strip()
    if re.search(r"\d\s*(M|y|mo)", raw):
        raise ConfigError(
            f"every {raw!r}: months and years have no fixed length; use a cron expression"
        )
    if raw.isdigit():
        seconds = int(raw)
    else:
        lowered = raw.lower()
        parts = _DURATION.findall(lowered)
        if not parts or _DURATION.sub("", lowered).strip():
            raise ConfigError(
                f"every {raw!r} is not a duration; write e.g. '30s', '15m', '1h30m', '2d',"
                " '1w' or a number of seconds"
            )
        seconds = sum(int(n) * _UNIT_S[unit] for n, unit in parts)
    if seconds <= 0:
        raise ConfigError(f"every {raw!r} must be at least 1 second")
    return Every(seconds)
