"""`kiqbeat convert`: another tool's schedule file written as a kiqbeat document.

The file is read as `kiqbeat validate` reads it (the same import flags); the document
(`document.emit`) goes to stdout or `-o FILE`, with the import's warnings as comments;
a one-line summary goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from kiqbeat.document.fields import CATCH_UP
from kiqbeat.document.read import read_file
from kiqbeat.errors import ConfigError


def cmd_convert(args: argparse.Namespace) -> int:
    from kiqbeat.document.emit import kiqbeat_document
    from kiqbeat.entrypoints.preview import import_options

    emitted = kiqbeat_document(read_file(args.file), source=args.file,
                               options=import_options(args), now=datetime.now(UTC),
                               catch_up=args.catch_up, dst=args.dst)
    if args.output:
        try:
            Path(args.output).write_text(emitted.text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
    else:
        sys.stdout.write(emitted.text)
    print(f"kiqbeat: converted {emitted.schedules} schedule(s) of {args.file}"
          + (f" into {args.output}" if args.output else "")
          + f"; {emitted.warnings} warning(s) kept as comments", file=sys.stderr)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `kiqbeat convert`."""
    from kiqbeat.entrypoints.preview import add_import_flags

    p = sub.add_parser("convert", help="write another tool's schedule file (sidekiq-cron, "
                                       "sidekiq-scheduler, GoodJob, Solid Queue) as a "
                                       "kiqbeat document")
    p.add_argument("file", help="the file to convert (YAML or JSON)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the document here (default: stdout)")
    p.add_argument("--catch-up", choices=CATCH_UP,
                   help="write catch_up: into every schedule that sets none (latest or "
                        "none: as the old tool, which did not catch up an outage)")
    p.add_argument("--dst", choices=("cron", "fugit"),
                   help="the document's dst: policy (fugit: the old tool's daylight-saving "
                        "instants)")
    add_import_flags(p)
    p.set_defaults(func=cmd_convert)
