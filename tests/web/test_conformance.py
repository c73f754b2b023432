"""The API against its own OpenAPI description (issue 26): schemathesis's CLI, every check,
against a real console (uvicorn on loopback, a real Redis behind it), bounded.

Two runs: one over every operation with generated names (hostile ones included: percent
signs, controls, `/`), and one over the operations on a schedule with the name of one that
exists, so that the actions reach their logic instead of a 404. The only setting changed from
schemathesis's defaults: a 422 is an accepted answer to a schema-valid request, because it
is kiqbeat's validation of what JSON Schema cannot say (a cron's syntax, a zone's name,
`since` before `until`, a cursor this console gave) — docs/api.md, "Conformance". The
throttle is given room (it is tested in test_sessions.py): the `ignored_auth` check sends
wrong tokens on purpose. One worker: CPython 3.11's ast.parse, which Hypothesis calls to
describe strategies, fails in concurrent threads ("AST constructor recursion depth
mismatch"), a Runtime Error of the checker's own.

Bounded by count, not by time, so that a loaded machine runs the same requests as a quiet
one: every phase once (the coverage phase's boundary values whole), 10 generated examples an
operation, about 25 + 15 s on 2 cores; `KIQBEAT_LONG=1` (CI runs it in scripts/matrix) 100.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kiqbeat.web.throttle import Throttle
from tests.support.console import OPERATOR_TOKEN, Start

LONG = os.environ.get("KIQBEAT_LONG") == "1"
EXAMPLES = 100 if LONG else 10  # an operation
TIMEOUT_S = 1200 if LONG else 300  # each of the two runs
CONFIG = """
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]
"""


def _schemathesis(url: str, tmp_path: Path, config: str, *options: str) -> tuple[int, str]:
    st = shutil.which("st", path=str(Path(sys.executable).parent))
    if st is None:
        pytest.fail("schemathesis is not installed (it is in the dev extra)")
    (tmp_path / "schemathesis.toml").write_text(config)
    done = subprocess.run(
        [st, "--config-file", str(tmp_path / "schemathesis.toml"), "run",
         f"{url}/api/v1/openapi.json", "--checks", "all", "--max-examples", str(EXAMPLES),
         "-w", "1",
         "--seed", "26", "-H", f"Authorization: Bearer {OPERATOR_TOKEN}",
         "--max-failures", "50", *options],
        capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1", "SCHEMATHESIS_TELEMETRY": "false"})
    return done.returncode, done.stdout + done.stderr


@pytest.mark.timeout(2 * TIMEOUT_S + 60)
def test_the_api_conforms_to_its_openapi_description_and_never_answers_5xx(
    start_console: Start, tmp_path: Path
) -> None:
    served = start_console(throttle=Throttle(per_address=(10 ** 9, 1.0),
                                             overall=(10 ** 9, 1.0)))
    code, out = _schemathesis(served.url, tmp_path, CONFIG)
    assert code == 0, out[-6000:]
    with served.api() as api:
        assert api.put("/api/v1/schedules/digest", json={
            "cron": "*/5 * * * *", "class": "DigestWorker"}).status_code in (200, 201)
    code, out = _schemathesis(served.url, tmp_path, '[parameters]\nname = "digest"\n' + CONFIG,
                              "--include-path-regex", "name")
    assert code == 0, out[-6000:]
