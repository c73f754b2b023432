"""What the store's commands share (`kiqbeat schedules`, `missed`, `backfill`, ...): the
engine their flags describe, one way to print what they did, and a progress bar for the
long ones."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from kiqbeat.errors import ConfigError, foreign_json
from kiqbeat.settings import add_flags, flags_of

if TYPE_CHECKING:  # the engine (and the Redis client) when a command runs, not to parse its flags
    from kiqbeat.engine import Engine
    from kiqbeat.entrypoints.outcomes import Outcome


def store_flags(parser: argparse.ArgumentParser, *, note: bool = True) -> None:
    """The flags of a command on the store: the knobs' (its Redis, namespace, shard
    count...), --json and, unless `note` is false, --note (why, for the audit trail)."""
    add_flags(parser)
    parser.add_argument("--json", action="store_true", help="print JSON")
    if note:
        parser.add_argument("--note", metavar="TEXT", help="why, for the audit trail")


@contextmanager
def opened_engine(args: argparse.Namespace) -> Iterator[Engine]:
    """The engine of a command's flags over the KIQBEAT_* variables (its `store()` is the
    store they name), closed when the command is done.

    Its document is read first (cached for `store()`): a ConfigError from reading or
    validating it also says how to reach the store without it — an operator may need
    `missed`, `trigger` or `status` precisely while the document is broken."""
    from kiqbeat.engine import Engine

    engine = Engine.from_environ(flags=flags_of(args))
    engine.settings.shard_to_run(required=False)  # --shard, if any, one of --shard-count's
    try:
        if source := engine.settings.config_source:
            try:
                engine.sources.load_config(source)
            except ConfigError as exc:
                exc.args = (f"{exc}\n(the store's commands read the document for its "
                            "namespace and missed-jobs window; to run one before it is "
                            "fixed, leave the document out: KIQBEAT_CONFIG= kiqbeat COMMAND "
                            "--namespace PREFIX, no --config, PREFIX the document's "
                            "namespace if it sets one)",)
                raise
        yield engine
    finally:
        engine.close()


def print_warnings(warnings: Iterable[str]) -> None:
    """Each warning on stderr, a line each (`kiqbeat: warning: ...`)."""
    for warning in warnings:
        print(f"kiqbeat: warning: {warning}", file=sys.stderr, flush=True)


def print_outcome(outcome: Outcome, as_json: bool) -> int:
    """Print what a command did, as every store command prints it: its warnings on stderr,
    its JSON (`--json`: `errors.foreign_json`, safe on a terminal) or its lines on stdout,
    its problems on stderr; return its exit code."""
    print_warnings(outcome.warnings)
    print(foreign_json(outcome.result, indent=2) if as_json else "\n".join(outcome.lines))
    if outcome.problems:
        print(f"kiqbeat: {'; '.join(outcome.problems)}", file=sys.stderr)
    return outcome.code


@contextmanager
def progress_bar(show: bool, total: Callable[[], int | None], unit: str
                 ) -> Iterator[Callable[[int], None]]:
    """A progress bar's `update` on stderr (a no-op when not shown); `total` is asked only
    when the bar is drawn."""
    if not show:
        yield lambda n: None
        return
    # Imported here, not at the top: only the long commands draw a bar, and neither the
    # Lambda nor any other command should pay for loading it. An install from the
    # function's pinned requirements (the container image) has no tqdm: then there is no bar.
    try:
        from tqdm import tqdm  # type: ignore[import-untyped]
    except ImportError:
        yield lambda n: None
        return
    # A terminal that gives no size (`script`, some CI runners) would hide the bar.
    sized = min(os.get_terminal_size(sys.stderr.fileno())) > 0
    with tqdm(total=total(), unit=unit, file=sys.stderr, dynamic_ncols=sized,
              ncols=None if sized else 80, nrows=None if sized else 24) as bar:
        yield bar.update
