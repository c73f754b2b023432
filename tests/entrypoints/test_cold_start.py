"""A new process loads what its command uses, and no more (issue 28, the cold path).

A Kubernetes CronJob runs a fresh `kiqbeat run-once` every minute, so what a process imports
is paid every minute: building the command line loads no Redis client; an invocation loads
no YAML reader, no AWS library, no alert sink (urllib), no operator's store; a document whose
bytes are read without being parsed loads no PyYAML. Each is checked in a new interpreter,
by what `sys.modules` holds.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import redis

from kiqbeat.entrypoints.cli import main

LIB = Path(__file__).resolve().parents[2] / "lib"
# Loaded only by the commands and documents that use them.
EXTRAS = ("yaml", "boto3", "botocore", "aws_lambda_powertools", "starlette", "uvicorn",
          "jinja2", "tqdm")


def loaded(code: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules under `prefixes` a new interpreter holds after running `code`."""
    probe = (f"{code}\nimport sys, json\nprint(json.dumps(sorted(m for m in sys.modules if "
             f"m.split('.')[0] in {prefixes!r} or m.startswith({prefixes!r}))))")
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
        "kiqbeat.document.yaml_reader", "kiqbeat.alerts.sinks", "kiqbeat.alerts.delivery",
        "kiqbeat.outcomes.records", "kiqbeat.store", "kiqbeat.operator", "kiqbeat.audit",
        "kiqbeat.web")) == []


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
