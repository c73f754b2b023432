"""The engine commands of the `kiqbeat` CLI, run as real processes against a real Redis."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.entrypoints.cli import main
from kiqbeat.entrypoints.loop import stop_on_signals
from kiqbeat.redis import progress
from tests.support.clock import room_before_boundary
from tests.support.marks import rewind_mark, stored_mark, write_marks

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
    room_before_boundary(redis_client, 3600, 30)  # no hourly `report` tick in what follows
    first = kiqbeat("run-once", "--config", str(schedule_file), "--redis-url", redis_url, "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["new_schedules"] == 2
    assert "jobs" not in json.loads(first.stdout)  # only with --jobs
    # As if the last invocation ran 5 s ago: two or three ticks of */2 are due (no sleeping).
    rewind_mark(redis_client, "heartbeat", 5)
    second = kiqbeat("run-once", "--config", str(schedule_file), "--redis-url", redis_url,
                     "--json", "--jobs")
    assert second.stdout.count("\n") == 1  # one line, to log
    report = json.loads(second.stdout)
    assert report["pushed"] >= 2
    assert [j["schedule"] for j in report["jobs"]] == ["heartbeat"] * report["pushed"]
    jids = {json.loads(j)["jid"] for j in redis_client.lrange("queue:pulse", 0, -1)}
    assert jids == {j["jid"] for j in report["jobs"]}


def test_run_once_reads_the_redis_url_from_the_environment(
    schedule_file: Path, redis_url: str
) -> None:
    env = {k: v for k, v in os.environ.items() if "REDIS" not in k}
    env["KIQBEAT_REDIS_URL"] = redis_url
    done = kiqbeat("run-once", "--config", str(schedule_file), env=env)
    assert done.returncode == 0, done.stderr
    assert "2 schedules" in done.stdout


@pytest.mark.parametrize("command", ["run-once", "status", "validate", "next"])
def test_every_command_reads_the_document_and_redis_from_the_environment(
    schedule_file: Path, redis_url: str, command: str
) -> None:
    env = {k: v for k, v in os.environ.items() if "REDIS" not in k and "KIQBEAT" not in k}
    env |= {"KIQBEAT_CONFIG": str(schedule_file), "KIQBEAT_REDIS_URL": redis_url}
    done = kiqbeat(command, env=env)
    assert done.returncode == 0, done.stderr
    assert "heartbeat" in done.stdout or "2 schedules" in done.stdout


def test_every_knob_is_a_flag_and_a_variable(schedule_file: Path, redis_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if "REDIS" not in k and "KIQBEAT" not in k}
    env |= {"KIQBEAT_CONFIG": str(schedule_file), "KIQBEAT_REDIS_URL": redis_url,
            "KIQBEAT_SHARD": "0/1", "KIQBEAT_MISSED_JOBS_WINDOW": "90s",
            "KIQBEAT_DEADLINE": "20s", "KIQBEAT_CONFIG_MAX_AGE": "5m"}
    by_env = kiqbeat("run-once", env=env)
    assert by_env.returncode == 0, by_env.stderr
    assert "missed_jobs_window is 90 s" in by_env.stderr  # the override reached the engine
    by_flag = kiqbeat("run-once", "--missed-jobs-window", "100s", "--shard", "0/1", env=env)
    assert by_flag.returncode == 0, by_flag.stderr
    assert "missed_jobs_window is 100 s" in by_flag.stderr  # a flag wins over its variable
    bad = kiqbeat("run-once", "--shard", "2/2", env=env)
    assert bad.returncode == 1 and "--shard: invalid shard 2/2" in bad.stderr
    bad = kiqbeat("run-once", env=env | {"KIQBEAT_DEADLINE": "soon"})
    assert bad.returncode == 1 and "KIQBEAT_DEADLINE: 'soon' is not a duration" in bad.stderr


def test_run_prints_every_invocations_own_warnings_and_the_documents_once(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    path = tmp_path / "schedule.yaml"
    path.write_text("missed_jobs_window: 90s\nwait_replicas: 1\nwait_timeout: 0.1s\n"
                    "schedules:\n  pulse: {cron: '* * * * * *', class: PulseWorker}\n")
    proc = subprocess.Popen([sys.executable, "-m", "kiqbeat", "run", "--config", str(path),
                             "--redis-url", redis_url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while redis_client.llen("queue:default") < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    # No replica exists: every invocation that pushed fell short, and each one says so (as
    # many lines as pushing invocations: under load one may push two ticks).
    shortfalls = re.findall(r"acknowledged (\d+) pushed jobs", err)
    assert len(shortfalls) >= 2 and sum(map(int, shortfalls)) >= 3, err
    assert err.count("missed_jobs_window is 90 s") == 1, err


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
    schedule_file: Path, redis_url: str, redis_client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
) -> None:
    room_before_boundary(redis_client, 2, 1.5)  # no heartbeat tick between the two commands
    assert main(["run-once", "--config", str(schedule_file), "--redis-url", redis_url]) == 0
    capsys.readouterr()
    assert main(["status", "--config", str(schedule_file), "--redis-url", redis_url, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in document["schedules"]}
    assert set(rows) == {"heartbeat", "report"}
    assert document["summary"] == {"schedules": 2, "indexed": 2, "overdue": 0, "set_aside": 0,
                                   "with_missed": 0, "unplannable": 0}
    assert document["document"] == {"source": str(schedule_file), "schedules": 2,
                                     "applied": True}
    assert rows["report"]["next_tick"].endswith(":00:00+00:00")
    assert rows["heartbeat"]["covered_through"] is not None
    assert {r["source"] for r in rows.values()} == {str(schedule_file)}


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


def test_sigterm_arriving_while_the_loop_holds_its_wait_stops_it() -> None:
    """A signal is handled between two steps of the main thread, which may be inside the
    stop event's wait, holding its lock (the race that once left `kiqbeat run` deaf to
    SIGTERM under load): the handler must still set it, and the wait return."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop = stop_on_signals()
        outcome: list[bool] = []
        with stop._cond:  # where Event.wait is before it sleeps
            signal.raise_signal(signal.SIGTERM)  # the handler runs here, the lock held
            outcome.append(True)
        assert outcome == [True]
        assert stop.wait(5)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def test_demo_runs_on_a_private_redis_without_duplicates() -> None:
    done = kiqbeat("demo", "--seconds", "4")
    assert done.returncode == 0, done.stderr
    assert "pushed" in done.stdout
    assert ", 0 duplicates" in done.stdout


def test_run_survives_an_unexpected_error_and_keeps_invoking(
    schedule_file: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bug (not a KiqbeatError) in one invocation is reported and the loop goes on."""
    import threading

    from kiqbeat.engine import Engine
    from kiqbeat.entrypoints import loop

    calls: list[int] = []

    def broken(self: Engine, *args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) >= 2:
            os.kill(os.getpid(), signal.SIGTERM)  # the second call shows the loop went on
        raise RuntimeError("a bug")

    monkeypatch.setattr(Engine, "run", broken)
    monkeypatch.setattr(loop, "seconds_to_boundary", lambda now_s, period_s: 0.01)
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    watchdog = threading.Timer(20, lambda: os.kill(os.getpid(), signal.SIGTERM))
    watchdog.start()
    try:
        assert main(["run", "--config", str(schedule_file), "--redis-url", redis_url]) == 0
    finally:
        watchdog.cancel()
        for sig, handler in old.items():
            signal.signal(sig, handler)
    err = capsys.readouterr().err
    assert len(calls) >= 2
    assert err.count("invocation failed unexpectedly") >= 2 and "RuntimeError: a bug" in err


def test_status_pages_most_overdue_first_and_filters_by_name(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "many.yaml"
    path.write_text("schedules:\n" + "".join(
        f"  s{i:02d}: {{cron: '* * * * *', class: A}}\n" for i in range(30)))
    common = ["--config", str(path), "--redis-url", redis_url]
    room_before_boundary(redis_client, 60, 15)  # only s17 overdue at `status`
    assert main(["run-once", *common]) == 0
    seconds, _ = redis_client.time()
    late = datetime.fromtimestamp(seconds, UTC) - timedelta(minutes=10)
    # As the store holds it after ten minutes without an invocation for s17 alone:
    seen = getattr(stored_mark(redis_client, "s17"), "first_seen_ms", None)
    late_ms = int(late.timestamp() * 1000)
    write_marks(redis_client, "", {"s17": progress.Mark(late_ms, seen)})
    redis_client.zadd("kiqbeat:due", {"s17": int(late.timestamp() * 1000) + 60_000})
    capsys.readouterr()
    assert main(["status", *common, "--limit", "5", "--json"]) == 0
    page = json.loads(capsys.readouterr().out)
    assert (page["summary"]["indexed"], len(page["schedules"])) == (30, 5)
    assert page["schedules"][0]["name"] == "s17" and page["summary"]["overdue"] == 1
    assert page["schedules"][0]["lag_s"] >= 500
    assert main(["status", *common, "--limit", "5", "--offset", "28"]) == 0
    text = capsys.readouterr().out
    assert "30 schedules stored" in text and text.count("; next ") == 2
    assert main(["status", *common, "s03", "s04", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)["schedules"]] == ["s03", "s04"]
    assert main(["status", *common, "s3"]) == 1
    assert "no schedule 's3'" in capsys.readouterr().err


def test_run_json_prints_each_invocations_report_as_one_json_line(
    schedule_file: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every invocation, pushing or not, is one line on stdout: its report, nothing else."""
    import threading

    from kiqbeat.core.report import Report
    from kiqbeat.engine import Engine
    from kiqbeat.entrypoints import loop

    reports: list[Report] = []
    real_run = Engine.run

    def run(self: Engine, *args: object, **kwargs: object) -> Report:
        reports.append(real_run(self, *args, **kwargs))  # type: ignore[arg-type]
        if len(reports) == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # the loop stops after this invocation
        return reports[-1]

    monkeypatch.setattr(Engine, "run", run)
    monkeypatch.setattr(loop, "seconds_to_boundary", lambda now_s, period_s: 0.01)
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    watchdog = threading.Timer(20, lambda: os.kill(os.getpid(), signal.SIGTERM))
    watchdog.start()
    try:
        code = main(["run", "--json", "--config", str(schedule_file), "--redis-url", redis_url])
    finally:
        watchdog.cancel()
        for sig, handler in old.items():
            signal.signal(sig, handler)
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert len(reports) == 3 and [json.loads(line) for line in lines] == [
        r.as_dict() for r in reports]
    assert reports[0].new_schedules == 2 and "running 2 schedules" in err and "stopped" in err
