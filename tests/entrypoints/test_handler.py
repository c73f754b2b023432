"""The real Lambda handler against a real Redis, on both EventBridge event shapes."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import redis
from handler import app

from kiqbeat.document.sources import Sources
from kiqbeat.engine import Engine
from kiqbeat.errors import ConfigError, RedisUnavailableError
from kiqbeat.redis.definitions import shard_of
from tests.support.aws import Context, hanging_endpoint
from tests.support.cli import Kiqbeat
from tests.support.marks import rewind_mark

# Every second, so a second invocation a little over a second later has ticks to push
# (a schedule's first invocation only marks it first-seen: no backfill).
SCHEDULE = """
missed_jobs_window: 1h
schedules:
  pulse:
    cron: "* * * * * *"
    class: PulseWorker
    queue: pulse
"""


@pytest.fixture
def lambda_env(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """The environment template.yaml gives the function, with a file source and a Redis URL."""
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text(SCHEDULE)
    for name in app.ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("KIQBEAT_CONFIG", str(schedule))
    monkeypatch.setenv("KIQBEAT_REDIS_URL", redis_url)
    app.forget_warm()
    yield schedule
    app.forget_warm()


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    """What the Powertools Logger writes (its stream is bound when the module is imported)."""
    buffer = io.StringIO()
    handler = app.logger.registered_handler
    old = handler.setStream(buffer)  # type: ignore[attr-defined]
    yield buffer
    handler.setStream(old)  # type: ignore[attr-defined]


def log_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


def emf(out: str) -> dict[str, float]:
    """Every metric value in the EMF documents Powertools printed."""
    values: dict[str, float] = {}
    for line in out.splitlines():
        if '"_aws"' not in line:
            continue
        doc = json.loads(line)
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                value = doc[metric["Name"]]
                values[metric["Name"]] = value[0] if isinstance(value, list) else value
    return values


def redis_now(redis_url: str) -> datetime:
    client = redis.Redis.from_url(redis_url)
    seconds, micros = client.time()
    client.close()
    return datetime.fromtimestamp(seconds, tz=UTC) + timedelta(microseconds=micros)


def nested(depth: int) -> list[Any]:
    """A list `depth` levels deep, built without recursion."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def distinct_jids(redis_client: redis.Redis, queue: str) -> int:
    """How many different jids the queue holds (a duplicate push would repeat one)."""
    jobs = [json.loads(raw) for raw in redis_client.lrange(queue, 0, -1)]
    return len({job["jid"] for job in jobs})


def scheduler_event(scheduled: datetime) -> dict[str, Any]:
    return {"scheduled_time": scheduled.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "execution_id": "exec-42", "attempt": "1"}


def rule_event(scheduled: datetime) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(
        (Path(__file__).parents[2] / "events" / "scheduled.json").read_text())
    event["time"] = scheduled.strftime("%Y-%m-%dT%H:%M:%SZ")
    return event


@pytest.mark.parametrize("attempt", ["\u00b2", "9" * 5000, "-1", " 2"])
def test_an_attempt_that_is_no_count_is_logged_as_none_and_the_invocation_runs(
    lambda_env: Path, redis_url: str, attempt: str,
) -> None:
    """The event's "attempt" only annotates the logs: one Python's int() refuses (a
    superscript digit, which str.isdigit accepts; thousands of digits) must not fail the
    invocation, which pushes by the Redis clock whatever the event says."""
    event = scheduler_event(redis_now(redis_url)) | {"attempt": attempt}
    assert app.trigger(event).attempt is None
    assert app.lambda_handler(event, Context())["new_schedules"] == 1


@pytest.mark.parametrize(("make_event", "correlation_id", "trigger"), [
    (scheduler_event, "exec-42", "scheduler"),
    (rule_event, "cdc73f9d-aea9-11e3-9d5a-835b769c0d9c", "rule"),
])
def test_an_invocation_pushes_due_ticks_and_logs_and_measures_them(
    lambda_env: Path, redis_url: str, redis_client: redis.Redis, logs: io.StringIO,
    capsys: pytest.CaptureFixture[str], make_event: Any, correlation_id: str, trigger: str,
) -> None:
    first = app.lambda_handler(make_event(redis_now(redis_url)), Context())
    assert first["new_schedules"] == 1 and first["pushed"] == 0
    rewind_mark(redis_client, "pulse", 3)
    scheduled = redis_now(redis_url) - timedelta(seconds=5)
    capsys.readouterr()
    result = app.lambda_handler(make_event(scheduled), Context())

    assert result["pushed"] >= 3
    assert distinct_jids(redis_client, "queue:pulse") == result["pushed"]
    assert 4 <= result["trigger_lateness_s"] < 9
    metrics = emf(capsys.readouterr().out)
    assert metrics["TicksPushed"] == result["pushed"]
    assert metrics["TicksAlreadyPushed"] == result["already_pushed"] == 0
    assert metrics["TicksMissed"] == 0
    assert metrics["Schedules"] == 1
    assert metrics["LargestLag"] == pytest.approx(result["lag_s"], abs=0.01)
    assert metrics["TriggerLateness"] == pytest.approx(result["trigger_lateness_s"], abs=0.01)
    line = log_lines(logs)[-1]
    assert line["level"] == "INFO"
    assert line["correlation_id"] == correlation_id
    assert line["trigger"] == trigger
    assert line["report"]["pushed"] == result["pushed"]
    assert line["function_request_id"]  # the Lambda context is in every line


def test_the_first_invocation_of_a_container_records_a_cold_start(
    lambda_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from aws_lambda_powertools.metrics.provider import cold_start

    cold_start.reset_cold_start_flag()
    app.lambda_handler({}, Context())
    assert emf(capsys.readouterr().out)["ColdStart"] == 1
    app.lambda_handler({}, Context())
    assert "ColdStart" not in emf(capsys.readouterr().out)


def test_warm_invocations_reuse_the_engine_its_client_and_the_parsed_schedule(
    lambda_env: Path,
) -> None:
    app.lambda_handler({}, Context())
    assert app._warm is not None
    (engine,) = app._warm.engines.values()
    client, config = engine.client, engine.config()
    app.lambda_handler({}, Context())
    assert list(app._warm.engines.values()) == [engine]
    assert engine.client is client
    assert engine.config() is config


def test_a_duplicate_delivery_pushes_nothing_twice(
    lambda_env: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    app.lambda_handler({}, Context())
    rewind_mark(redis_client, "pulse", 3)
    event = scheduler_event(redis_now(redis_url))
    first = app.lambda_handler(event, Context())
    again = app.lambda_handler(event, Context())
    assert first["pushed"] >= 3
    assert again["pushed"] <= 1  # at most a tick that came due in between
    # Distinct jids, counted in Redis: a tick pushed twice would show as one jid twice.
    assert distinct_jids(redis_client, "queue:pulse") == redis_client.llen("queue:pulse")
    assert redis_client.llen("queue:pulse") == first["pushed"] + again["pushed"]


def test_the_missed_jobs_window_variable_overrides_the_document(lambda_env: Path) -> None:
    def engine(window: str) -> Engine:
        return Engine.from_environ({"KIQBEAT_CONFIG": str(lambda_env),
                                    "KIQBEAT_MISSED_JOBS_WINDOW": window})

    assert engine("90m").config().missed_jobs_window_s == 5400
    with pytest.raises(ConfigError, match="KIQBEAT_MISSED_JOBS_WINDOW: 'soon' is not a duration"):
        engine("soon")
    with pytest.raises(ConfigError, match=r"KIQBEAT_MISSED_JOBS_WINDOW: '0' must be longer"):
        engine("0")


def test_a_bad_source_fails_the_invocation_with_a_logged_error_and_pushes_nothing(
    aws: Any, lambda_env: Path, redis_client: redis.Redis, logs: io.StringIO,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KIQBEAT_CONFIG", "ssm:/kiqbeat/missing")
    with pytest.raises(ConfigError, match="ssm:/kiqbeat/missing: not found"):
        app.lambda_handler(scheduler_event(datetime.now(UTC)), Context())
    line = log_lines(logs)[-1]
    assert line["level"] == "ERROR"
    assert line["message"] == "kiqbeat invocation failed"
    assert line["config_source"] == "ssm:/kiqbeat/missing"
    assert "ParameterNotFound" in line["exception"]
    assert emf(capsys.readouterr().out)["InvocationsFailed"] == 1
    assert redis_client.dbsize() == 0


def test_an_unreachable_redis_fails_without_logging_its_password(
    lambda_env: Path, logs: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = closed_port()
    monkeypatch.setenv("KIQBEAT_REDIS_URL", f"redis://kiqbeat:hunter2-secret@127.0.0.1:{port}/0")
    with pytest.raises(RedisUnavailableError) as caught:
        app.lambda_handler({}, Context())
    assert "hunter2-secret" not in str(caught.value)
    text = logs.getvalue()
    assert "kiqbeat invocation failed" in text
    assert "hunter2-secret" not in text
    assert f"127.0.0.1:{port}/0" in text  # named by host, port and db only


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_remote_schedule_and_redis_secret_end_to_end(
    aws: Any, lambda_env: Path, redis_url: str, redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = boto3.session.Session()
    session.client("ssm").put_parameter(Name="/kiqbeat/schedule", Value=SCHEDULE,
                                        Type="SecureString")
    session.client("secretsmanager").create_secret(Name="kiqbeat/redis",
                                                   SecretString=json.dumps({"url": redis_url}))
    monkeypatch.setenv("KIQBEAT_CONFIG", "ssm:/kiqbeat/schedule")
    monkeypatch.setenv("KIQBEAT_REDIS_URL", "")
    monkeypatch.setenv("KIQBEAT_REDIS_SECRET", "kiqbeat/redis")
    assert app.lambda_handler({}, Context())["new_schedules"] == 1
    rewind_mark(redis_client, "pulse", 3)
    pushed = app.lambda_handler({}, Context())["pushed"]
    assert pushed >= 3
    assert distinct_jids(redis_client, "queue:pulse") == pushed


@pytest.mark.parametrize("tracing", ["true", ""])
def test_the_tracer_is_imported_only_when_switched_on(tracing: str) -> None:
    code = ("import sys, handler.app; "
            "print('aws_xray_sdk' in sys.modules, 'boto3' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIQBEAT_")}
    env["KIQBEAT_TRACING"] = tracing
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env, cwd=Path(__file__).parents[2], check=True)
    assert done.stdout.split() == [str(tracing == "true"), "False"]


# --- the invocation ends before Lambda's timeout, with its failure logged and counted ------

def test_a_hanging_document_fetch_fails_the_invocation_before_lambda_times_out(
    aws: Any, lambda_env: Path, logs: io.StringIO, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KIQBEAT_CONFIG", "ssm:/kiqbeat/schedule")
    context = Context(timeout_ms=5_500)  # 2.5 s to use, after the handler's 3 s margin
    with hanging_endpoint() as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", url)
        with pytest.raises(ConfigError, match="ssm:/kiqbeat/schedule: AWS unreachable"):
            app.lambda_handler(scheduler_event(datetime.now(UTC)), context)
    # Lambda would have killed it at 0, losing the log line and the metrics below.
    assert context.get_remaining_time_in_millis() > 2_000
    assert log_lines(logs)[-1]["message"] == "kiqbeat invocation failed"
    assert emf(capsys.readouterr().out)["InvocationsFailed"] == 1


def test_a_slow_document_leaves_the_secret_fetch_only_the_time_left(
    aws: Any, lambda_env: Path, logs: io.StringIO, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fetched: list[str] = []

    def slow_fetch(self: Sources, source: str) -> bytes:  # a slow but working source
        fetched.append(source)
        time.sleep(2.0)
        return SCHEDULE.encode()

    monkeypatch.setattr(Sources, "fetch_document", slow_fetch)
    monkeypatch.setenv("KIQBEAT_CONFIG", "ssm:/kiqbeat/schedule")
    monkeypatch.setenv("KIQBEAT_REDIS_URL", "")
    monkeypatch.setenv("KIQBEAT_REDIS_SECRET", "kiqbeat/redis")
    context = Context(timeout_ms=6_000)  # 3 s to use: 2 s go to the document
    with hanging_endpoint() as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", url)
        with pytest.raises(ConfigError, match=r"^secret kiqbeat/redis: not calling AWS with "
                                              r"[01]\.\d s left before the invocation deadline"):
            app.lambda_handler({}, context)
    assert fetched == ["ssm:/kiqbeat/schedule"]
    assert context.get_remaining_time_in_millis() > 2_000
    assert log_lines(logs)[-1]["message"] == "kiqbeat invocation failed"
    assert emf(capsys.readouterr().out)["InvocationsFailed"] == 1


def test_pushing_stops_at_a_deadline_counted_from_the_start_of_the_invocation(
    lambda_env: Path, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kiqbeat.errors import DeadlineError

    app.lambda_handler({}, Context())
    rewind_mark(redis_client, "pulse", 5)  # ticks are due
    load_config = Sources.load_config

    def slow_load(self: Sources, source: str, **kwargs: Any) -> Any:
        time.sleep(1.5)
        return load_config(self, source, **kwargs)

    monkeypatch.setattr(Sources, "load_config", slow_load)
    with pytest.raises(DeadlineError):
        app.lambda_handler({}, Context(timeout_ms=4_000))  # 1 s to use, 1.5 s spent loading
    assert redis_client.llen("queue:pulse") == 0


def test_a_config_max_age_of_zero_fetches_every_time_and_works(lambda_env: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """template.yaml allows ConfigMaxAge 0 (fetch every invocation): it must not fail."""
    monkeypatch.setenv("KIQBEAT_CONFIG_MAX_AGE", "0")
    app.forget_warm()
    assert app.lambda_handler({}, Context())["new_schedules"] == 1


# --- one function, N shards: each schedule's event names its shard ---------------------------

NAMES = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")
SHARDED = "missed_jobs_window: 1h\nschedules:\n" + "".join(
    f"  {name}: {{cron: '* * * * * *', class: PulseWorker, queue: {name}}}\n" for name in NAMES)


@pytest.fixture
def three_shards(lambda_env: Path, monkeypatch: pytest.MonkeyPatch) -> dict[int, list[str]]:
    """A function deployed with ShardCount=3 over six every-second schedules, one queue
    each: which names each shard holds."""
    lambda_env.write_text(SHARDED)
    monkeypatch.setenv("KIQBEAT_SHARD_COUNT", "3")
    # Once, before the first invocation: invocations never record the count themselves.
    assert app.lambda_handler({"kiqbeat": "reindex", "shards": 3}, Context())["shards"] == 3
    app.forget_warm()  # the tests count the engines the shards' invocations keep
    by_shard = {i: [n for n in NAMES if shard_of(n, 3) == i] for i in range(3)}
    assert all(by_shard.values())  # every shard has schedules, or the test proves nothing
    return by_shard


def sharded_event(shard: str) -> dict[str, Any]:
    """What template.yaml's schedule of that shard sends."""
    return scheduler_event(datetime.now(UTC)) | {"shard": shard}


def queued(redis_client: redis.Redis) -> set[str]:
    return {name for name in NAMES if redis_client.llen(f"queue:{name}")}


def test_each_shard_named_in_the_event_pushes_only_its_own_schedules(
    three_shards: dict[int, list[str]], redis_client: redis.Redis, logs: io.StringIO,
) -> None:
    for index in range(3):  # the first minute: each shard marks its schedules first-seen
        assert app.lambda_handler(sharded_event(f"{index}/3"), Context())["new_schedules"] == (
            len(three_shards[index]))
    for name in NAMES:  # every schedule now has ticks to push, in its own shard's index
        rewind_mark(redis_client, name, 3, (shard_of(name, 3), 3))

    result = app.lambda_handler(sharded_event("1/3"), Context())
    assert result["shard"] == "1/3"
    assert queued(redis_client) == set(three_shards[1])
    assert result["pushed"] == sum(redis_client.llen(f"queue:{n}") for n in three_shards[1])
    assert log_lines(logs)[-1]["shard"] == "1/3"

    app.lambda_handler(sharded_event("0/3"), Context())
    assert queued(redis_client) == set(three_shards[0] + three_shards[1])
    app.lambda_handler(sharded_event("2/3"), Context())
    assert queued(redis_client) == set(NAMES)
    # One warm engine per shard, kept; the document and secret fetched once for all.
    assert app._warm is not None
    engines = app._warm.engines
    assert set(engines) == {(0, 3), (1, 3), (2, 3)}
    assert {e.settings.shard for e in engines.values()} == set(engines)
    assert all(e.sources is app._warm.sources for e in engines.values())
    before = dict(engines)
    app.lambda_handler(sharded_event("1/3"), Context())
    assert app._warm.engines == before


def test_the_events_shard_wins_over_kiqbeat_shard_which_serves_events_without_one(
    lambda_env: Path, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    lambda_env.write_text(SHARDED)
    monkeypatch.setenv("KIQBEAT_SHARD", "0/3")  # no KIQBEAT_SHARD_COUNT: nothing to check
    app.lambda_handler({"kiqbeat": "reindex", "shards": 3}, Context())
    assert app.lambda_handler({}, Context())["shard"] == "0/3"
    assert app.lambda_handler(sharded_event("2/3"), Context())["shard"] == "2/3"
    for name in NAMES:
        rewind_mark(redis_client, name, 3, (shard_of(name, 3), 3))
    app.lambda_handler(sharded_event("2/3"), Context())
    assert queued(redis_client) == {n for n in NAMES if shard_of(n, 3) == 2}
    app.lambda_handler({}, Context())
    assert queued(redis_client) == {n for n in NAMES if shard_of(n, 3) in (0, 2)}


@pytest.mark.parametrize(("event", "refused"), [
    ({"shard": "1/x"}, r"the event's \"shard\": invalid shard '1/x': expected INDEX/COUNT"),
    ({"shard": "3/3"}, r"the event's \"shard\": invalid shard 3/3: expected INDEX/COUNT with "
                       r"0 <= INDEX < COUNT"),
    ({"shard": 1}, r"the event's \"shard\": invalid shard 1: expected a string INDEX/COUNT"),
    ({"shard": ""}, r"the event's \"shard\": invalid shard ''"),
    ({"shard": None}, r"the event's \"shard\": invalid shard None"),
    # Valid shards, but not of this function's 3: a changed document would be filed in
    # indexes no schedule of this deployment reads.
    ({"shard": "1/4"}, r"the event's shard 1/4 is not one of this deployment's 3 shards "
                       r"\(KIQBEAT_SHARD_COUNT, --shard-count\); expected I/3"),
    ({"shard": "0/1"}, r"the event's shard 0/1 is not one of this deployment's 3 shards"),
    ({}, r"this deployment runs 3 shards \(KIQBEAT_SHARD_COUNT, --shard-count\): name one in "
         r"the event, e.g. \{\"shard\": \"0/3\"\}"),
], ids=["not-a-shard", "index-too-large", "a-number", "empty", "null", "other-count",
        "whole-store", "none"])
def test_a_bad_or_foreign_shard_fails_the_invocation_and_touches_nothing(
    three_shards: dict[int, list[str]], redis_client: redis.Redis, logs: io.StringIO,
    capsys: pytest.CaptureFixture[str], event: dict[str, Any], refused: str,
) -> None:
    with pytest.raises(ConfigError, match=refused):
        app.lambda_handler(scheduler_event(datetime.now(UTC)) | event, Context())
    line = log_lines(logs)[-1]
    assert line["level"] == "ERROR"
    assert line["message"] == "kiqbeat invocation failed"
    assert emf(capsys.readouterr().out)["InvocationsFailed"] == 1
    # Not even the document applied: only the count `reindex` recorded is there, the mark of
    # the name index it built (of an empty store), and its entry in the audit trail.
    assert sorted(redis_client.keys("*")) == ["kiqbeat:audit", "kiqbeat:names_built",
                                              "kiqbeat:shards"]


@pytest.mark.parametrize("count", ["0", "three", "-1", "1025", "100000000"])
def test_a_bad_shard_count_fails_every_invocation(
    lambda_env: Path, monkeypatch: pytest.MonkeyPatch, count: str,
) -> None:
    monkeypatch.setenv("KIQBEAT_SHARD_COUNT", count)
    with pytest.raises(ConfigError, match=f"KIQBEAT_SHARD_COUNT: '{count}' must be a whole "
                                          "number of shards, 1 to 1,024"):
        app.lambda_handler({"shard": "0/1"}, Context())


def test_with_one_shard_the_schedules_0_of_1_is_the_whole_store(
    lambda_env: Path, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # template.yaml's default, ShardCount=1: its one schedule sends "0/1".
    monkeypatch.setenv("KIQBEAT_SHARD_COUNT", "1")
    assert app.lambda_handler(sharded_event("0/1"), Context())["shard"] is None
    rewind_mark(redis_client, "pulse", 3)  # in the unsharded index, kiqbeat:due
    assert app.lambda_handler({}, Context())["pushed"] >= 3  # by hand, with no shard
    assert app._warm is not None and list(app._warm.engines) == [None]


# --- an operator's events: the store's operations, through the function ------------------------

def recorded_missed(lambda_env: Path, redis_client: redis.Redis,
                    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                    ) -> dict[str, Any]:
    """A 10 s window, then an invocation 30 s after the last: the report of the one that
    pushed the last 10 s of ticks and recorded the 20 s before them as missed."""
    monkeypatch.setenv("KIQBEAT_MISSED_JOBS_WINDOW", "10s")
    app.forget_warm()
    app.lambda_handler({}, Context())
    rewind_mark(redis_client, "pulse", 30)
    capsys.readouterr()
    report = app.lambda_handler({}, Context())
    assert emf(capsys.readouterr().out)["MissedRecorded"] == report["missed_recorded"]
    assert report["missed_recorded"] >= 15
    return report


def test_ticks_recorded_as_missed_are_listed_and_a_backfill_event_pushes_each_once(
    lambda_env: Path, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = recorded_missed(lambda_env, redis_client, monkeypatch, capsys)
    listed = app.lambda_handler({"kiqbeat": "missed"}, Context())
    assert {r["reason"] for r in listed["missed"]} == {"window"}
    assert sum(r["ticks"] for r in listed["missed"]) == report["missed_recorded"]

    before = redis_client.llen("queue:pulse")
    dry = app.lambda_handler({"kiqbeat": "backfill", "names": ["pulse"], "dry_run": True},
                             Context())
    assert (dry["planned"], dry["pushed"]) == (report["missed_recorded"], 0)
    assert redis_client.llen("queue:pulse") == before
    capsys.readouterr()
    done = app.lambda_handler({"kiqbeat": "backfill", "all": True}, Context())
    assert done["pushed"] == report["missed_recorded"]
    assert emf(capsys.readouterr().out)["Backfilled"] == done["pushed"]
    # Every job a different tick's, counted in Redis; nothing left to push a second time.
    assert redis_client.llen("queue:pulse") == before + done["pushed"]
    assert distinct_jids(redis_client, "queue:pulse") == redis_client.llen("queue:pulse")
    again = app.lambda_handler({"kiqbeat": "backfill", "names": ["pulse"]}, Context())
    assert again["pushed"] == 0
    assert app.lambda_handler({"kiqbeat": "missed"}, Context())["missed"] == []
    history = app.lambda_handler({"kiqbeat": "history", "name": "pulse"}, Context())
    assert history["history"] and history["history"][0]["kind"] == "backfill"


def test_a_backfill_stopped_at_the_deadline_pushes_the_rest_when_invoked_again(
    lambda_env: Path, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KIQBEAT_MISSED_JOBS_WINDOW", "10s")
    app.lambda_handler({}, Context())
    rewind_mark(redis_client, "pulse", 600)  # some 590 ticks recorded: several push calls
    recorded = app.lambda_handler({}, Context())["missed_recorded"]
    before = redis_client.llen("queue:pulse")
    event = {"kiqbeat": "backfill", "names": ["pulse"]}
    capsys.readouterr()
    cut = app.lambda_handler(event, Context(timeout_ms=3_000))  # no time left after the margin
    stopped = redis_client.llen("queue:pulse") - before
    assert 0 < stopped < recorded  # its first call only: it stopped part-way
    assert (cut["finished"], cut["pushed"]) == (False, stopped)
    assert emf(capsys.readouterr().out)["Backfilled"] == stopped
    rest = app.lambda_handler(event, Context())
    assert rest["pushed"] == recorded - stopped
    assert redis_client.llen("queue:pulse") == before + recorded
    assert distinct_jids(redis_client, "queue:pulse") == redis_client.llen("queue:pulse")


def test_a_trigger_event_pushes_one_manual_job_and_history_shows_it(
    lambda_env: Path, redis_client: redis.Redis,
) -> None:
    app.lambda_handler({}, Context())  # the document applied: pulse is in the store
    ran = app.lambda_handler({"kiqbeat": "trigger", "name": "pulse", "args": [7]}, Context())
    (job,) = [json.loads(raw) for raw in redis_client.lrange("queue:pulse", 0, -1)]
    assert job["jid"] == ran["jid"] and job["jid"].startswith("manual")
    assert job["args"] == [7]
    history = app.lambda_handler({"kiqbeat": "history", "name": "pulse"}, Context())["history"]
    assert history[0]["kind"] == "manual" and history[0]["jid"] == ran["jid"]


def test_operator_events_need_no_shard_on_a_sharded_function(
    three_shards: dict[int, list[str]],
) -> None:
    for index in range(3):
        app.lambda_handler(sharded_event(f"{index}/3"), Context())
    name = three_shards[2][0]
    ran = app.lambda_handler({"kiqbeat": "trigger", "name": name}, Context())
    assert ran["name"] == name
    assert app.lambda_handler({"kiqbeat": "missed"}, Context())["missed"] == []


@pytest.mark.parametrize(("event", "refused"), [
    ({"kiqbeat": "backfil"}, r"the event's \"kiqbeat\": 'backfil' is not an operation; "
                             r"expected one of missed, backfill, trigger, history"),
    ({"kiqbeat": "backfill", "names": ["pulse"], "dry_run": "yes"},
     r"the event's \"dry_run\": expected true or false, not 'yes'"),
    ({"kiqbeat": "backfill", "names": ["pulse"], "lastest_only": True},
     r"the event's \"lastest_only\" is not a field of 'backfill'"),
    ({"kiqbeat": "backfill", "names": "pulse"},
     r"the event's \"names\": expected a list of schedule names, not 'pulse'"),
    ({"kiqbeat": "backfill", "names": ["pulse"], "since": "yesterday"},
     r"the event's \"since\" 'yesterday' is not an ISO 8601 instant"),
    ({"kiqbeat": "backfill", "names": ["pulse"], "until": "2026-03-08T07:00:00"},
     r"the event's \"until\" '2026-03-08T07:00:00' has no UTC offset"),
    ({"kiqbeat": "backfill"}, r"a backfill needs the event's \"names\" .* or the event's "
                              r"\"all\""),
    ({"kiqbeat": "backfill", "names": ["pulse"], "all": True},
     r"a backfill needs the event's \"names\" .* or the event's \"all\" .* one of the two"),
    ({"kiqbeat": "trigger"}, r"'trigger' needs the event's \"name\""),
    ({"kiqbeat": "trigger", "name": "pulse", "args": "7"},
     r"the event's \"args\" must be a JSON array \(the job's arguments\).*, not '7'"),
    ({"kiqbeat": "missed", "shard": "0/1"}, r"the event's \"shard\" is not a field of 'missed'"),
], ids=["operation", "flag", "unknown", "names", "since", "naive-until", "neither", "both",
        "no-name", "args", "shard"])
def test_an_operator_event_with_a_bad_field_is_refused_and_does_nothing(
    lambda_env: Path, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], logs: io.StringIO, event: dict[str, Any], refused: str,
) -> None:
    recorded_missed(lambda_env, redis_client, monkeypatch, capsys)
    before = {key: redis_client.dump(key) for key in redis_client.keys("*")}
    with pytest.raises(ConfigError, match=refused):
        app.lambda_handler(event, Context())
    assert {key: redis_client.dump(key) for key in redis_client.keys("*")} == before
    assert log_lines(logs)[-1]["message"] == "kiqbeat operation failed"


def test_the_lambda_and_the_cli_give_the_same_refusal_for_since_after_until(
    lambda_env: Path, kiqbeat: Kiqbeat, monkeypatch: pytest.MonkeyPatch,
    redis_client: redis.Redis,
) -> None:
    """One request model: the same check, each naming the fields its own way."""
    monkeypatch.setenv("KIQBEAT_CONFIG", str(lambda_env))
    since, until = "2026-03-08T08:00:00Z", "2026-03-08T07:00:00Z"
    cli = kiqbeat("backfill", "--all", "--since", since, "--until", until)
    assert cli.code == 1
    assert f"--since '{since}' is later than --until '{until}'; nothing was done" in cli.err
    with pytest.raises(ConfigError) as refused:
        app.lambda_handler({"kiqbeat": "backfill", "all": True, "since": since,
                            "until": until}, Context())
    assert str(refused.value) == (f"the event's \"since\" '{since}' is later than the event's "
                                  f"\"until\" '{until}'; nothing was done")
    assert redis_client.dbsize() == 0


@pytest.mark.parametrize(("event", "refused"), [
    ({"kiqbeat": "trigger", "name": "pulse", "args": [nested(5_000)]},
     r"the event's \"args\": args.* nests deeper than the 100 levels"),
    ({"kiqbeat": "trigger", "name": "x" * 1_000_000},
     r"the event's \"name\": 'x{50}.* is 1,000,000 characters"),
    ({"kiqbeat": "backfill", "names": ["pulse"], "max_jobs": 0},
     r"the event's \"max_jobs\": expected a whole number of jobs"),
    ({"kiqbeat": "reindex", "shards": 100_000_000},
     r"the event's \"shards\": expected a whole number of shards, 1 to 1,024"),
], ids=["args-5000-deep", "1MB-name", "max-jobs-0", "shards-too-many"])
def test_a_failed_operator_event_is_a_clear_error_logged_as_a_clipped_summary(
    lambda_env: Path, redis_client: redis.Redis, logs: io.StringIO, event: dict[str, Any],
    refused: str,
) -> None:
    app.lambda_handler({}, Context())  # pulse in the store
    with pytest.raises(ConfigError, match=refused) as error:
        app.lambda_handler(event, Context())
    assert len(str(error.value)) < 1_000
    line = logs.getvalue().splitlines()[-1]
    assert json.loads(line)["message"] == "kiqbeat operation failed"
    assert len(line) < 20_000 and "RecursionError" not in line  # not the whole event
    assert redis_client.llen("queue:pulse") == 0


def test_operator_events_are_audited_with_their_actor_and_note_else_the_functions_name(
    lambda_env: Path, redis_client: redis.Redis,
) -> None:
    definition = {"cron": "0 9 * * *", "class": "DigestWorker"}
    app.lambda_handler({"kiqbeat": "put", "name": "d", "definition": definition}, Context())
    app.lambda_handler({"kiqbeat": "pause", "name": "d", "actor": "alice",
                        "note": "INC-7: provider down"}, Context())
    with pytest.raises(ConfigError, match="note"):
        app.lambda_handler({"kiqbeat": "resume", "name": "d", "note": "x" * 501}, Context())
    entries = [fields for _, fields in redis_client.xrange("kiqbeat:audit")]
    assert [(e["actor"], e["action"], e["note"]) for e in entries] == [
        ("lambda:kiqbeat-test", "put", ""), ("alice", "pause", "INC-7: provider down")]
