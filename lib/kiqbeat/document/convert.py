"""Other tools' schedule files, converted to kiqbeat's document form (DESIGN §10).

The middle step of every document: `convert` finds the jobs (`detect.locate`: a
per-environment section, a wrapping key), tells which tool wrote the file (`detect`, or the
`--format` given), rewrites each entry in kiqbeat's form (`sidekiq` for sidekiq-scheduler
and sidekiq-cron, `rails` for GoodJob and Solid Queue), and warns wherever kiqbeat's reading
differs from the tool's; `validate` then checks the result exactly as it checks kiqbeat's
own. Every warning and error names the tool.

kiqbeat's own form passes through untouched: the readers of the other tools' files (`sidekiq`,
`rails`, `core.fugit`, `core.natural`) are imported only when a file needs them, so that an
invocation reading kiqbeat's own document never loads them.

All four tools read crons with fugit, so each import warns, per schedule:

- where fugit fires the cron on other days (`core.fugit.fugit_differences`);
- where daylight saving makes kiqbeat's fire times differ from fugit's within the 12
  months after the `now` given (`core.fugit.fugit_dst_differences`: a fixed-time cron's
  skipped wall time fires when the gap ends in kiqbeat and not at all in fugit; a repeated
  one fires once in kiqbeat and in both passes in fugit) — only when a caller passes
  `now`: `kiqbeat validate`, `next` and `schedules import` do; an invocation does not, so
  a cold one neither runs that comparison nor logs its warnings;
- once per file, that zone-less crons ran in the app's zone (Rails `config.time_zone`, else
  `$TZ`, else the server clock: fugit's `EtOrbi`), while kiqbeat reads them in the
  document's `time_zone` (UTC by default); `app_zone` (`--app-zone`) sets that zone.

The daylight-saving comparison reads each cron in the zone it runs in, whatever gave it: a
zone in the cron (or in a natural-language phrase), `tz` (with `--honour-tz`), or the
app's zone; and under the schedule's own `dst:` when the file carries one. A sidekiq-cron
or sidekiq-scheduler file also gets, once (when `now` is given, as for daylight saving),
a warning that kiqbeat catches up the ticks an outage missed where the tool did not
(`_warn_catch_up`), naming the schedules it matters most for; kiqbeat's own keys in such a
file (`catch_up: latest`, `dst: fugit`, ...) are kept, which the same warning list says.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kiqbeat.core.cron import parse_cron
from kiqbeat.core.zones import zone
from kiqbeat.document.detect import detect_format, locate
from kiqbeat.document.fields import KIQBEAT_MARKERS
from kiqbeat.document.imported import (
    GOOD_JOB,
    KIQBEAT,
    SIDEKIQ_CRON,
    SIDEKIQ_SCHEDULER,
    SOLID_QUEUE,
    Converted,
    ImportOptions,
    check_format,
    ruby_values,
)
from kiqbeat.errors import ConfigError, shown

__all__ = ["Converted", "ImportOptions", "convert", "detect_format"]


def convert(doc: object, options: ImportOptions | None = None, *, source: str = "",
            now: datetime | None = None) -> Converted:
    """`doc` in kiqbeat's document form, plus warnings and problems from converting it.

    `now` starts the 12 months searched for daylight-saving differences (none when None).
    """
    options = options or ImportOptions()
    problems: list[str] = []
    if isinstance(doc, dict) and "kiqbeat" in doc and not any(k in doc for k in KIQBEAT_MARKERS):
        options, problems = options.merged(doc["kiqbeat"])
        doc = {k: v for k, v in doc.items() if k != "kiqbeat"}
    for check, value in ((check_format, options.format), (zone, options.app_zone)):
        if value is not None:
            try:
                check(value)
            except ConfigError as exc:
                problems.extend(exc.problems)
    if problems:
        return Converted(KIQBEAT, {}, problems=problems)
    out = Converted(options.format or KIQBEAT, {}, options=options)
    if options.format != KIQBEAT:
        doc = locate(doc, out)
        if out.problems:
            return out
    if options.format:
        fmt, why = options.format, "as --format says"
    else:
        fmt, why = detect_format(doc, source, tuple(out.hints))
    out.format = fmt
    if fmt == KIQBEAT:
        if isinstance(doc, dict):
            out.document = doc
        else:
            out.problems.append(
                f"the document is a {type(doc).__name__} ({shown(doc)}), not a mapping; "
                "expected 'schedules:' (kiqbeat), ':scheduler: :schedule:' (sidekiq-scheduler) "
                "or a hash or list of jobs (sidekiq-cron, GoodJob, Solid Queue)")
        return out
    out.warnings.insert(0, f"read as a {out.tool} file ({why}) and converted to kiqbeat's "
                           "form; --format names another tool")
    out.document = {"schedules": _schedules(ruby_values(doc), out)}
    if options.app_zone:
        out.document["time_zone"] = options.app_zone
    schedules = out.document["schedules"]
    if fmt in (SIDEKIQ_CRON, SIDEKIQ_SCHEDULER):
        out.report_kept()
        if now is not None:  # as the DST comparison: an import a person reads
            _warn_catch_up(schedules, out, now)
    _warn_local_zones(schedules, out)
    _warn_fugit_readings(schedules, out)
    if now is not None:
        _warn_dst(schedules, out, now)
    # Every warning names the tool whose reading it compares with kiqbeat's.
    out.warnings[1:] = [w if out.tool in w else f"{out.tool} import: {w}"
                        for w in out.warnings[1:]]
    return out


def _schedules(doc: object, out: Converted) -> dict[str, Any]:
    from kiqbeat.document import rails, sidekiq  # another tool's file only

    schedules: dict[str, Any] = {}
    if out.format in (GOOD_JOB, SOLID_QUEUE):
        if not isinstance(doc, dict):
            out.problems.append(f"expected a mapping of job names to entries, got {shown(doc)}")
            return schedules
        unqueued: list[str] = []
        read = rails.from_good_job if out.format == GOOD_JOB else rails.from_solid_queue
        for name, entry in doc.items():
            if entry is None and out.format == SOLID_QUEUE:
                out.warnings.append(f"schedule {shown(name)}: skipped: it is empty, so "
                                    "Solid Queue did not load it either")
            elif sidekiq.is_entry(entry, f"schedule {shown(name)}", out):
                converted = read(name, entry, out, unqueued)
                if converted is not None:
                    schedules[name] = converted
        out.report_ignored(rails.GOOD_JOB_KEYS if out.format == GOOD_JOB
                           else rails.SOLID_QUEUE_KEYS)
        out.report_unqueued(unqueued, rails.CLASS_QUEUE)
    elif out.format == SIDEKIQ_SCHEDULER:
        entries = sidekiq.scheduler_entries(doc, out) if isinstance(doc, dict) else {}
        for name, entry in entries.items():
            converted = sidekiq.from_scheduler(name, entry, out)
            if converted is not None:
                schedules[name] = converted
        sidekiq.warn_intervals(schedules, out)
        out.report_unqueued(sidekiq.unqueued(schedules), sidekiq.CLASS_QUEUE)
    elif isinstance(doc, dict | list):
        for name, entry in sidekiq.cron_entries(doc, out).items():
            converted = sidekiq.from_cron(name, entry, out)
            if converted is not None:
                schedules[name] = converted
        out.report_ignored(sidekiq.CRON_KEYS)
        out.report_unqueued(sidekiq.unqueued(schedules), sidekiq.CLASS_QUEUE)
    return schedules


def _cron_of(entry: object, out: Converted) -> Any:
    """The entry's cron in its zone, under its `dst:` (None when it has none or it is
    invalid: validation reports that)."""
    from kiqbeat.core.dst import CRON, dst_policy

    if not isinstance(entry, dict) or not isinstance(entry.get("cron"), str):
        return None
    tz = entry.get("tz") if isinstance(entry.get("tz"), str) else None
    try:
        policy = dst_policy(entry["dst"]) if "dst" in entry else CRON
        return parse_cron(entry["cron"], tz or out.options.app_zone or "UTC", policy)
    except ConfigError:
        return None


# A schedule that fires this often or more (its shortest gap between ticks) pushes many
# jobs at once when kiqbeat catches up an outage: the catch-up warning names it.
_FREQUENT_S = 15 * 60


def _warn_catch_up(schedules: dict[str, Any], out: Converted, now: datetime) -> None:
    """Warn once that kiqbeat pushes the ticks an outage missed (catch_up: all, up to the
    window) where sidekiq-cron and sidekiq-scheduler did not, naming the frequent schedules
    (in the two days after `now`) that leave it at that."""
    from datetime import timedelta

    from kiqbeat.core.cron import parse_every

    start, gaps = now, {}  # gaps: the shortest gap found per timetable key (None: long)
    left = [n for n, e in schedules.items() if isinstance(e, dict) and "catch_up" not in e]
    if not left:
        return
    frequent = []
    for name in left:
        entry = schedules[name]
        try:
            timetable = (_cron_of(entry, out) if "cron" in entry
                         else parse_every(str(entry["every"])) if "every" in entry else None)
        except ConfigError:
            continue
        if timetable is None:
            continue
        if timetable.key not in gaps:
            gaps[timetable.key] = _short_gap_s(timetable, start, start + timedelta(days=2))
        gap_s = gaps[timetable.key]
        if gap_s is not None:
            frequent.append((gap_s, name))
    frequent.sort()
    listed = ", ".join(shown(n) for _, n in frequent[:5]) + (", ..." if len(frequent) > 5
                                                             else "")
    before = ("sidekiq-cron enqueued only the latest missed tick, and only while it was "
              "younger than its reschedule_grace_period (60 s by default)"
              if out.format == SIDEKIQ_CRON else
              "sidekiq-scheduler (rufus-scheduler in the Sidekiq process) ran none of the "
              "ticks missed while no Sidekiq process ran")
    most = (f"; this matters most for the {len(frequent)} schedule(s) firing every "
            f"{_FREQUENT_S // 60} minutes or more often ({listed}), and for any whose jobs "
            "run long" if frequent else "; this matters most for any schedule whose jobs "
            "run long")
    out.warnings.append(
        f"catch-up: after an outage (a deploy, a crash, a stopped trigger) kiqbeat pushes "
        f"every tick missed within missed_jobs_window (1h by default) at once (catch_up: "
        f"all, its default) for the {len(left)} schedule(s) without catch_up; {before}"
        f"{most}. To keep {out.tool}'s behaviour, add catch_up: latest (one job, the "
        "newest) or catch_up: none (only ticks under two minutes old) to them, or convert "
        "the file with kiqbeat convert --catch-up latest")


def _warn_fugit_readings(schedules: dict[str, Any], out: Converted) -> None:
    """Warn per schedule where fugit, which every tool uses, fired the cron on other days."""
    from kiqbeat.core.fugit import fugit_differences  # another tool's file only

    for name, entry in schedules.items():
        expr = entry.get("cron")
        if not isinstance(expr, str):
            continue
        try:
            differences = fugit_differences(expr)
        except ConfigError:
            continue  # reported when the document is validated
        out.warnings.extend(f"schedule {shown(name)}: {out.tool} read this cron differently: {d}"
                            for d in differences)


def _warn_dst(schedules: dict[str, Any], out: Converted, now: datetime) -> None:
    """Warn per schedule where daylight saving makes fugit's fire times differ from
    kiqbeat's within the next 12 months."""
    from kiqbeat.core.fugit import fugit_dst_differences  # another tool's file only

    for name, entry in schedules.items():
        cron = _cron_of(entry, out)
        if cron is not None and cron.zone_name != "UTC" and cron.is_fixed_time:
            out.warnings.extend(f"schedule {shown(name)}: {d}"
                                for d in fugit_dst_differences(cron, now, out.tool))


def _short_gap_s(timetable: Any, start: datetime, end: datetime) -> float | None:
    """The first gap between ticks in [start, end] of at most _FREQUENT_S, or None: ticks
    one after another, at most 192 steps over two days for a schedule that is not frequent."""
    try:
        tick = timetable.next_after(start)
        while tick <= end:
            following = timetable.next_after(tick)
            gap_s = float((following - tick).total_seconds())
            if gap_s <= _FREQUENT_S:
                return gap_s
            tick = following
    except ValueError:  # fires no more
        pass
    return None


def _warn_local_zones(schedules: dict[str, Any], out: Converted) -> None:
    """Warn once when crons carry no zone: the tool read them in the app's zone."""
    bare = []
    for name, entry in schedules.items():
        expr = entry.get("cron") if isinstance(entry, dict) else None
        if not isinstance(expr, str) or "tz" in entry:
            continue
        try:
            if parse_cron(expr, "Etc/GMT-14").zone_name == "Etc/GMT-14":
                bare.append(name)
        except ConfigError:
            continue  # reported when the document is validated
    if not bare:
        return
    listed = ", ".join(map(shown, bare[:5])) + (", ..." if len(bare) > 5 else "")
    app_zone = out.options.app_zone
    if app_zone:
        out.warnings.append(f"{len(bare)} cron(s) without a zone ({listed}) run in "
                            f"{app_zone}, the app's zone given to the import (app_zone)")
        return
    out.warnings.append(
        f"{len(bare)} cron(s) without a zone ({listed}): {out.tool} read them in the app's "
        "zone (Rails config.time_zone, else $TZ, else the server's clock); kiqbeat reads "
        "them in the document's time_zone, UTC by default. If the app's zone is not UTC, "
        "pass --app-zone ZONE (or app_zone: ZONE under a top-level kiqbeat: key), or "
        "append the zone to each cron ('0 9 * * * Europe/Paris')")
