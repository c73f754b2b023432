"""A new process loads what its command uses, and no more (issue 28, the cold path).

A Kubernetes CronJob runs a fresh `kiqbeat run-once` every minute, so what a process imports
is paid every minute: building the command line loads no Redis client; an invocation loads
no YAML reader, no AWS library, no alert sink (urllib), no operator's store; a document whose
bytes are read without being parsed loads no PyYAML. Each is checked in a new interpreter,
by what `sys.modules` holds. A minute with nothing due (most minutes of most schedules) loads
no cron, plan or definition-reading core either, and makes three round trips.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from kiqbeat.entrypoints import cli
from kiqbeat.entrypoints.cli import main
from tests.support.processes import catches, stop, wait_for
from tests.support.proxy import FaultProxy

LIB = Path(__file__).resolve().parents[2] / "lib"
# Loaded only by the commands and documents that use them.
EXTRAS = ("yaml", "boto3", "botocore", "aws_lambda_powertools", "starlette", "uvicorn",
          "jinja2", "tqdm")


def loaded(code: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules under `prefixes` a new interpreter holds after running `code`, but for
    those kiqbeat/deferred.py holds back (their code not run)."""
    probe = (f"{code}\nimport sys, json\nfrom kiqbeat.deferred import pending\n"
             f"print(json.dumps(sorted(m for m, v in sys.modules.items() if "
             f"(m.split('.')[0] in {prefixes!r} or m.startswith({prefixes!r})) "
             "and not pending(v))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=LIB.parent, timeout=60, check=True)
    return list(json.loads(done.stdout.splitlines()[-1]))  # after what the code printed


def test_the_command_line_is_built_without_the_redis_client_or_any_extra() -> None:
    """`kiqbeat --help`, `validate` and `next --cron` need no Redis: the engine and the
    client are imported by the commands that run them."""
    assert loaded("import kiqbeat.entrypoints.cli as cli; cli._parser()",
                  ("redis", "kiqbeat.engine", "kiqbeat.store", *EXTRAS)) == []


def test_an_invocation_loads_no_extra_no_sink_and_no_operators_store(redis_url: str) -> None:
    """What `run-once` imports, run for real on a store with a schedule due: the engine, and
    none of the YAML reader, the importers of other tools' files, the alert sinks (urllib,
    boto3), the outcome fold, the store of the operator's commands or the audit trail."""
    client = redis.Redis.from_url(redis_url)
    client.hset("kiqbeat:schedules", "minutely", json.dumps({"cron": "* * * * *",
                                                             "class": "W"}))
    client.zadd("kiqbeat:due", {"minutely": 0})
    run = ("from kiqbeat.entrypoints.cli import main\n"
           f"assert main(['run-once', '--json', '--redis-url', {redis_url!r}]) == 0")
    assert loaded(run, (
        *EXTRAS, "urllib.request", "http.client", "kiqbeat.document.convert",
        # the other commands' parsers and what they read (cli.ALONE)
        "kiqbeat.entrypoints.preview", "kiqbeat.entrypoints.schedules",
        "kiqbeat.entrypoints.operations", "kiqbeat.entrypoints.console",
        "kiqbeat.entrypoints.convert", "kiqbeat.entrypoints.requests",
        # argparse's terminal width without shutil (cli._Formatter); the Lua read as files
        "shutil", "bz2", "lzma", "zipfile", "tempfile", "importlib.resources",
        "kiqbeat.document.yaml_reader", "kiqbeat.alerts.sinks", "kiqbeat.alerts.delivery",
        "kiqbeat.outcomes.records", "kiqbeat.store", "kiqbeat.operator", "kiqbeat.audit",
        "kiqbeat.web")) == []


def test_an_invocation_runs_no_code_of_redis_asyncio_client_or_importlib_metadata(
        redis_url: str) -> None:
    """redis-py imports its asyncio client and `importlib.metadata` as it starts; kiqbeat's
    processes defer both (kiqbeat/deferred.py): after a real run-once on a store with a schedule,
    neither package's own code has run and none of their modules is loaded. (The standard
    library's `asyncio` still loads: redis-py's sync parser imports names from it.)"""
    client = redis.Redis.from_url(redis_url)
    client.hset("kiqbeat:schedules", "minutely", json.dumps({"cron": "* * * * *",
                                                             "class": "W"}))
    client.zadd("kiqbeat:due", {"minutely": 0})
    run = ("from kiqbeat.entrypoints.cli import main\n"
           f"assert main(['run-once', '--json', '--redis-url', {redis_url!r}]) == 0\n"
           "import sys\n"
           "from kiqbeat.deferred import pending\n"
           "ran = [m for m in ('redis.asyncio', 'importlib.metadata')\n"
           "       if not pending(sys.modules[m])]\n"
           "print('ran:', ran)")
    assert loaded(run, ("redis.asyncio.client", "redis.asyncio.connection",
                        "redis.asyncio.cluster", "importlib.metadata._meta",
                        "importlib.metadata._adapters")) == []
    done = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True,
                          cwd=LIB.parent, timeout=60, check=True)
    assert "ran: []" in done.stdout.splitlines()
    assert (client.zscore("kiqbeat:due", "minutely") or 0) > 0  # registered: it did run


# What only a schedule due (or new) needs: the cron and zone core, planning, the push path,
# the definition reader and its fields, the Recurring Jobs tab's rules, the timetables'
# descriptions, the payloads and records, the alert decision and the health it reads.
DUE_ONLY = ("zoneinfo", "kiqbeat.core.cron", "kiqbeat.core.cron_fields", "kiqbeat.core.zones",
            "kiqbeat.core.lifecycle", "kiqbeat.core.plan", "kiqbeat.core.describe",
            "kiqbeat.redis.pushes", "kiqbeat.redis.frames", "kiqbeat.redis.scheduler_ui",
            "kiqbeat.document.validate", "kiqbeat.document.jobs", "kiqbeat.document.fields",
            "kiqbeat.core.dst", "kiqbeat.core.payload", "kiqbeat.core.records",
            "kiqbeat.alerts.incidents", "kiqbeat.core.outcomes")
# Loaded by neither: "did you mean" hints (a misspelt word only).
NEVER = ("difflib",)


def _registered_not_due(redis_url: str) -> redis.Redis:
    """A store with a yearly schedule kiqbeat has registered (first seen), so that an
    invocation now finds nothing due (not even "plan me")."""
    client = redis.Redis.from_url(redis_url)
    client.hset("kiqbeat:schedules", "yearly", json.dumps({"cron": "0 0 1 1 *",
                                                           "class": "W"}))
    client.zadd("kiqbeat:due", {"yearly": 0})
    assert main(["run-once", "--json", "--redis-url", redis_url]) == 0
    assert (client.zscore("kiqbeat:due", "yearly") or 0) > 0  # registered: not due now
    return client


@pytest.mark.parametrize("output", [["--json"], []])
def test_a_run_once_with_nothing_due_loads_no_cron_plan_or_definition_reader(
        redis_url: str, output: list[str]) -> None:
    """A real run-once on a store whose one schedule is not due (its report as JSON or as
    the summary line) loads none of DUE_ONLY; one with a schedule due loads them."""
    client = _registered_not_due(redis_url)
    run = ("from kiqbeat.entrypoints.cli import main\n"
           f"assert main(['run-once', *{output!r}, '--redis-url', {redis_url!r}]) == 0")
    assert loaded(run, (*DUE_ONLY, *NEVER)) == []
    client.zadd("kiqbeat:due", {"yearly": 0})  # "plan me" again: due
    assert set(loaded(run, (*DUE_ONLY, *NEVER))) >= {
        "kiqbeat.core.plan", "kiqbeat.core.cron", "kiqbeat.document.fields",
        "kiqbeat.core.payload", "kiqbeat.alerts.incidents"}


def test_a_run_once_process_makes_no_collector_pass(redis_url: str) -> None:
    """A process's own `run-once` (`main` reading sys.argv, as `kiqbeat` and `python -m
    kiqbeat` run it) keeps the cyclic collector paused from its command's start to its exit:
    enabled again, the collector's first pass would walk every object the imports and the
    invocation made (~0.03-0.06 s of a cold process). Counted by gc.callbacks in that
    process, up to its exit handlers."""
    _registered_not_due(redis_url).close()
    code = ("import atexit, gc, os, sys\n"
            "from kiqbeat.entrypoints.cli import main\n"
            "passes = []\n"
            "gc.callbacks.append(lambda phase, info: phase == 'start' and passes.append(1))\n"
            "atexit.register(lambda: os.write(2, f'passes: {len(passes)}'.encode()))\n"
            f"sys.argv = ['kiqbeat', 'run-once', '--json', '--redis-url', {redis_url!r}]\n"
            "sys.exit(main())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=LIB.parent, timeout=60, check=True)
    assert json.loads(done.stdout)["schedules"] == 0  # it ran, with nothing due
    assert done.stderr.splitlines()[-1] == "passes: 0"


def test_a_run_once_with_nothing_due_makes_three_round_trips(redis_url: str,
                                                              redis_server: Any) -> None:
    """A new process's invocation with nothing due: the connection's HELLO (with AUTH when
    the URL has a password), the startup checks with the old layout's TYPEs (one
    pipeline), and the due read with what the rest of the invocation needs (one pipeline).
    Counted as the requests a proxy between it and Redis forwards."""
    _registered_not_due(redis_url).close()
    proxy = FaultProxy(redis_server.port)
    try:
        subprocess.run([sys.executable, "-m", "kiqbeat", "run-once", "--json", "--redis-url",
                        proxy.url], capture_output=True, text=True, cwd=LIB.parent,
                       timeout=60, check=True)
        assert proxy.requests == 3
    finally:
        proxy.close()


def test_redis_asyncio_client_and_importlib_metadata_work_when_a_user_imports_them(
        redis_url: str) -> None:
    """A program that imports kiqbeat first and then uses redis-py's asyncio client (both
    spellings) and `importlib.metadata` gets the real modules."""
    code = ("import kiqbeat.engine, asyncio, sys\n"
            "assert 'redis.asyncio.client' not in sys.modules\n"
            "import redis.asyncio as aioredis\n"
            "from redis.asyncio import Redis\n"
            "assert Redis is aioredis.Redis is aioredis.client.Redis\n"
            "async def ping():\n"
            f"    client = Redis.from_url({redis_url!r})\n"
            "    await client.set('async', 'yes')\n"
            "    value = await client.get('async')\n"
            "    await client.aclose()\n"
            "    return value\n"
            "print(asyncio.run(ping()))\n"
            "from importlib.metadata import version\n"
            "import redis\n"
            "assert version('redis') == redis.__version__\n"
            "try:\n"
            "    aioredis.no_such_name\n"
            "except AttributeError:\n"
            "    print('AttributeError')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=LIB.parent, timeout=60, check=True)
    assert done.stdout.splitlines() == ["b'yes'", "AttributeError"]
    assert redis.Redis.from_url(redis_url).get("async") == b"yes"


@pytest.mark.parametrize("argv", [
    ["run-once"], ["run-once", "--json", "--jobs", "--now", "2026-01-01T00:00:00Z"],
    ["run-once", "--redis-url", "redis://h:1/2", "--namespace", "x", "--replay"],
    ["run", "--json", "--metrics-port", "9000", "--shard", "1", "--shard-count", "2"],
    ["validate"], ["validate", "doc.yml", "--jobs", "--format", "sidekiq-cron"],
])
def test_a_parser_built_alone_reads_its_arguments_as_the_whole_one(
        argv: list[str]) -> None:
    """`run-once`, `run` and `validate` are parsed by their own parser alone (cli.ALONE): the
    arguments it reads, defaults included, are those the whole command line reads."""
    assert vars(cli._parser(argv[0]).parse_args(argv)) == vars(cli._parser().parse_args(argv))


@pytest.mark.parametrize("argv", [["run-once", "--help"], ["run-once", "--no-such-flag"],
                                  ["run", "--metrics-port", "x"], ["validate", "--help"],
                                  ["validate", "a", "b"]])
def test_a_parser_built_alone_gives_the_whole_command_lines_help_and_errors(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    outputs = []
    for parser in (cli._parser(argv[0]), cli._parser()):
        with pytest.raises(SystemExit) as exited:
            parser.parse_args(argv)
        outputs.append((exited.value.code, capsys.readouterr()))
    assert outputs[0] == outputs[1]
    assert "usage: kiqbeat" in outputs[0][1].out + outputs[0][1].err


@pytest.mark.parametrize("columns", [None, "100", "47", "", "abc", "-5", "0"])
def test_the_help_width_is_the_one_shutil_finds(columns: str | None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """cli._Formatter's width (found without importing shutil) is shutil's, as argparse's
    own formatter takes it: $COLUMNS when a positive number, else the terminal's, else 80."""
    import shutil

    monkeypatch.delenv("LINES", raising=False)
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert cli._columns() == shutil.get_terminal_size().columns
    monkeypatch.setenv("LINES", "30")
    assert cli._columns() == shutil.get_terminal_size().columns


def test_a_documents_bytes_read_unparsed_load_no_yaml(tmp_path: Path) -> None:
    """A new process whose document is unchanged reads its bytes and fingerprints them
    (document/fingerprint.py) without parsing them: no PyYAML; parsing it loads PyYAML."""
    document = tmp_path / "schedules.yaml"
    document.write_text("schedules:\n  a: {cron: '0 9 * * *', class: W}\n")
    read = ("from kiqbeat.document.sources import Sources\n"
            f"Sources().read_document({str(document)!r})")
    assert loaded(read, ("yaml", "kiqbeat.document.yaml_reader")) == []
    parsed = f"{read}\nSources().load_config({str(document)!r})"
    assert loaded(parsed, ("yaml",)) != []


def test_run_once_in_process_leaves_the_garbage_collector_as_it_found_it(
        redis_url: str) -> None:
    """`run-once` pauses the cyclic collector for its imports and its invocation; a caller
    that goes on (a test, a library calling `main`) finds it enabled again, and disabled if
    it was."""
    assert gc.isenabled()
    assert main(["run-once", "--json", "--redis-url", redis_url]) == 0
    assert gc.isenabled()
    gc.disable()
    try:
        assert main(["run-once", "--json", "--redis-url", redis_url]) == 0
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_lambda_handler_loads_no_yaml_no_boto3_and_no_operators_store() -> None:
    """A Lambda's cold start (a scheduled invocation) loads the engine and Powertools (which
    loads botocore's package itself); an operator's event loads the store and the audit
    trail when it runs."""
    assert loaded("import handler.app", (
        "yaml", "boto3", "kiqbeat.store", "kiqbeat.operator", "kiqbeat.audit",
        "kiqbeat.entrypoints.outcomes", "kiqbeat.document.yaml_reader")) == []


def test_a_sigterm_while_run_starts_stops_it_before_its_first_invocation(
        redis_url: str, tmp_path: Path) -> None:
    """`kiqbeat run` installs its SIGTERM handler before it loads the engine and reads its
    document: a pod stopped while the loop starts (its document read from a FIFO that
    blocks it there) exits 0 with its "stopped" line, having written nothing, rather than
    being killed by the signal."""
    document = tmp_path / "schedules.yaml"
    os.mkfifo(document)
    process = subprocess.Popen(
        [sys.executable, "-m", "kiqbeat", "run", "--config", str(document), "--redis-url",
         redis_url], cwd=LIB.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    writer = None
    try:
        def reading() -> int | None:  # a writer opens only once the reader has it open
            try:
                return os.open(document, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                assert process.poll() is None, process.communicate()
                return None

        writer = wait_for("run to open its document", reading, timeout_s=60)
        assert catches(process.pid, signal.SIGTERM)  # caught, not fatal, while it starts
        process.send_signal(signal.SIGTERM)
        os.write(writer, b"schedules:\n  minutely: {cron: '* * * * *', class: W}\n")
        os.close(writer)
        writer = None
        out, err = process.communicate(timeout=60)
    finally:
        if writer is not None:
            os.close(writer)
        stop(process)
    assert process.returncode == 0, err
    assert "kiqbeat: stopped" in out
    assert redis.Redis.from_url(redis_url).dbsize() == 0  # no invocation ran
