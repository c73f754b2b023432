"""The engine commands of the `kiqbeat` CLI, run as real processes against a real Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.entrypoints.cli import main

SCHEDULE = """
missed_jobs_window: 1h
schedules:
  heartbeat:
    cron: "*/2 * * * * *"
    class: HeartbeatWorker
    queue: pulse
  report:
    cron: "0 * * * *"
    class: ReportWorker
"""


@pytest.fixture
def schedule_file(tmp_path: Path) -> Path:
    path = tmp_path / "schedule.yaml"
    path.write_text(SCHEDULE)
    return path


def kiqbeat(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kiqbeat", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_run_once_pushes_and_reports_json(
    schedule_file: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    first = kiqbeat("run-once", "--config", str(schedule_file), "--redis-url", redis_url, "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["new_schedules"] == 2
    time.sleep(2.1)
    second = kiqbeat("run-once", "--config", str(schedule_file), "--redis-url", redis_url, "--json")
    report = json.loads(second.stdout)
    assert report["pushed"] >= 1
    assert [j["schedule"] for j in report["jobs"]] == ["heartbeat"] * report["pushed"]
    assert redis_client.llen("queue:pulse") == report["pushed"]


def test_run_once_reads_the_redis_url_from_the_environment(
    schedule_file: Path, redis_url: str
) -> None:
    env = {k: v for k, v in os.environ.items() if "REDIS" not in k}
    env["KIQBEAT_REDIS_URL"] = redis_url
    done = kiqbeat("run-once", "--config", str(schedule_file), env=env)
    assert done.returncode == 0, done.stderr
    assert "2 schedules" in done.stdout


def test_run_once_refuses_a_now_in_the_future(schedule_file: Path, redis_url: str) -> None:
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    done = kiqbeat("run-once", "--config", str(schedule_file), "--redis-url", redis_url,
                   "--now", later)
    assert done.returncode == 1
    assert "later than the Redis clock" in done.stderr


def test_run_once_against_a_dead_redis_fails_fast_and_names_it(schedule_file: Path) -> None:
    from kiqbeat.demo.server import free_port

    started = time.monotonic()
    done = kiqbeat("run-once", "--config", str(schedule_file),
                   "--redis-url", f"redis://:secret@127.0.0.1:{free_port()}/0")
    assert done.returncode == 1
    assert "unavailable" in done.stderr and "127.0.0.1" in done.stderr
    assert "secret" not in done.stderr
    assert time.monotonic() - started < 15


def test_a_bad_schedule_file_fails_before_touching_redis(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCHEDULE.replace("queue: pulse", "quue: pulse"))
    done = kiqbeat("run-once", "--config", str(bad), "--redis-url", redis_url)
    assert done.returncode == 1
    assert "quue" in done.stderr and "queue" in done.stderr
    assert redis_client.dbsize() == 0


def test_status_shows_each_schedule(
    schedule_file: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run-once", "--config", str(schedule_file), "--redis-url", redis_url]) == 0
    capsys.readouterr()
    assert main(["status", "--config", str(schedule_file), "--redis-url", redis_url, "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["schedules"]}
    assert set(rows) == {"heartbeat", "report"}
    assert rows["report"]["next_tick"].endswith(":00:00+00:00")
    assert rows["heartbeat"]["covered_through"] is not None


def test_run_loops_each_second_and_stops_on_sigterm(
    schedule_file: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "kiqbeat", "run", "--config",
                             str(schedule_file), "--redis-url", redis_url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 15
        while redis_client.llen("queue:pulse") < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert redis_client.llen("queue:pulse") >= 2
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "stopped" in out
    jids = [json.loads(j)["jid"] for j in redis_client.lrange("queue:pulse", 0, -1)]
    assert len(jids) == len(set(jids))


def test_demo_runs_on_a_private_redis_without_duplicates() -> None:
    done = kiqbeat("demo", "--seconds", "4")
    assert done.returncode == 0, done.stderr
    assert "pushed" in done.stdout
    assert ", 0 duplicates" in done.stdout
