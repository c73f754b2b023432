"""The checks of a schedule's life that span several fields (DESIGN §8): start before end,
what a one-shot may carry, `except:` names against the calendars, `jitter` against the
schedule's shortest period; and the timetable that applies them (`core.lifecycle.Bounded`).

The single-field checks are in the field table (`fields`); `validate` calls this once per
schedule, after those.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from typing import Any, Protocol

from kiqbeat.core.cron import Every
from kiqbeat.core.lifecycle import Bounded, OneShot, shortest_period_s
from kiqbeat.core.limits import MAX_EXCLUDED_DATES
from kiqbeat.core.schedule import Timetable
from kiqbeat.errors import did_you_mean, shown

_ONE_SHOT_REFUSES = ("start_at", "end_at", "except", "max_runs")


def named_calendars(definition: Mapping[str, Any]) -> list[str]:
    """The calendar names a definition's `except` gives (its items that are not dates)."""
    items = definition.get("except")
    items = [items] if isinstance(items, str) else items
    if not isinstance(items, list):
        return []
    return list(dict.fromkeys(i for i in items if isinstance(i, str) and not i[:1].isdigit()))


def with_calendars(definition: Mapping[str, Any],
                   held: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The definition with the dates of each calendar its `except` names that `held` (the
    store's calendars) holds written into its own `calendars`, as a document's are: the
    store's dates, whatever it defined under that name. Unchanged when it names none."""
    names = [n for n in named_calendars(definition) if n in held]
    if not names:
        return dict(definition)
    own = definition.get("calendars")
    own = dict(own) if isinstance(own, Mapping) else {}
    return {**definition, "calendars": {**own, **{n: list(held[n]) for n in names}}}


class _Problems(Protocol):
    """What the caller's checker offers: a list to append messages to."""

    problems: list[str]


def lifecycle_rules(raw: Mapping[str, Any], values: Mapping[str, Any],
                    top: Mapping[str, Any], timetable: Timetable, zone_name: str,
                    label: str, at: Callable[[str], str], out: _Problems,
                    ) -> tuple[Timetable, dict[str, Any]] | None:
    """The schedule's timetable with its life applied, and the fields its stored definition
    needs written in (the calendars it names, its zone when it reads dates in the
    document's, instants given as datetimes); None after adding the problems to `out`."""
    before = len(out.problems)
    written: dict[str, Any] = {}
    if isinstance(timetable, OneShot):
        refused = [k for k in _ONE_SHOT_REFUSES if k in raw]
        if refused:
            out.problems.append(f"{label}: {', '.join(map(repr, refused))} cannot go with "
                                "'at', which has a single tick; use cron or every for a "
                                "recurring schedule")
    start, end = values["start_at"], values["end_at"]
    if start is not None and end is not None and end <= start:
        out.problems.append(f"{at('end_at')}: {shown(raw['end_at'])} is not after start_at "
                            f"{shown(raw['start_at'])}")
    for key in ("at", "start_at", "end_at"):
        if isinstance(raw.get(key), datetime) and values[key] is not None:
            written[key] = raw[key].isoformat()  # JSON holds no datetime; the same instant

    excluded: set[date] = set()
    named: dict[str, frozenset[date]] = {}
    if values["except"]:
        known: dict[str, tuple[date, ...]] = {**(top.get("calendars") or {}),
                                              **(values["calendars"] or {})}
        for item in values["except"]:
            if isinstance(item, date):
                excluded.add(item)
            elif item in known:
                named[item] = frozenset(known[item])
                excluded.update(known[item])
            else:
                listed = ", ".join(sorted(known)) or "none; define them under 'calendars:'"
                out.problems.append(f"{at('except')}: no calendar {shown(item)}"
                                    f"{did_you_mean(item, known)} (calendars: {listed})")
        if len(excluded) > MAX_EXCLUDED_DATES:
            out.problems.append(f"{at('except')}: excludes {len(excluded):,} dates with its "
                                f"calendars; at most {MAX_EXCLUDED_DATES:,}")
        if named:
            written["calendars"] = {**(raw.get("calendars") or {}), **{
                name: sorted(d.isoformat() for d in dates) for name, dates in named.items()}}
        if isinstance(timetable, Every) and "tz" not in raw and zone_name != "UTC":
            written["tz"] = zone_name  # the document's zone, in which its dates are read

    jitter_s = values["jitter"] or 0.0
    period_s = shortest_period_s(timetable) if jitter_s else None
    if period_s is not None and jitter_s > period_s:
        out.problems.append(
            f"{at('jitter')}: {shown(raw['jitter'])} ({jitter_s:g} s) is longer than the "
            f"shortest gap between two of its ticks ({period_s:,} s); at most that, so each "
            "job is delivered before the next tick's")
    if len(out.problems) > before:
        return None
    if start is None and end is None and not excluded:
        return timetable, written
    dates_zone = zone_name if isinstance(timetable, Every) else timetable.zone_name
    return Bounded(timetable, start, end, frozenset(excluded), dates_zone,
                   tuple(sorted(named.items()))), written

