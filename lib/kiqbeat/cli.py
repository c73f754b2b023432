"""The `kiqbeat` command: parse arguments, call the core, turn its result into output and an exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kiqbeat.errors import KiqbeatError


def _cmd_validate(args: argparse.Namespace) -> int:
    raise NotImplementedError


def _cmd_next(args: argparse.Namespace) -> int:
    raise NotImplementedError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kiqbeat",
        description="Leaderless cron for Sidekiq-compatible job queues.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check a schedule file and list its schedules")
    p.add_argument("file", help="schedule file (kiqbeat, sidekiq-scheduler or sidekiq-cron YAML/JSON)")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("next", help="preview upcoming fire times")
    p.add_argument("file", nargs="?", help="schedule file")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these schedules")
    p.add_argument("-n", type=int, default=5, help="how many fire times per schedule (default 5)")
    p.add_argument("--after", help="start after this ISO instant (default: now)")
    p.add_argument("--cron", help="preview a cron expression instead of a file")
    p.add_argument("--tz", default="UTC", help="zone for --cron (default UTC)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_next)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KiqbeatError as exc:
        print(f"kiqbeat: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
