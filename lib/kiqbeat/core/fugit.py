"""How fugit, the cron reader of sidekiq-cron and sidekiq-scheduler, reads an expression
differently from kiqbeat: the importer's warnings (read in floraison/fugit `lib/fugit/cron.rb`:
`day_match?`, `determine_weekdays`, `expand`)."""

from __future__ import annotations

from kiqbeat.core.cron import parse_cron
from kiqbeat.core.cron_fields import (
    _DOM_F,
    _DOW_F,
    _EXPR_CLIP,
    _MONTH_DAYS,
    _clip,
    _compact,
    _expand,
    _item,
    _step,
    _value,
    _where,
)

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

