"""An operator's commands over `kiqbeat.store`: `missed`, `backfill`, `trigger`, `history`.

- `missed` lists the ticks recorded as missed (older than the window when an invocation
  came, passed over by a `catch_up` policy, or owed when the schedule was paused), as
  ranges with their tick counts.
- `backfill` pushes recorded ticks, each exactly once whatever runs at the same time, and
  takes them out of the record; `--dry-run` only counts them.
- `trigger` pushes one job of a schedule now, with a jid no tick has.
- `history` lists a schedule's last pushes, newest first.

Each takes the engine's flags (the store's Redis, namespace, shard count, history size) and
`--json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

from kiqbeat.entrypoints.common import opened_engine, progress_bar
from kiqbeat.entrypoints.preview import parse_instant
from kiqbeat.errors import ConfigError
from kiqbeat.settings import add_flags
from kiqbeat.store import Backfill


def _print(args: argparse.Namespace, document: dict[str, Any], lines: list[str]) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False) if args.json else "\n".join(lines))


def _cmd_missed(args: argparse.Namespace) -> int:
    with opened_engine(args) as engine:
        store = engine.store()
        ranges = store.missed(args.names)
        listed = {r.name for r in ranges}
        unknown = [n for n in args.names if n not in listed and store.get(n) is None]
    if unknown:
        raise store.no_schedule(unknown)
    lines = [r.line() for r in ranges]
    if ranges:
        ticks = sum(r.ticks or 0 for r in ranges)
        uncounted = sum(r.ticks is None for r in ranges)
        more = "+" if uncounted or any(r.capped for r in ranges) else ""
        lines.append(f"{len(ranges):,} range(s), {ticks:,}{more} tick(s) recorded as missed"
                     + (f" ({uncounted:,} range(s) not counted: no valid definition)"
                        if uncounted else "")
                     + "; `kiqbeat backfill NAME ...` (or --all) pushes them")
    else:
        lines.append("no missed ticks recorded"
                     + (f" for {', '.join(map(repr, args.names))}" if args.names else ""))
    _print(args, {"missed": [r.as_dict() for r in ranges]}, lines)
    return 0


def _instant(text: str | None, option: str) -> datetime | None:
    return None if text is None else parse_instant(text, option)


def _cmd_backfill(args: argparse.Namespace) -> int:
    if bool(args.names) == args.all:
        raise ConfigError("name the schedules to backfill, or pass --all for every schedule "
                          "with missed ticks recorded (not both); nothing was done")
    since, until = _instant(args.since, "--since"), _instant(args.until, "--until")
    if since and until and since > until:
        raise ConfigError(f"--since {args.since!r} is later than --until {args.until!r}; "
                          "nothing was done")
    show = not (args.json or args.no_progress or args.dry_run) and sys.stderr.isatty()
    with opened_engine(args) as engine:
        backfill = partial(engine.store().backfill, args.names, since=since, until=until,
                           latest_only=args.latest_only)
        with progress_bar(show, lambda: backfill(dry_run=True).planned, " ticks") as progress:
            result = backfill(dry_run=args.dry_run, progress=progress)
    return _backfill_summary(args, result)


def _backfill_summary(args: argparse.Namespace, result: Backfill) -> int:
    """Print what a backfill did; its exit code: 1 when a named schedule was skipped or
    ticks were left for another run."""
    scope = f"{result.schedules:,} schedule(s)"
    if args.dry_run:
        more = "+" if result.capped else ""
        lines = [f"dry run: would push {result.planned:,}{'' if args.latest_only else more} "
                 f"tick(s) of {scope}"
                 + (f", the newest of each (--latest-only), and take {result.dropped:,}{more} "
                    "older one(s) out of the record unpushed" if args.latest_only else "")
                 + "; nothing pushed"]
    else:
        lines = [f"backfill of {scope}: {result.pushed:,} pushed, {result.already:,} already "
                 f"pushed by another backfill, {result.stale:,} left alone (the definition "
                 "changed meanwhile)"]
        lines += [f"pushed {j.schedule} tick {j.tick.isoformat()} jid {j.jid}"
                  for j in result.jobs[:20]]
        if result.pushed > 20:
            lines.append(f"... and {result.pushed - 20:,} more (--json lists the first "
                         f"{len(result.jobs):,})")
        if args.latest_only:
            lines.append("older ticks in scope were taken out of the record unpushed "
                         "(--latest-only)")
    lines += [f"skipped: {name}: {why}" for name, why in result.skipped]
    _print(args, result.as_dict() | {"dry_run": args.dry_run}, lines)
    problems = []
    if args.names and result.skipped:
        problems.append(f"{len(result.skipped)} named schedule(s) skipped")
    if result.stale:
        problems.append(f"{result.stale:,} tick(s) left recorded because their schedule "
                        "changed meanwhile; run the backfill again")
    if problems:
        print(f"kiqbeat: {'; '.join(problems)}", file=sys.stderr)
        return 1
    return 0


def _job_args(text: str) -> list[Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"--args {text!r} is not JSON ({exc}); it must be a JSON array, "
                          "e.g. '[42, \"eu\"]'") from None
    if not isinstance(value, list):
        raise ConfigError(f"--args must be a JSON array (the job's arguments), e.g. "
                          f"'[42, \"eu\"]', got {text!r}")
    return value


def _cmd_trigger(args: argparse.Namespace) -> int:
    job_args = None if args.args is None else _job_args(args.args)
    with opened_engine(args) as engine:
        done = engine.store().trigger(args.name, job_args)
    _print(args, done.as_dict(), [f"pushed {done.name!r} now: jid {done.jid} into queue "
                                  f"{done.queue!r}"])
    return 0


def _cmd_history(args: argparse.Namespace) -> int:
    with opened_engine(args) as engine:
        pushes = engine.store().history(args.name)
        kept = engine.settings.history
    lines = [p.line() for p in pushes] or [
        f"no pushes recorded for {args.name!r}"
        + (" (KIQBEAT_HISTORY / --history is 0: none are kept)" if kept == 0 else "")]
    _print(args, {"name": args.name, "history": [p.as_dict() for p in pushes]}, lines)
    return 0


def add_parser(sub: Any) -> None:
    """Register `kiqbeat missed`, `backfill`, `trigger` and `history` on the command's
    subparsers."""

    def command(name: str, help: str, func: Callable[[argparse.Namespace], int]
                ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help)
        p.set_defaults(func=func)
        return p

    def common(p: argparse.ArgumentParser) -> None:
        add_flags(p)
        p.add_argument("--json", action="store_true", help="print JSON")

    p = command("missed", "list the ticks recorded as missed (older than the window, "
                          "passed over by catch_up, or owed when paused), as ranges",
                _cmd_missed)
    p.add_argument("names", nargs="*", metavar="NAME", help="only these schedules")
    common(p)

    p = command("backfill", "push recorded missed ticks, each exactly once, and take them "
                            "out of the record", _cmd_backfill)
    p.add_argument("names", nargs="*", metavar="NAME", help="these schedules' ticks")
    p.add_argument("--all", action="store_true",
                   help="every schedule with missed ticks recorded (instead of NAMEs)")
    p.add_argument("--since", metavar="ISO",
                   help="only ticks at or after this instant (e.g. 2026-03-08T07:00:00Z)")
    p.add_argument("--until", metavar="ISO", help="only ticks at or before this instant")
    p.add_argument("--latest-only", action="store_true",
                   help="push only the newest tick in scope of each schedule; take the "
                        "others out of the record unpushed")
    p.add_argument("--dry-run", action="store_true",
                   help="count the ticks it would push; push and change nothing")
    p.add_argument("--no-progress", action="store_true",
                   help="draw no progress bar (none is drawn with --json or off a terminal)")
    common(p)

    p = command("trigger", "push one job of a schedule now (a manual run; paused or not)",
                _cmd_trigger)
    p.add_argument("name", metavar="NAME", help="the schedule's name")
    p.add_argument("--args", metavar="JSON",
                   help="the job's arguments instead of the schedule's, a JSON array")
    common(p)

    p = command("history", "a schedule's last pushes, newest first (ticks, backfills, "
                           "manual runs)", _cmd_history)
    p.add_argument("name", metavar="NAME", help="the schedule's name")
    common(p)
