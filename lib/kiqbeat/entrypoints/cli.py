"""The `kiqbeat` command: parse arguments, call the core, report results and exit codes."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from kiqbeat.core.records import Push
from kiqbeat.core.report import Report
from kiqbeat.engine import Engine
from kiqbeat.entrypoints.common import opened_engine
from kiqbeat.entrypoints.console import add_parser as add_console_parser
from kiqbeat.entrypoints.loop import print_report, run_loop, stop_on_signals
from kiqbeat.entrypoints.operations import add_parser as add_operations_parser
from kiqbeat.entrypoints.preview import cmd_next, cmd_validate, parse_instant
from kiqbeat.entrypoints.schedules import add_parser as add_schedules_parser
from kiqbeat.errors import ConfigError, KiqbeatError
from kiqbeat.settings import add_flags, flags_of
from kiqbeat.store import MissedRange


def _engine(args: argparse.Namespace) -> Engine:
    return Engine.from_environ(flags=flags_of(args))


def _print_warnings(warnings: Sequence[str]) -> None:
    for warning in warnings:
        print(f"kiqbeat: warning: {warning}", file=sys.stderr, flush=True)


def _cmd_run_once(args: argparse.Namespace) -> int:
    engine = _engine(args)
    now = parse_instant(args.now, "--now") if args.now else None
    report = engine.run(now=now)
    if not args.json:
        _print_warnings(report.warnings)
    print_report(report, args.json, jobs=args.jobs, quiet=False)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    engine = _engine(args)
    current = engine.config()  # a broken document stops the command before it loops
    stop = stop_on_signals()
    observe = _metrics(args.metrics_port)

    def invoke() -> Report | None:
        nonlocal current
        try:
            current = engine.config()
            report = engine.run(current)
        except KiqbeatError as exc:
            print(f"kiqbeat: invocation failed: {exc}", file=sys.stderr, flush=True)
            observe(None)
            return None
        except Exception:  # a bug must not stop the service: the next invocation catches up
            print("kiqbeat: invocation failed unexpectedly:\n" + traceback.format_exc(),
                  file=sys.stderr, flush=True)
            observe(None)
            return None
        observe(report)
        if not args.json:  # each new one once; an invocation's own each time
            _print_warnings(report.warnings)
        print_report(report, args.json)
        return report

    def period_s() -> float:
        return 1.0 if any(s.timetable.has_seconds for s in current.schedules) else 60.0

    notes = sys.stderr if args.json else sys.stdout  # --json: stdout holds reports alone
    print(f"kiqbeat: running {len(current.schedules)} schedules; SIGTERM or Ctrl-C stops",
          file=notes, flush=True)
    run_loop(invoke, period_s, stop)
    engine.close()
    print("kiqbeat: stopped", file=notes, flush=True)
    return 0


def _metrics(port: int | None) -> Callable[[Report | None], None]:
    """What counts each invocation: Prometheus counters served on `port` (the web extra's
    prometheus-client), or nothing."""
    if port is None:
        return lambda report: None
    try:
        from kiqbeat.web.metrics import InvocationMetrics
    except ImportError as exc:
        raise ConfigError(f"--metrics-port needs the web extra: pip install 'kiqbeat[web]' "
                          f"({exc})") from None
    metrics = InvocationMetrics()
    metrics.serve(port, host="0.0.0.0")  # a pod's metrics port
    return metrics.observe


def _cmd_status(args: argparse.Namespace) -> int:
    if args.limit < 1 or args.offset < 0:
        raise ConfigError("--limit must be at least 1 and --offset at least 0")
    with opened_engine(args) as engine:
        store = engine.store()
        status = store.status(args.names, shard=engine.settings.shard, offset=args.offset,
                              limit=args.limit)
        # Named schedules also show their recorded missed ticks and their last pushes.
        records: dict[str, tuple[list[MissedRange], list[Push]]] = {}
        if args.names:
            missed = store.missed(args.names)
            records = {r.name: ([m for m in missed if m.name == r.name],
                                store.history(r.name)) for r in status.schedules}
        doc = engine.document_applied() if engine.settings.config_source else None
    counts = status.counts
    doc_json = doc and {"source": doc[0].source, "schedules": len(doc[0].definitions),
                        "applied": doc[1]}
    if args.json:
        document = {"now": status.now.isoformat(), "summary": asdict(counts),
                    "document": doc_json,
                    "offset": args.offset, "limit": args.limit,
                    "schedules": [r.as_dict() | _records_dict(records.get(r.name))
                                  for r in status.schedules],
                    "set_aside": [{"name": n, "why": why} for n, why in status.set_aside]}
        print(json.dumps(document, indent=2))
        return 0
    print(f"Redis clock: {status.now.isoformat(timespec='seconds')}; {counts.schedules} "
          f"schedules stored, {counts.indexed} indexed, {counts.overdue} due now, "
          f"{counts.set_aside} set aside"
          + (f", {counts.with_missed} with missed ticks recorded (`kiqbeat missed`)"
             if counts.with_missed else ""))
    if doc_json:
        print(f"document {doc_json['source']}: {doc_json['schedules']} schedules, "
              + ("applied" if doc_json["applied"] else
                 "changed since it was last applied (the next invocation applies it)"))
    for r in status.schedules:
        print(r.line())
        if r.name in records:
            ranges, pushes = records[r.name]
            for m in ranges:
                print(f"  missed: {m.line()}")
            for push in pushes:
                print(f"  pushed {push.line()}")
            if not pushes:
                print("  no pushes recorded")
    shown_rows = args.offset + len(status.schedules)
    if not args.names and shown_rows < counts.indexed:
        print(f"... {counts.indexed - shown_rows} more (--offset {shown_rows})")
    for name, why in status.set_aside:
        print(f"set aside: {name}: {why}")
    return 0


def _records_dict(records: tuple[list[MissedRange], list[Push]] | None) -> dict[str, Any]:
    """A named schedule's `status --json` additions."""
    if records is None:
        return {}
    ranges, pushes = records
    return {"missed": [m.as_dict() for m in ranges], "history": [p.as_dict() for p in pushes]}


def _cmd_invoke(args: argparse.Namespace) -> int:
    """Run the real Lambda handler in this process on a sample event (no Docker needed)."""
    import contextlib
    import importlib
    import time
    import types
    import uuid
    from pathlib import Path

    try:
        event = json.loads(Path(args.event).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the event: {exc}", source=args.event) from exc
    module_name, _, function_name = args.handler.rpartition(".")
    started = time.monotonic()
    context = types.SimpleNamespace(  # the LambdaContext attributes Powertools reads
        function_name="kiqbeat-local", memory_limit_in_mb=512, aws_request_id=str(uuid.uuid4()),
        invoked_function_arn="arn:aws:lambda:local:000000000000:function:kiqbeat-local",
        get_remaining_time_in_millis=lambda: int(30_000 - 1000 * (time.monotonic() - started)))
    # As with `sam local invoke`: logs and metrics on stderr, the handler's result on stdout.
    with contextlib.redirect_stdout(sys.stderr):
        sys.path.insert(0, os.getcwd())
        try:
            handler = getattr(importlib.import_module(module_name), function_name)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cannot import the handler {args.handler!r} ({exc}); run from "
                              "the project directory or pass --handler MODULE.FUNCTION") from exc
        result = handler(event, context)
    print(json.dumps(result, indent=2))
    return 0


def _cmd_functions(args: argparse.Namespace) -> int:
    """Print kiqbeat's Redis 7 function library, or load it (as an administrator)."""
    from kiqbeat.redis import scripts

    if not args.load:
        print(scripts.library(), end="")
        return 0
    engine = _engine(args)
    name = engine.load_functions()
    print(f"kiqbeat: function library {name} loaded into {engine.redis_where()}; give "
          "kiqbeat's user +fcall instead of +evalsha +script|load, and set "
          "KIQBEAT_REDIS_FUNCTIONS=true")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from kiqbeat.demo.run import demo

    return demo(args.seconds, copies=args.copies)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kiqbeat",
        description="Leaderless cron for Sidekiq-compatible job queues.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check a schedule file and list its schedules")
    p.add_argument("file", nargs="?",
                   help="schedule document: a file (kiqbeat, sidekiq-scheduler or sidekiq-cron "
                        "YAML/JSON) or s3://, ssm:, appconfig: (default: $KIQBEAT_CONFIG)")
    p.add_argument("--jobs", action="store_true",
                   help="also print each schedule's next job, exactly as it would be pushed")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("next", help="preview upcoming fire times")
    p.add_argument("file", nargs="?", help="schedule document (default: $KIQBEAT_CONFIG)")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these schedules")
    p.add_argument("-n", type=int, default=5, help="how many fire times per schedule (default 5)")
    p.add_argument("--after", help="start after this ISO instant (default: now)")
    p.add_argument("--cron", help="preview a cron expression instead of a file")
    p.add_argument("--tz", default="UTC", help="zone for --cron (default UTC)")
    p.add_argument("--every", metavar="DURATION", help="preview an interval such as 15m instead")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_next)

    p = sub.add_parser("run-once", help="one invocation: push every due tick once, print a summary")
    add_flags(p)
    p.add_argument("--now", help="replay an invocation at this earlier ISO instant")
    p.add_argument("--json", action="store_true",
                   help="print the report as one JSON line, its warnings included")
    p.add_argument("--jobs", action="store_true", help="with --json, list each pushed job")
    p.set_defaults(func=_cmd_run_once)

    p = sub.add_parser("run", help="invoke at every minute (or second) boundary until SIGTERM")
    add_flags(p)
    p.add_argument("--json", action="store_true",
                   help="print each invocation's report as one JSON line (instead of a "
                        "summary when it pushed)")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus metrics of the invocations on this port (GET "
                        "/metrics; the web extra)")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("status", help="counts by state, then per schedule (most overdue first): "
                                      "zone, last tick covered, next tick, lag")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these schedules")
    add_flags(p)
    p.add_argument("--limit", type=int, default=50, help="schedules shown (default 50)")
    p.add_argument("--offset", type=int, default=0, help="skip this many first (paging)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_status)
    add_schedules_parser(sub)
    add_operations_parser(sub)
    add_console_parser(sub)

    p = sub.add_parser("functions", help="print kiqbeat's Redis 7 function library, or --load "
                                         "it (an administrator's step, once per upgrade)")
    p.add_argument("--load", action="store_true",
                   help="FUNCTION LOAD REPLACE it into the Redis of --redis-url (an admin user)")
    add_flags(p)
    p.set_defaults(func=_cmd_functions)

    p = sub.add_parser("invoke", help="run the Lambda handler here on a sample event (no Docker)")
    p.add_argument("--event", required=True, metavar="FILE",
                   help="EventBridge event JSON: events/scheduler.json or events/scheduled.json")
    p.add_argument("--handler", default="handler.app.lambda_handler", metavar="MODULE.FUNCTION",
                   help="imported from the current directory (default handler.app.lambda_handler)")
    p.set_defaults(func=_cmd_invoke)

    p = sub.add_parser("demo",
                       help="run the embedded example on a private Redis, two copies racing")
    p.add_argument("--seconds", type=float, default=20.0, help="how long to run (default 20)")
    p.add_argument("--copies", type=int, default=2, help="racing invokers (default 2)")
    p.set_defaults(func=_cmd_demo)

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
