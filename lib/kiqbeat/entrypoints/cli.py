"""The `kiqbeat` command: parse arguments, call the core, report results and exit codes."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import io
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kiqbeat.core.collector import collector_paused
from kiqbeat.errors import (
    ConfigError,
    KiqbeatError,
)
from kiqbeat.settings import add_flags, flags_of

if TYPE_CHECKING:  # the engine (and the Redis client) only for the commands that use it
    from kiqbeat.core.report import Report
    from kiqbeat.core.schedule import Config
    from kiqbeat.engine import Engine


def _engine(args: argparse.Namespace) -> Engine:
    from kiqbeat.engine import Engine

    return Engine.from_environ(flags=flags_of(args))


def _invoking(args: argparse.Namespace) -> Engine:
    """The engine of `run-once` and `run`: its shard (--shard) must be one of the
    deployment's (--shard-count, KIQBEAT_SHARD_COUNT), as a Lambda invocation's must."""
    engine = _engine(args)
    engine.settings.shard_to_run()
    return engine


def _cmd_run_once(args: argparse.Namespace) -> int:
    from kiqbeat.entrypoints.loop import print_report

    # The collector paused for the invocation, the imports it needs and its report: a
    # process that then exits freezes what it holds instead of collecting it (`main`).
    with collector_paused():
        engine = _invoking(args)
        now = None
        if args.now:
            from kiqbeat.core.instants import option_instant
            now = option_instant(args.now, "--now")
        report = engine.run(now=now, replay=engine.settings.replay)
        print_report(report, args.json, jobs=args.jobs, quiet=False)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from kiqbeat.entrypoints.loop import print_report, run_loop, stop_on_signals

    # First: a SIGTERM while the engine loads (a pod stopped as it starts) stops the loop
    # before its first invocation, exit 0, rather than killing the process mid-import.
    stop = stop_on_signals()
    engine = _invoking(args)
    current = engine.config()  # a broken document stops the command before it loops
    observe = _metrics(args, lambda: (engine.client, current.namespace))

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
            import traceback

            print("kiqbeat: invocation failed unexpectedly:\n" + traceback.format_exc(),
                  file=sys.stderr, flush=True)
            observe(None)
            return None
        observe(report)
        print_report(report, args.json)
        return report

    notes = sys.stderr if args.json else sys.stdout  # --json: stdout holds reports alone
    print(f"kiqbeat: running {_served(engine, current)}; SIGTERM or Ctrl-C stops", file=notes,
          flush=True)
    run_loop(invoke, stop)
    engine.close()
    print("kiqbeat: stopped", file=notes, flush=True)
    return 0


def _metrics(args: argparse.Namespace, where: Callable[[], tuple[Any, str]]
             ) -> Callable[[Report | None], None]:
    """What counts each invocation: Prometheus metrics served on --metrics-host and
    --metrics-port (kiqbeat.entrypoints.metrics, the standard library alone), with the gauges
    of the store `where` names (client, namespace), or nothing."""
    if args.metrics_port is None:
        return lambda report: None
    from kiqbeat.entrypoints.metrics import InvocationMetrics, serve_metrics

    metrics = InvocationMetrics(where=where)
    serve_metrics(metrics, args.metrics_host, args.metrics_port)
    return metrics.observe


def _served(engine: Engine, config: Config) -> str:
    """What `kiqbeat run` serves, for its banner: the document's schedules (if any) and the
    store's, which it runs as well (HLEN of the definitions hash: one round trip)."""
    from kiqbeat.core.report import counted
    from kiqbeat.redis import keys
    from kiqbeat.redis.connection import redis_errors

    key = keys.definitions(config.namespace)
    try:
        with redis_errors(engine.client, f"counting the schedules in {key}"):
            stored = f"{int(engine.client.hlen(key)):,}"
    except KiqbeatError as exc:  # the loop starts anyway: its invocations retry and report
        stored = f"? (not counted: {exc})"
    shard = engine.settings.shard
    of_shard = f", shard {shard[0]}/{shard[1]} of them" if shard and shard[1] > 1 else ""
    if config.source:
        return (f"{counted(len(config.schedules), 'schedule')} of the document {config.source} "
                f"and the {stored} stored in {key} (the document's among them once applied"
                f"{of_shard})")
    return f"the {stored} schedules stored in {key} (no document{of_shard})"


# The extra that installs a package the Lambda handler imports.
_EXTRAS = {"aws_lambda_powertools": "aws", "boto3": "aws", "botocore": "aws"}


def _cmd_invoke(args: argparse.Namespace) -> int:
    """Run the real Lambda handler in this process on a sample event (no Docker needed)."""
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
            missing = ((exc.name or "").partition(".")[0]
                       if isinstance(exc, ModuleNotFoundError) else "")
            if missing and missing != module_name.partition(".")[0]:  # the handler's own import
                extra = _EXTRAS.get(missing)
                how = f"pip install 'kiqbeat[{extra}]'" if extra else f"install {missing}"
                raise ConfigError(f"the handler {args.handler!r} needs {missing}, which is not "
                                  f"installed: {how}") from exc
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


def _add_run_once(sub: Any) -> None:
    p = sub.add_parser("run-once", help="one invocation: push every due tick once, print a summary",
                       formatter_class=_Formatter)
    add_flags(p)
    p.add_argument("--now", help="replay an invocation at this earlier ISO instant (at most "
                                 "the missed-jobs window before the Redis clock, unless "
                                 "--replay)")
    p.add_argument("--replay", action="store_true", default=None,  # None: the variable's
                   help="allow --now further back than the missed-jobs window: a deliberate "
                        "replay (tests, a rehearsal on a copy of the store), which registers "
                        "new schedules as first seen then [$KIQBEAT_ALLOW_REPLAY]")
    p.add_argument("--json", action="store_true",
                   help="print the report as one JSON line, its warnings included")
    p.add_argument("--jobs", action="store_true", help="with --json, list each pushed job")
    p.set_defaults(func=_cmd_run_once)


def _add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="invoke at every minute (or second) boundary until SIGTERM",
                       formatter_class=_Formatter)
    add_flags(p)
    p.add_argument("--json", action="store_true",
                   help="print each invocation's report as one JSON line (instead of a "
                        "summary when it pushed)")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus metrics of the invocations on this port (GET "
                        "/metrics)")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help="the metrics' listen address (default 127.0.0.1; any other needs "
                        "tokens: KIQBEAT_WEB_READ_TOKEN, as the console's)")
    p.set_defaults(func=_cmd_run)


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, its width found as `shutil.get_terminal_size` finds it
    without importing shutil (which loads bz2 and lzma: ~5-10 ms of a cold run-once, as
    argparse builds a formatter for every argument it adds)."""

    def __init__(self, prog: str) -> None:  # argparse passes `prog` alone
        super().__init__(prog, width=_columns() - 2)


def _columns() -> int:
    """`shutil.get_terminal_size().columns`: $COLUMNS, else stdout's terminal, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


def _add_validate(sub: Any) -> None:
    from kiqbeat.entrypoints.preview import add_import_flags, cmd_validate

    p = sub.add_parser("validate", help="check a schedule file and list its schedules")
    p.add_argument("file", nargs="?",
                   help="schedule document: a file (kiqbeat, sidekiq-scheduler, sidekiq-cron, "
                        "GoodJob or Solid Queue YAML/JSON) or s3://, ssm:, appconfig: "
                        "(default: $KIQBEAT_CONFIG)")
    p.add_argument("--jobs", action="store_true",
                   help="also print each schedule's next job, exactly as it would be pushed")
    add_import_flags(p)
    p.set_defaults(func=cmd_validate)


# The parsers `main` builds alone when their command is the first argument: a CronJob's
# `run-once` every minute, or a CI job's `validate`, does not pay for every other command's
# parser and its module (argparse's formatter and gettext lookups: ~0.05 s of a cold process
# here).
ALONE = {"run-once": _add_run_once, "run": _add_run, "validate": _add_validate}


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; only `command`'s when it is one of ALONE (the same parser it
    has among the others: `--help`, errors and defaults alike)."""
    parser = argparse.ArgumentParser(
        prog="kiqbeat",
        description="Leaderless cron for Sidekiq-compatible job queues.",
        formatter_class=_Formatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if command in ALONE:
        ALONE[command](sub)
        return parser
    from kiqbeat.entrypoints.console import add_parser as add_console_parser
    from kiqbeat.entrypoints.convert import add_parser as add_convert_parser
    from kiqbeat.entrypoints.operations import add_parser as add_operations_parser
    from kiqbeat.entrypoints.preview import add_import_flags, cmd_next
    from kiqbeat.entrypoints.schedules import add_parser as add_schedules_parser

    _add_validate(sub)

    p = sub.add_parser("next", help="preview upcoming fire times, of a document's schedules "
                                    "or stored ones")
    p.add_argument("file", nargs="?",
                   help="schedule document: a file, s3://, ssm: or appconfig: (default: "
                        "$KIQBEAT_CONFIG); any other word is a stored schedule's NAME")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="only these schedules (of the document, else of the store)")
    p.add_argument("--store", action="store_true",
                   help="every argument is a stored schedule's NAME (one named like a file)")
    p.add_argument("-n", type=int, default=None,
                   help="how many ticks per schedule, pushed or paused or skipped (default 5; "
                        "1000 with --until)")
    p.add_argument("--after", "--from", dest="after",
                   help="start after this ISO instant (default: now)")
    p.add_argument("--until", help="stop at this ISO instant (inclusive)")
    p.add_argument("--cron", help="preview a cron expression instead of a file")
    p.add_argument("--tz", default="UTC", help="zone for --cron (default UTC)")
    p.add_argument("--dst", metavar="POLICY",
                   help="DST policy for --cron: cron (default), fugit, or JSON such as "
                        "'{\"repeated\": \"both\"}'")
    p.add_argument("--every", metavar="DURATION", help="preview an interval such as 15m instead")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_import_flags(p)
    add_flags(p)  # the store's, for stored schedules; --config names a document
    p.set_defaults(func=cmd_next)

    _add_run_once(sub)
    _add_run(sub)

    add_operations_parser(sub)  # status, missed, backfill, ...: requests, as the Lambda's
    add_schedules_parser(sub)
    add_convert_parser(sub)
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


# Exit codes of a command stopped from outside, as a shell reports a process killed by
# the signal: SIGINT (Ctrl-C) 128 + 2; SIGPIPE (its reader went away, `| head`) 128 + 13.
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code.

    Whatever a command reads, it ends with a message, never a traceback: a KiqbeatError is
    printed (exit 1); Ctrl-C exits 130 quietly; a closed output (`kiqbeat schedules list |
    head -1`) exits 141 quietly. Text that could not be written as UTF-8 (a lone surrogate
    that escaped `errors.shown`) is written escaped rather than stopping the output.
    """
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    # At exit, what is alive then is moved out of the collector's reach before the
    # interpreter's last collections, which would otherwise walk every module loaded (~0.1 s
    # of each short process); the memory is the system's again a moment later either way.
    atexit.unregister(gc.freeze)  # once per process, however many commands it runs
    atexit.register(gc.freeze)
    exits = argv is None  # the process's own command line: it ends when `main` returns
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        if exits and argv[:1] == ["run-once"]:
            # Paused to the end (`_cmd_run_once` leaves it so): enabled again, its first pass
            # would walk every object the imports and the invocation made young (~0.03 s).
            gc.disable()
        args = _parser(argv[0] if argv else None).parse_args(argv)
        code = int(args.func(args))
        sys.stdout.flush()  # here, where a closed pipe is caught, rather than at exit
        return code
    except KiqbeatError as exc:
        print(f"kiqbeat: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("kiqbeat: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Python flushes stdout again at exit, which would fail again and print a warning:
        # point it at /dev/null (the reader is gone; nothing more is wanted).
        with contextlib.suppress(OSError, ValueError):  # not a file (a test's capture)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
