"""`kiqbeat validate` and `kiqbeat next`: check a document and preview its ticks.

Pure previews over the document pipeline and the time core: each schedule in plain English,
its next fire instants in UTC and in its own zone (daylight-saving moves marked), and its
job exactly as it would be pushed. `kiqbeat next NAME...` previews stored schedules
instead, read from the store with their state (runs used, pending skips, a pause in force):
its only Redis read.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kiqbeat.core.instants import option_instant, z_text
from kiqbeat.core.pause import Pause
from kiqbeat.core.schedule import Config, Schedule
from kiqbeat.document.imported import FORMATS, ImportOptions
from kiqbeat.document.sources import Sources, is_remote
from kiqbeat.errors import ConfigError, did_you_mean, shown


def reading(timetable: object) -> str:
    """The plain-English reading of a timetable (cron, interval or one-shot)."""
    from kiqbeat.core.describe import describe_timetable

    return describe_timetable(timetable)  # type: ignore[arg-type]


def _described(schedule: Schedule) -> str:
    """The timetable's reading, then its life's rules, then '(disabled)' when it is."""
    from kiqbeat.core.describe import describe_life

    life = describe_life(schedule)
    return (reading(schedule.timetable) + (f"; {life}" if life else "")
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


@dataclass(frozen=True)
class StoredState:
    """What the store holds beside a stored schedule's definition, which its preview
    applies: ticks pushed over its life, skips pending, a pause in force (or `enabled:
    false` in its definition), and whether `status` shows it ended."""

    runs: int = 0
    skips: int = 0
    pause: Pause | None = None
    disabled: bool = False
    ended: bool = False

    def paused_through(self) -> datetime | None:
        """The last instant whose ticks the pause passes over (ENDED: until resumed)."""
        from kiqbeat.core.instants import from_ms
        from kiqbeat.core.lifecycle import ENDED

        if self.pause is not None:
            return ENDED if self.pause.until_ms is None else from_ms(self.pause.until_ms)
        return ENDED if self.disabled else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"runs": self.runs, "skips": self.skips, "ended": self.ended,
                "paused": None if self.pause is None else self.pause.as_dict(),
                "enabled": not self.disabled}

    def line(self) -> str:
        """Its words for a person ('' when there is nothing to say)."""
        parts = [f"{self.runs:,} run{'' if self.runs == 1 else 's'} pushed"] if self.runs else []
        if self.skips:
            parts.append(f"{self.skips:,} tick{'' if self.skips == 1 else 's'} to skip")
        if self.pause is not None:
            parts.append(self.pause.line())
        elif self.disabled:
            parts.append("paused (enabled: false in its definition)")
        if self.ended:
            parts.append("ended")
        return "; ".join(parts)


def next_fires(config: Config, after: datetime, count: int) -> list[list[Fire]]:
    """Per schedule, its next `count` fire instants after `after`, in UTC and its own zone
    (the ticks it pushes, and the instants its DST policy leaves unfired, fate 'dst': see
    `_previews` for the ticks its rules withhold too)."""
    return [[f for f in fires if f.get("fate") in (None, "dst")]
            for fires in _previews(config, after, count, None)]


def _previews(config: Config, after: datetime, count: int, until: datetime | None,
              states: Sequence[StoredState] = ()) -> list[list[Fire]]:
    """Per schedule, its next `count` pushed ticks in (after, until], in UTC and its own
    zone, with the ticks its rules withhold listed among them (`lifecycle.upcoming`): each
    with its DST note, its delivery instant under jitter, or why it is withheld. `states`
    (one per schedule, for stored ones) adds the run count, skips and pause."""
    from kiqbeat.core.lifecycle import upcoming
    from kiqbeat.core.zones import zone

    previews = []
    for i, schedule in enumerate(config.schedules):
        state = states[i] if states else StoredState()
        local_zone = zone(schedule.timetable.zone_name)
        fires: list[Fire] = []
        for line in upcoming(schedule, after, count=count, until=until, runs=state.runs,
                             skips=state.skips, paused_through=state.paused_through()):
            local = line.tick.astimezone(local_zone)
            fire: Fire = {"utc": z_text(line.tick), "local": local.isoformat(),
                          "zone_abbrev": local.strftime("%Z"),
                          "weekday": local.strftime("%a"),
                          "dst": (line.note if line.note and line.fate in ("", "dst")
                                  else None)}
            if line.delivery is not None:
                fire["delivered"] = z_text(line.delivery, "milliseconds")
                fire["jitter_ms"] = (line.delivery - line.tick) // timedelta(milliseconds=1)
            if line.fate:
                fire["fate"], fire["why"] = line.fate, line.note
            fires.append(fire)
        previews.append(fires)
    return previews


# What a preview line says of a tick withheld, by its fate (`lifecycle.upcoming`); {why} is
# the fate's note.
_WITHHELD = {"dst": "not pushed", "excluded": "excluded: {why}, not pushed",
             "before start_at": "before start_at, not pushed; {why}",
             "after end_at": "after end_at, not pushed: the schedule has ended",
             "run limit": "run limit: {why}, not pushed: the schedule has ended",
             "paused": "paused {why}, not pushed", "skipped": "skipped ({why}), not pushed"}


def _marks(fire: Fire) -> str:
    """What a preview line says beside the instant: DST, jitter, or why it is withheld."""
    marks = [str(fire["dst"])] if fire["dst"] else []
    if "delivered" in fire:
        from kiqbeat.core.describe import duration_text

        ms = int(fire["jitter_ms"] or 0)
        marks.append(f"delivered {str(fire['delivered'])[11:23]}Z, "
                     f"+{duration_text(ms / 1000 if ms % 1000 else ms // 1000)} jitter")
    if (fate := fire.get("fate")) in _WITHHELD:
        marks.append(_WITHHELD[str(fate)].format(why=fire.get("why")))
    return f"   [{'; '.join(marks)}]" if marks else ""


# A FILE argument ending so is a document even when no such file exists (a typo says "file
# not found", rather than looking for a stored schedule of that name).
DOCUMENT_SUFFIXES = (".yaml", ".yml", ".json")


def _is_document(text: str) -> bool:
    """True when `next`'s first argument names a document: s3://, ssm:, appconfig:, a file
    that exists, or a name ending .yaml, .yml or .json; else it is a stored schedule's."""
    return (is_remote(text) or text.lower().endswith(DOCUMENT_SUFFIXES)
            or Path(text).is_file())


def _next_target(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """What `next` previews: (a document source, its NAMEs), or (None, stored NAMEs).

    --store: every argument is a stored schedule's name. --config SOURCE: that document,
    every argument a name in it. Else a first argument that names a document (see
    `_is_document`) is that document, the others its names; any other first argument is a
    stored schedule's name, as are the others. No argument: $KIQBEAT_CONFIG's document."""
    given = ([args.file] if args.file else []) + list(args.names)
    if args.store:
        if getattr(args, "config_source", None):
            raise ConfigError("give --store (stored schedules) or --config (a document), "
                              "not both")
        if not given:
            raise ConfigError("--store previews stored schedules: name them "
                              "(kiqbeat next --store NAME ...)")
        return None, given
    if getattr(args, "config_source", None):
        return args.config_source, given
    if given and _is_document(given[0]):
        return given[0], given[1:]
    if given:
        return None, given
    return _document_source(None), []


def _next_config(args: argparse.Namespace) -> tuple[Config, list[StoredState]]:
    """The schedules `next` previews, with their stored state (stored schedules only): from
    the file (only NAMEs if given), the store, or --cron/--every."""
    from kiqbeat.core.cron import parse_cron, parse_every
    from kiqbeat.core.schedule import Schedule
    from kiqbeat.core.zones import zone_label

    if sum(map(bool, (args.file or args.store, args.cron, args.every))) > 1:
        raise ConfigError("give one of: a schedule FILE, stored schedule NAMEs, --cron EXPR "
                          "or --every DURATION")
    if args.cron or args.every:
        if args.names:
            raise ConfigError("schedule NAMEs go with a FILE, not with --cron or --every")
        if args.cron:
            cron = parse_cron(args.cron, args.tz, _dst_flag(args.dst))
            policy = f", dst {cron.dst.text}" if cron.dst.preset != "cron" else ""
            timing = f"{cron.written} ({zone_label(cron.zone_name)}{policy})"
            return Config((Schedule("", cron, "", timing=timing),)), []
        every = parse_every(args.every)
        return Config((Schedule("", every, "", timing=f"every {args.every}"),)), []
    source, names = _next_target(args)
    if source is None:
        return _stored(args, names)
    config = Sources().load_config(source, options=import_options(args), now=datetime.now(UTC))
    return only_named(config, names, source=source), []


def _dst_flag(text: str | None) -> Any:
    """`--dst`: a preset's name or a JSON mapping, as a DstPolicy; ConfigError naming it."""
    from kiqbeat.core.dst import CRON, dst_policy

    if text is None:
        return CRON
    try:
        value = json.loads(text) if text.lstrip().startswith("{") else text
        return dst_policy(value)
    except ValueError as exc:  # ConfigError is one; so is bad JSON
        raise ConfigError(f"--dst {shown(text)}: {exc}") from None


def _stored(args: argparse.Namespace, names: Sequence[str]) -> tuple[Config, list[StoredState]]:
    """The stored schedules `names` (each once, in order) with their state, read from the
    store the command's flags name; ConfigError naming those it does not hold, or holds set
    aside (and why)."""
    from kiqbeat.document.validate import read_definition
    from kiqbeat.entrypoints.common import opened_engine

    names = list(dict.fromkeys(names))  # a command line's: read BATCH a round trip
    with opened_engine(args) as engine:
        store = engine.store()
        rows = {row.name: row for row in store.rows(names)}
        unknown = [n for n in names if n not in rows]
        if unknown:
            hint = ("" if args.store or len(names) > 1 else
                    f" (and no file {shown(names[0])} here: a document is a file, s3://, "
                    "ssm: or appconfig:)")
            raise ConfigError([str(p) + hint for p in store.no_schedule(unknown).problems])
        schedules, states = [], []
        for name in names:
            row = rows[name]
            if row.definition is None or row.next_tick is None:
                raise ConfigError(f"schedule {shown(name)} is set aside, not planned: "
                                  f"{row.set_aside}")
            data = json.dumps(dict(row.definition)).encode(errors="surrogateescape")
            schedules.append(read_definition(name, data, window_s=store.window_s))
            life = row.life or {}
            states.append(StoredState(runs=int(life.get("runs", 0)),
                                      skips=int(life.get("skips", 0)), pause=row.pause,
                                      disabled=row.pause is None and not row.enabled,
                                      ended=row.ended))
    return Config(tuple(schedules)), states


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
    """The FILE argument, else $KIQBEAT_CONFIG (any source: a file, s3://, ssm:, appconfig:);
    ConfigError when neither names one."""
    if not (source := given or os.environ.get("KIQBEAT_CONFIG")):
        raise ConfigError("no schedule document: name one (--config SOURCE, or the FILE "
                          "argument of validate and next) or set KIQBEAT_CONFIG (a file, "
                          "s3://BUCKET/KEY, ssm:/NAME or appconfig:APP/ENV/PROFILE)")
    return source


def cmd_next(args: argparse.Namespace) -> int:
    until = option_instant(args.until, "--until") if args.until else None
    count = args.n if args.n is not None else (MAX_PREVIEW if until else 5)
    if not 1 <= count <= MAX_PREVIEW:
        raise ConfigError(f"-n {count}: expected a count from 1 to {MAX_PREVIEW}")
    after = option_instant(args.after, "--from") if args.after else datetime.now(UTC)
    if until is not None and until <= after:
        raise ConfigError(f"--until {args.until!r} is not after --from "
                          f"{z_text(after)!r}")
    config, states = _next_config(args)
    previews = _previews(config, after, count, until, states)
    stored: list[StoredState | None] = list(states) or [None] * len(config.schedules)
    if args.json:
        from kiqbeat.core.describe import describe_life

        print(json.dumps({"after": z_text(after), **({"until": z_text(until)} if until else {}),
                          "schedules": [
            {"name": s.name or None, "timing": s.timing, "zone": s.timetable.zone_name,
             "reading": reading(s.timetable), "enabled": s.enabled,
             **({"life": life} if (life := describe_life(s)) else {}),
             **({"stored": state.as_dict()} if state is not None else {}), "fires": fires}
            for s, state, fires in zip(config.schedules, stored, previews, strict=True)]},
            indent=2))
        return 0
    span = f" until {z_text(until, 'seconds')}" if until else ""
    print(f"after {z_text(after, 'seconds')}{span}:")
    for s, state, fires in zip(config.schedules, stored, previews, strict=True):
        title = f"{s.name}: {s.timing}" if s.name else s.timing
        print(f"{title}: {_described(s)}")
        if state is not None and (said := state.line()):
            print(f"  stored: {said}")
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
