"""An operator's commands over `kiqbeat.store`: `missed`, `backfill`, `trigger`, `report`,
`history`.

- `missed` lists the ticks recorded as missed (older than the window when an invocation
  came, passed over by a `catch_up` policy, or owed when the schedule was paused), as
  ranges with their tick counts.
- `backfill` pushes recorded ticks, each exactly once whatever runs at the same time, and
  takes them out of the record; `--dry-run` only counts them. It asks first (`--yes` or
  `--max-jobs N`) above BACKFILL_CONFIRM_JOBS jobs or before a schedule's first-seen, stops
  between calls at `--deadline` or on SIGINT/SIGTERM, and says what it pushed (exit 3, or
  128 + the signal, when it stopped before the end: run it again for the rest).
- `trigger` pushes one job of a schedule now, with a jid no tick has.
- `report` lists every tick of a span with what became of it (core/ticks.py).
- `history` lists a schedule's last pushes, newest first.

Each takes the engine's flags (the store's Redis, namespace, shard count, history size) and
`--json`. The command line is read into `kiqbeat.entrypoints.requests`' model, which the
Lambda handler reads its operator events into too: one set of checks, one runner
(`kiqbeat.entrypoints.outcomes.execute`). `run_request` runs `kiqbeat status` and the
`kiqbeat schedules` changes the same way.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from types import FrameType
from typing import Any

from kiqbeat.core.limits import BACKFILL_CONFIRM_JOBS
from kiqbeat.entrypoints import requests
from kiqbeat.entrypoints.common import opened_engine, print_outcome, progress_bar, store_flags


def run_request(kind: str, args: argparse.Namespace) -> int:
    """Read the command line into the request model, run it, print the outcome.

    A backfill's ticks are counted once (up to MAX_COUNTED_TICKS, on the command's
    deadline): without --yes the backfill counts them itself, before its confirmation
    checks, and its bar then shows the ticks pushed and their rate without a total; with
    --yes nothing else counts them, and a dry-run count gives the bar its total."""
    from kiqbeat.entrypoints.outcomes import execute  # the store: when a request runs

    request = requests.from_args(kind, args)
    show = (kind == "backfill" and not (args.json or args.no_progress or args.dry_run)
            and sys.stderr.isatty())
    with opened_engine(args) as engine, _stopped_by_signals() as signalled:
        deadline = time.monotonic() + engine.settings.deadline_s

        def total() -> int | None:
            if not request.yes:  # Store.backfill counts (confirm_above, pre_history)
                return None
            counted = execute(replace(request, dry_run=True), engine, deadline=deadline,
                              stop=lambda: bool(signalled))
            planned = counted.backfill.planned if counted.backfill else 0
            return min(planned, request.max_jobs) if request.max_jobs else planned

        with progress_bar(show, total, " ticks") as progress:
            outcome = execute(request, engine, deadline=deadline,
                              stop=lambda: bool(signalled), progress=progress)
    code = print_outcome(outcome, args.json)
    if signalled and outcome.backfill is not None and outcome.backfill.stopped == "signal":
        return 128 + signalled[0]  # as a shell reports a process a signal stopped
    return code


@contextmanager
def _stopped_by_signals() -> Iterator[list[int]]:
    """While in it, SIGINT and SIGTERM only note themselves (in the list yielded): a
    backfill stops cleanly between two calls instead of with a traceback mid-way. The
    previous handlers come back afterwards."""
    signalled: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        signalled.append(signum)

    if threading.current_thread() is not threading.main_thread():
        yield signalled  # signals reach the main thread only: nothing to catch here
        return
    previous = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield signalled
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def add_parser(sub: Any) -> None:
    """Register `kiqbeat status`, `missed`, `backfill`, `trigger`, `report` and `history` on
    the command's subparsers: each a request (`run_request`)."""

    def command(kind: str, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(kind, help=help)
        p.set_defaults(func=partial(run_request, kind))
        return p

    p = command("status", "counts by state, then per schedule (most overdue first): zone, "
                          "last tick covered, next tick, lag")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these schedules")
    p.add_argument("--limit", metavar="N", help=f"schedules shown (default "
                   f"{requests.DEFAULT_STATUS_ROWS}, at most {requests.MAX_NAMES:,})")
    p.add_argument("--offset", metavar="N", help="skip this many first (paging)")
    store_flags(p, note=False)

    p = command("missed", "list the ticks recorded as missed (older than the window, "
                          "passed over by catch_up, or owed when paused), as ranges")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these schedules")
    store_flags(p)

    p = command("backfill", "push recorded missed ticks, each exactly once, and take them "
                            "out of the record")
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
                   help="count the ticks it would push (exactly, up to 10,000,000); push and "
                        "change nothing")
    p.add_argument("--yes", action="store_true",
                   help=f"push them all even above {BACKFILL_CONFIRM_JOBS:,} jobs, or from "
                        "before a schedule was first seen (asked otherwise; nothing pushed)")
    p.add_argument("--reason", dest="reasons", action="append", metavar="REASON",
                   help="only ticks recorded for this reason (window, policy, paused, "
                        "overlap; repeatable); default: all but overlap, which is "
                        "backfilled only when named")
    p.add_argument("--max-jobs", metavar="N",
                   help="push at most N jobs, the oldest first (schedules in name order); "
                        "run it again for the next N")
    p.add_argument("--no-progress", action="store_true",
                   help="draw no progress bar (none is drawn with --json or off a terminal)")
    store_flags(p)

    p = command("trigger", "push one job of a schedule now (a manual run; paused or not)")
    p.add_argument("name", metavar="NAME", help="the schedule's name")
    p.add_argument("--args", metavar="JSON",
                   help="the job's arguments instead of the schedule's, a JSON array")
    store_flags(p)

    p = command("report", "every tick of a span and what became of it: succeeded, failed, "
                          "running, waiting, held, pushed, expired, skipped, missed, "
                          "backfilled "
                          "or pending")
    p.add_argument("name", metavar="NAME", help="the schedule's name")
    p.add_argument("--since", metavar="ISO",
                   help="ticks after this instant (default: a day before --until)")
    p.add_argument("--until", metavar="ISO", help="ticks at or before this instant "
                                                   "(default: now)")
    store_flags(p)

    p = command("history", "a schedule's last pushes, newest first (ticks, backfills, "
                           "manual runs)")
    p.add_argument("name", metavar="NAME", help="the schedule's name")
    store_flags(p)
