"""`kiqbeat validate` and `kiqbeat next`: check a document and preview its ticks, no Redis.

Pure previews over the document pipeline and the time core: each schedule in plain English,
its next fire instants in UTC and in its own zone (daylight-saving moves marked), and its
job exactly as it would be pushed.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from kiqbeat.core.schedule import Config, Schedule
from kiqbeat.document.imported import FORMATS, ImportOptions
from kiqbeat.document.sources import Sources
from kiqbeat.errors import ConfigError, did_you_mean
from kiqbeat.settings import Settings


def _reading(timetable: object) -> str:
    """The plain-English reading of a timetable (cron, interval or one-shot)."""
    from kiqbeat.core.describe import describe_timetable

    return describe_timetable(timetable)  # type: ignore[arg-type]


def _described(schedule: Schedule) -> str:
    """The timetable's reading, then its life's rules, then '(disabled)' when it is."""
    from kiqbeat.core.describe import describe_life

    life = describe_life(schedule)
    return (_reading(schedule.timetable) + (f"; {life}" if life else "")
            + ("" if schedule.enabled else " (disabled)"))


def add_import_flags(parser: argparse.ArgumentParser) -> None:
    """The options that say how to read another tool's schedule file."""
    group = parser.add_argument_group("importing another tool's file")
    group.add_argument("--format", choices=FORMATS,
                       help="the tool that wrote the file (default: detected)")
    group.add_argument("--section", metavar="NAME",
                       help="the per-environment section to read, e.g. production")
    group.add_argument("--app-zone", metavar="ZONE",
                       help="the app's zone (Rails config.time_zone or $TZ), in which the "
                            "tool read crons without a zone")
    group.add_argument("--honour-tz", action="store_true",
                       help="apply per-job tz/timezone keys, which sidekiq-cron and "
                            "sidekiq-scheduler ignore")


def import_options(args: argparse.Namespace) -> ImportOptions:
    """The import options given on the command line."""
    return ImportOptions(format=args.format, section=args.section, app_zone=args.app_zone,
                         honour_tz=args.honour_tz)


def cmd_validate(args: argparse.Namespace) -> int:
    source = _document_source(args.file)
    config = Sources().load_config(source, options=import_options(args), now=datetime.now(UTC))
    count = len(config.schedules)
    print(f"{source}: OK, {count} schedule{'' if count == 1 else 's'}")
    rows = [(s.name, s.timing, f"{s.job_class} -> {s.queue}", _described(s))
            for s in config.schedules]
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(3)]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row[:3], widths, strict=True))
              + "  " + row[3])
    for warning in config.warnings:
        print(f"warning: {warning}")
    if args.jobs:
        _print_jobs(config)
    return 0


def _print_jobs(config: Config) -> None:
    """Each schedule's next job, byte for byte as it would be pushed (stamps: now)."""
    from kiqbeat.core.payload import job_json

    now = datetime.now(UTC)
    for schedule in config.schedules:
        try:
            tick = schedule.timetable.next_after(now)
        except ValueError:  # does not fire again
            continue
        print(f"{schedule.name} at {tick.isoformat()}:")
        print("  " + job_json(schedule, tick, pushed_at=now))


Fire = dict[str, Any]  # JSON values: str, an int (jitter_ms), None


def _next_fires(config: Config, after: datetime, count: int) -> list[list[Fire]]:
    """Per schedule, its next `count` fire instants after `after`, in UTC and its own zone
    (the ticks it pushes: see `_previews` for the ticks its rules withhold too)."""
    return [[f for f in fires if "fate" not in f]
            for fires in _previews(config, after, count, None)]


def _previews(config: Config, after: datetime, count: int,
              until: datetime | None) -> list[list[Fire]]:
    """Per schedule, its next `count` pushed ticks in (after, until], in UTC and its own
    zone, with the ticks its rules withhold listed among them (`lifecycle.upcoming`): each
    with its DST note, its delivery instant under jitter, or why it is withheld."""
    from kiqbeat.core.lifecycle import upcoming
    from kiqbeat.core.zones import zone

    previews = []
    for schedule in config.schedules:
        local_zone = zone(schedule.timetable.zone_name)
        fires: list[Fire] = []
        for line in upcoming(schedule, after, count=count, until=until):
            local = line.tick.astimezone(local_zone)
            fire: Fire = {"utc": _z(line.tick), "local": local.isoformat(),
                          "zone_abbrev": local.strftime("%Z"),
                          "weekday": local.strftime("%a"),
                          "dst": line.note if line.note and not line.fate else None}
            if line.delivery is not None:
                fire["delivered"] = _z(line.delivery.isoformat(timespec="milliseconds"))
                fire["jitter_ms"] = (line.delivery - line.tick) // timedelta(milliseconds=1)
            if line.fate:
                fire["fate"], fire["why"] = line.fate, line.note
            fires.append(fire)
        previews.append(fires)
    return previews


def _z(instant: datetime | str) -> str:
    """An instant (or its ISO text) in UTC written with 'Z'."""
    text = instant if isinstance(instant, str) else instant.isoformat()
    return text.replace("+00:00", "Z")


def _marks(fire: Fire) -> str:
    """What a preview line says beside the instant: DST, jitter, or why it is withheld."""
    marks = [str(fire["dst"])] if fire["dst"] else []
    if "delivered" in fire:
        marks.append(f"delivered {str(fire['delivered'])[11:23]}Z, "
                     f"+{_offset_text(int(fire['jitter_ms'] or 0))} jitter")
    fate = fire.get("fate")
    if fate == "excluded":
        marks.append(f"excluded: {fire['why']}, not pushed")
    elif fate == "before start_at":
        marks.append(f"before start_at, not pushed; {fire['why']}")
    elif fate == "after end_at":
        marks.append("after end_at, not pushed: the schedule has ended")
    elif fate == "run limit":
        marks.append(f"run limit: {fire['why']}, not pushed: the schedule has ended")
    return f"   [{'; '.join(marks)}]" if marks else ""


def _offset_text(ms: int) -> str:
    from kiqbeat.core.describe import duration_text

    return duration_text(ms / 1000 if ms % 1000 else ms // 1000)


def _next_config(args: argparse.Namespace) -> Config:
    """The schedules `next` previews: from the file (only NAMEs if given), or --cron/--every."""
    from kiqbeat.core.cron import parse_cron, parse_every
    from kiqbeat.core.schedule import Schedule

    if sum(map(bool, (args.file, args.cron, args.every))) > 1:
        raise ConfigError("give one of: a schedule FILE, --cron EXPR or --every DURATION")
    if args.cron or args.every:
        if args.names:
            raise ConfigError("schedule NAMEs go with a FILE, not with --cron or --every")
        if args.cron:
            cron = parse_cron(args.cron, args.tz)
            return Config((Schedule("", cron, "", timing=f"{cron.expr} ({cron.zone_name})"),))
        every = parse_every(args.every)
        return Config((Schedule("", every, "", timing=f"every {args.every}"),))
    source = _document_source(args.file)
    config = Sources().load_config(source, options=import_options(args), now=datetime.now(UTC))
    return only_named(config, args.names, source=source)


def only_named(config: Config, names: Sequence[str], *, source: str = "") -> Config:
    """The config with only the schedules `names` (all when none); ConfigError naming the
    unknown ones, with a did-you-mean hint and the document's names."""
    if not names:
        return config
    by_name = {s.name: s for s in config.schedules}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        listed = ", ".join(by_name) or "none"
        raise ConfigError([f"no schedule {n!r}{did_you_mean(n, by_name)}" for n in unknown]
                          + [f"the file's schedules are: {listed}"], source=source)
    return replace(config, schedules=tuple(by_name[n] for n in names))


def _document_source(given: str | None) -> str:
    """The FILE argument, else $KIQBEAT_CONFIG (any source: a file, s3://, ssm:, appconfig:)."""
    return given or Settings(config_source=os.environ.get("KIQBEAT_CONFIG") or ""
                             ).require_config()


def cmd_next(args: argparse.Namespace) -> int:
    until = parse_instant(args.until, "--until") if args.until else None
    count = args.n if args.n is not None else (MAX_PREVIEW if until else 5)
    if not 1 <= count <= MAX_PREVIEW:
        raise ConfigError(f"-n {count}: expected a count from 1 to {MAX_PREVIEW}")
    after = parse_instant(args.after, "--from") if args.after else datetime.now(UTC)
    if until is not None and until <= after:
        raise ConfigError(f"--until {args.until!r} is not after --from "
                          f"{_z(after)!r}")
    config = _next_config(args)
    previews = _previews(config, after, count, until)
    if args.json:
        from kiqbeat.core.describe import describe_life

        print(json.dumps({"after": _z(after), **({"until": _z(until)} if until else {}),
                          "schedules": [
            {"name": s.name or None, "timing": s.timing, "zone": s.timetable.zone_name,
             "reading": _reading(s.timetable), "enabled": s.enabled,
             **({"life": life} if (life := describe_life(s)) else {}), "fires": fires}
            for s, fires in zip(config.schedules, previews, strict=True)]}, indent=2))
        return 0
    span = f" until {until.isoformat(timespec='seconds').replace('+00:00', 'Z')}" if until else ""
    print(f"after {after.isoformat(timespec='seconds').replace('+00:00', 'Z')}{span}:")
    for s, fires in zip(config.schedules, previews, strict=True):
        title = f"{s.name}: {s.timing}" if s.name else s.timing
        print(f"{title}: {_described(s)}")
        for fire in fires:
            utc, local = str(fire["utc"]), str(fire["local"])
            offset = local[-6:] if local[-6] in "+-" else "+00:00"
            line = (f"  {utc[:19].replace('T', ' ')} UTC   {local[:19].replace('T', ' ')} "
                    f"{fire['zone_abbrev']} ({offset}) {fire['weekday']}")
            print(line + _marks(fire))
        if not fires:
            print("  (no tick in that span)" if until else "  (does not fire again)")
    return 0


# Lines `next` prints per schedule at most (-n, and the default with --until).
MAX_PREVIEW = 1000


def parse_instant(text: str, option: str) -> datetime:
    try:
        instant = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ConfigError(f"{option} {text!r} is not an ISO 8601 instant "
                          "(e.g. 2026-03-08T07:00:00Z)") from exc
    if instant.tzinfo is None:
        raise ConfigError(f"{option} {text!r} has no UTC offset; add Z or +hh:mm")
    return instant.astimezone(UTC)
