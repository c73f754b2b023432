"""`kiqbeat invoke`: the real Lambda handler on the sample events, without Docker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.support.marks import rewind_mark

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = """
schedules:
  pulse:
    cron: "* * * * * *"
    class: PulseWorker
    queue: pulse
"""


def invoke(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    kiqbeat = str(Path(sys.executable).with_name("kiqbeat"))
    return subprocess.run([kiqbeat, "invoke", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=ROOT)


@pytest.fixture
def env(tmp_path: Path, redis_url: str) -> dict[str, str]:
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text(SCHEDULE)
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("KIQBEAT_", "POWERTOOLS_", "AWS_")) and k != "REDIS_URL"}
    return keep | {"KIQBEAT_CONFIG": str(schedule), "KIQBEAT_REDIS_URL": redis_url}


@pytest.mark.parametrize("event", ["events/scheduler.json", "events/scheduled.json"])
def test_invoke_runs_the_handler_on_a_sample_event_and_pushes_ticks(
    env: dict[str, str], redis_client: redis.Redis, event: str
) -> None:
    first = invoke("--event", event, env=env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["new_schedules"] == 1
    # As if the first invocation ran 3 s ago: ticks are due, without waiting for them.
    rewind_mark(redis_client, "pulse", 3)
    second = invoke("--event", event, env=env)
    assert second.returncode == 0, second.stderr
    result = json.loads(second.stdout)  # stdout holds only the handler's result
    assert result["pushed"] >= 3
    jids = {json.loads(raw)["jid"] for raw in redis_client.lrange("queue:pulse", 0, -1)}
    # Counted in Redis: a tick pushed twice would be one jid twice.
    assert redis_client.llen("queue:pulse") == len(jids) == result["pushed"]
    # Logs (JSON lines) and EMF metrics go to stderr, as with `sam local invoke`.
    lines = [json.loads(line) for line in second.stderr.splitlines() if line.startswith("{")]
    assert any(line.get("report", {}).get("pushed") == result["pushed"] for line in lines)
    assert any("_aws" in line for line in lines)


def test_invoke_reports_an_unreadable_event_file(env: dict[str, str]) -> None:
    done = invoke("--event", "events/nope.json", env=env)
    assert done.returncode == 1
    assert "events/nope.json: cannot read the event" in done.stderr


def test_invoke_reports_a_failed_invocation_with_exit_code_1(
    env: dict[str, str], redis_client: redis.Redis
) -> None:
    done = invoke("--event", "events/scheduler.json", env=env | {"KIQBEAT_CONFIG": "/nope.yaml"})
    assert done.returncode == 1
    assert "/nope.yaml: schedule file not found" in done.stderr
    assert redis_client.dbsize() == 0


def test_invoke_without_the_aws_extra_says_to_install_it(
        env: dict[str, str], tmp_path: Path) -> None:
    """Powertools missing (no `aws` extra) is not a wrong directory: the message says which
    extra to install, and nothing is run."""
    shim = tmp_path / "no_extra"
    shim.mkdir()
    (shim / "aws_lambda_powertools.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'aws_lambda_powertools'\", "
        "name='aws_lambda_powertools')\n")
    path = os.pathsep.join(p for p in (str(shim), env.get("PYTHONPATH", "")) if p)
    done = invoke("--event", "events/scheduler.json", env=env | {"PYTHONPATH": path})
    assert done.returncode == 1
    assert "needs aws_lambda_powertools, which is not installed: pip install " \
           "'kiqbeat[aws]'" in done.stderr
    assert "project directory" not in done.stderr
    assert "Traceback" not in done.stderr
