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
from datetime import UTC, datetime

from kiqbeat.core.schedule import Config
from kiqbeat.document.imported import FORMATS, ImportOptions
from kiqbeat.document.sources import Sources
from kiqbeat.errors import ConfigError, did_you_mean
from kiqbeat.settings import Settings


def _reading(timetable: object) -> str:
    """The plain-English reading of a timetable (cron or interval)."""
    from kiqbeat.core.cron import Cron, Every
    from kiqbeat.core.describe import describe_cron, describe_every

    if isinstance(timetable, Cron):
        return describe_cron(timetable)
    if isinstance(timetable, Every):
        return describe_every(timetable)
    return ""


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
    rows = [(s.name, s.timing, f"{s.job_class} -> {s.queue}",
             _reading(s.timetable) + ("" if s.enabled else " (disabled)"))
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


def _next_fires(config: Config, after: datetime, count: int) -> list[list[dict[str, str | None]]]:
    """Per schedule, its next `count` fire instants after `after`, in UTC and its own zone."""
    from kiqbeat.core.cron import Cron
    from kiqbeat.core.lifecycle import ENDED
    from kiqbeat.core.zones import zone

    previews = []
    for schedule in config.schedules:
        timetable = schedule.timetable
        local_zone = zone(timetable.zone_name)
        fires: list[dict[str, str | None]] = []
        instant = after
        for _ in range(count):
            try:
                instant = timetable.next_after(instant)
            except ValueError:  # a cron that does not fire again within 400 years
                break
            if instant >= ENDED:  # past its end_at, a one-shot done
                break
            local = instant.astimezone(local_zone)
            note = timetable.dst_note(instant) if isinstance(timetable, Cron) else ""
            fires.append({"utc": instant.isoformat().replace("+00:00", "Z"),
                          "local": local.isoformat(), "zone_abbrev": local.strftime("%Z"),
                          "weekday": local.strftime("%a"), "dst": note or None})
        previews.append(fires)
    return previews


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
    if not 1 <= args.n <= 1000:
        raise ConfigError(f"-n {args.n}: expected a count from 1 to 1000")
    after = parse_instant(args.after, "--after") if args.after else datetime.now(UTC)
    config = _next_config(args)
    previews = _next_fires(config, after, args.n)
    if args.json:
        print(json.dumps({"after": after.isoformat().replace("+00:00", "Z"), "schedules": [
            {"name": s.name or None, "timing": s.timing, "zone": s.timetable.zone_name,
             "reading": _reading(s.timetable), "enabled": s.enabled, "fires": fires}
            for s, fires in zip(config.schedules, previews, strict=True)]}, indent=2))
        return 0
    print(f"after {after.isoformat(timespec='seconds').replace('+00:00', 'Z')}:")
    for s, fires in zip(config.schedules, previews, strict=True):
        title = f"{s.name}: {s.timing}" if s.name else s.timing
        flag = "" if s.enabled else " (disabled)"
        print(f"{title}: {_reading(s.timetable)}{flag}")
        for fire in fires:
            utc, local = str(fire["utc"]), str(fire["local"])
            offset = local[-6:] if local[-6] in "+-" else "+00:00"
            line = (f"  {utc[:19].replace('T', ' ')} UTC   {local[:19].replace('T', ' ')} "
                    f"{fire['zone_abbrev']} ({offset}) {fire['weekday']}")
            print(line + (f"   [{fire['dst']}]" if fire["dst"] else ""))
        if not fires:
            print("  (does not fire again)")
    return 0


def parse_instant(text: str, option: str) -> datetime:
    try:
        instant = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ConfigError(f"{option} {text!r} is not an ISO 8601 instant "
                          "(e.g. 2026-03-08T07:00:00Z)") from exc
    if instant.tzinfo is None:
        raise ConfigError(f"{option} {text!r} has no UTC offset; add Z or +hh:mm")
    return instant.astimezone(UTC)
