"""How fugit, the cron reader of sidekiq-cron, sidekiq-scheduler, GoodJob and Solid Queue,
reads an expression differently from kiqbeat: the importer's warnings (read in
floraison/fugit `lib/fugit/cron.rb`: `day_match?`, `determine_weekdays`, `expand`,
`next_time`, `previous_time`, `TimeCursor`).

Daylight saving: fugit walks local time with a cursor that moves by real seconds and stops
at the first instant whose wall time matches every field. So it fires at each real instant
whose wall time matches: a wall time inside a spring-forward gap never matches (`30 2 * * *`
in New York does not fire on the spring-forward day), and one inside a repeated hour matches
in both passes (`0 1 * * *` matches at 05:00Z and 06:00Z on the fall-back night).
`previous_time`, which sidekiq-cron asks each poll for the tick to enqueue, returns both;
`next_time` skips the second only when asked from the first exactly (its gh-6 guard). kiqbeat
follows Vixie cron instead for fixed-time crons (DESIGN §3); wildcard crons agree.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, tzinfo

from kiqbeat.core.cron import Cron, _epoch_s, _hm, _utc, parse_cron
from kiqbeat.core.cron_fields import (
    _DOM_F,
    _DOW_F,
    _EXPR_CLIP,
    _MONTH_DAYS,
    _clip,
    _compact,
    _dom_ends,
    _expand,
    _item,
    _looks_like_zone,
    _step,
    _value,
    _where,
)
from kiqbeat.core.zones import _changes, _segments, is_zone_name, zone

_FUGIT = "fugit (sidekiq-cron, sidekiq-scheduler)"
_HOUR_24 = re.compile(r"(?:(\d{1,2})-)?24")
_HORIZON_S = 366 * 86_400


def _fugit_weekdays(dow: str, where: str) -> tuple[frozenset[int] | None, list[str]]:
    """fugit's days for a day-of-week field kiqbeat accepts (None: '*'), and the items it
    reads differently from kiqbeat, each with a note (fugit's `determine_weekdays`)."""
    days: set[int] = set()
    notes: list[str] = []
    star_noted = False
    items = dow.split(",")
    for item in items:
        if "#" in item:  # day#n: read alike (kiqbeat reads it as fugit does)
            continue
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
    hashed = any("#" in item for item in items)  # fugit's weekdays are then never nil
    return (frozenset(d % 7 for d in days) or (frozenset() if hashed else None)), notes


def fugit_differences(expr: str) -> list[str]:
    """Warnings where fugit, the cron reader of sidekiq-cron and sidekiq-scheduler, fires a
    valid kiqbeat `expr` on other days ([] when both read it alike); ConfigError if invalid."""
    cron = parse_cron(expr)
    fields = cron.expr.split()
    dom, dow = fields[-3], fields[-1].removesuffix("&")
    where = _where(_clip(cron.expr, _EXPR_CLIP), _DOW_F, dow)
    # fugit reads a day-of-month item covering 1-31 in steps of 1 (*, */1, 1-31, 1/1, 1-L)
    # as '*'.
    full = any(_dom_ends(i, where, dom) == (list(range(1, 32)), []) if "l" in i.lower()
               else _item(i, _DOM_F, where, dom) == (1, 31, 1)
               for i in dom.split(",") if not i.startswith("-"))
    fugit_dows, notes = _fugit_weekdays(dow, where)
    # Like Vixie, fugit ORs the day fields when both are restricted, but "restricted" means
    # "not read as '*'" rather than "not starting with '*'" (its `day_match?`); a '&' (an
    # extension of fugit's) makes it AND them, as kiqbeat does.
    fugit_or = not full and fugit_dows is not None and not cron.expr.endswith("&")
    # fugit's reading of the day fields, judged by the one day rule (`Cron._day_fits`).
    fugit = replace(cron, days_or=fugit_or, days=frozenset(range(1, 32)) if full else cron.days,
                    weekdays=frozenset(range(7)) if fugit_dows is None else fugit_dows)
    lengths = {n for m in cron.months for n in ((28, 29) if m == 2 else (_MONTH_DAYS[m - 1],))}
    days = [(d, w, n) for n in lengths for d in range(1, n + 1) for w in range(7)]
    if all(cron._day_fits(d, w, n) == fugit._day_fits(d, w, n) for d, w, n in days):
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
        every = " (here: every day)" if all(cron._day_fits(d, w, n) for d, w, n in days) else ""
        notes.insert(
            0,
            f"{both}: kiqbeat, like Vixie cron, fires on days matching either one, because"
            f" neither starts with '*'{every}; {_FUGIT} reads {star[0]} {star[1]!r} as '*'"
            f" and fires only on days matching {other[0]} {other[1]!r}",
        )
    return notes



def fugit_dst_differences(cron: Cron, after: datetime, tool: str = "fugit") -> list[str]:
    """Where daylight saving makes fugit fire `cron` at other instants than kiqbeat does
    under the cron's DST policy (`cron.dst`), in the 12 months after `after`: one warning
    per offset change, naming the date, both readings and `dst: fugit`, which keeps fugit's
    instants ([] when they agree: for wildcard crons, and under `dst: fugit`)."""
    a = _epoch_s(after, "after")
    notes = []
    for when, before, offset in _changes(cron.zone_name, a, a + _HORIZON_S):
        shift = abs(offset - before)
        lo, hi = when - shift - 3600, when + shift + 3600
        segs = _segments(cron.zone_name, lo, hi)
        ours = set(cron._between_s(lo, hi))
        walls = cron._walls(lo + min(segs.offsets), hi + max(segs.offsets))
        theirs = {u for w in walls for u in segs.instants(w) if lo < u <= hi}
        if ours == theirs:
            continue
        tz = zone(cron.zone_name)
        local = datetime.fromtimestamp(when, tz)
        moved = "forward" if offset > before else "back"
        head = (f"on {local.date()} clocks in {cron.zone_name} go {moved} "
                f"{_duration(shift)} at {_hm(when + before, False)}")
        parts = []
        gap_fires = sorted(ours - theirs)
        if gap_fires:
            skipped = [cron.dst_note(_utc(u)).split(" ")[0] for u in gap_fires]
            parts.append(f"kiqbeat fires {', '.join(skipped)}, a wall time the change skips, "
                         f"when the gap ends ({_at(gap_fires, tz)}); {tool} (fugit) does not "
                         "fire it that day")
        repeats = sorted(theirs - ours)
        if repeats:
            ours_pass, their_pass = (("first", "second") if cron.dst.repeated == "first"
                                     else ("second", "first"))
            parts.append(f"{tool} (fugit) also fires at {_at(repeats, tz)}, the {their_pass} "
                         f"pass of the repeated hour; kiqbeat fires once, in the {ours_pass} "
                         "pass")
        rule = ("kiqbeat follows cron's rule for fixed-time jobs" if cron.dst.preset == "cron"
                else f"kiqbeat follows the schedule's dst: {cron.dst.text}")
        notes.append(f"daylight saving: {head}: {'; '.join(parts)} ({rule}; add dst: fugit "
                     f"to the schedule to keep {tool}'s instants)")
    return notes


def _duration(seconds: int) -> str:
    return f"{seconds // 3600} h" if seconds % 3600 == 0 else f"{seconds // 60} min"


def _at(instants: list[int], tz: tzinfo) -> str:
    """Instants as local and UTC times: '01:00 EST = 06:00Z' (seconds only when not 0)."""
    shown = [f"{datetime.fromtimestamp(u, tz).strftime('%H:%M:%S %Z').replace(':00 ', ' ')}"
             f" = {_utc(u).strftime('%H:%M:%S').removesuffix(':00')}Z" for u in instants[:4]]
    return ", ".join(shown) + (f" and {len(instants) - 4} more" if len(instants) > 4 else "")


def fugit_cron(expr: str) -> tuple[str, list[str]]:
    """`expr` rewritten, where fugit reads a form kiqbeat's grammar lacks, into the cron
    that fires at the same instants, and what was rewritten ([] when nothing was): fugit's
    `@noon` (`0 12 * * *`); hour 24, which fugit reads as 0 (`0 24 * * *` is midnight,
    `22-24` is 22,23,0). A UTC offset where the zone goes (`+09:00`) is kiqbeat's too (a
    fixed-offset zone). Anything else is left for `parse_cron` to judge."""
    tokens = expr.split()
    notes = []
    if tokens[:1] == ["@noon"]:
        tokens[:1] = ["0", "12", "*", "*", "*"]
        notes.append("fugit's @noon is 0 12 * * *")
    fields = len(tokens) - (1 if len(tokens) == 7 or (
        len(tokens) == 6 and (_looks_like_zone(tokens[-1]) or is_zone_name(tokens[-1])))
        else 0)
    hour_at = 2 if fields == 6 else 1
    if len(tokens) > hour_at and fields in (5, 6):
        items = tokens[hour_at].split(",")
        changed = []
        for item in items:
            found = _HOUR_24.fullmatch(item)
            if found is None:
                changed.append(item)
            elif found[1] is None:
                changed.append("0")
            else:
                changed.extend(part for part in (f"{found[1]}-23", "0") if part)
        if changed != items:
            notes.append(f"fugit reads hour 24 as 0 ({tokens[hour_at]} is "
                         f"{','.join(changed)})")
            tokens[hour_at] = ",".join(changed)
    return (" ".join(tokens), notes) if notes else (expr, [])
