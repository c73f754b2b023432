"""With `namespace: "exq:"` kiqbeat writes what Exq reads; checked against Exq's source (no Elixir).

Every expectation names the file and function of akira/exq (Exq 0.23 and master) that reads or
writes the field. Keys: `full_key(namespace, key) = "#{namespace}:#{key}"` with namespace "exq"
by default (lib/exq/redis/job_queue.ex), so `exq:queue:<q>` (a list, RPOPLPUSH from its right
end, so LPUSH), `exq:queues` (a set) and `exq:schedule` (a sorted set scored in float seconds).
A job is decoded into a fixed struct (lib/exq/serializers/json_serializer.ex `decode_job`,
lib/exq/support/job.ex): class, args, jid, queue, retry, retry_count, enqueued_at, error_*,
failed_at, retried_at, finished_at, processor and, from 0.19 on, unique_*.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from kiqbeat.core.payload import jid
from kiqbeat.document import load_config_text
from kiqbeat.engine import run

EXQ_JOB_FIELDS = {"class", "args", "jid", "queue", "retry", "retry_count", "enqueued_at",
                  "error_message", "error_class", "failed_at", "retried_at", "finished_at",
                  "processor", "unique_for", "unique_until", "unique_token", "unlocks_at"}
CONFIG = """
namespace: "exq:"
lookahead: 30s
schedules:
  exq_report: {cron: "* * * * *", class: MyApp.ReportWorker, args: [1, {"a": 2}]}
  exq_limited: {cron: "* * * * *", class: MyApp.SyncWorker, queue: sync, retry: 5}
  exq_once: {cron: "* * * * *", class: MyApp.PingWorker, retry: false}
  exq_ahead: {every: 10s, class: MyApp.TickWorker}
"""
# Elixir's DateTime.from_unix!/2 accepts instants from year -9999 to 9999 only (calendar.ex).
_ELIXIR_MAX_UNIX_MS = 253_402_300_799_999


def exq_dead_on_first_failure(job: dict[str, Any]) -> bool:
    """lib/exq/redis/job_queue.ex `dead?/1` for a job that has not failed yet (retry_count 0)."""
    retry = job.get("retry")
    if isinstance(retry, bool):
        return not retry  # true: Exq's max_retries (25 by default) applies
    if isinstance(retry, int):
        return retry < 1  # an integer limit: dead once retry_count + 1 exceeds it
    return True


def exq_telemetry_enqueued_at(job: dict[str, Any]) -> datetime:
    """lib/exq/middleware/telemetry.ex `metadata/1`, run by every job in before_work:
    `DateTime.from_unix!(round(job.enqueued_at * 1000), :millisecond)`.

    A missing `enqueued_at` is nil, and `nil * 1000` raises ArithmeticError: the worker
    crashes and the job stays in Exq's backup queue.
    """
    value = job.get("enqueued_at")
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ArithmeticError(f"bad argument in arithmetic expression: {value!r} * 1000")
    unix_ms = round(value * 1000)
    if not -377_705_116_800_000 <= unix_ms <= _ELIXIR_MAX_UNIX_MS:
        raise ValueError(f"DateTime.from_unix!: invalid Unix time {unix_ms} (ms)")
    return datetime.fromtimestamp(unix_ms / 1000, tz=UTC)


def exq_scheduler_moves_due_jobs(client: redis.Redis, namespace: str, until_s: float) -> None:
    """What lib/exq/redis/script.ex `scheduler_dequeue` does each poll: every job scored at or
    before now leaves `<ns>schedule` and is LPUSHed, byte for byte, to the queue named by its
    own `queue` field (`cjson.decode(job)['queue']`), with SADD `<ns>queues`. Nothing is added."""
    for raw in client.zrangebyscore(f"{namespace}schedule", 0, until_s):
        queue = json.loads(raw)["queue"]
        if client.zrem(f"{namespace}schedule", raw):
            client.sadd(f"{namespace}queues", queue)
            client.lpush(f"{namespace}queue:{queue}", raw)


def exq_job(
    name: str, tick: datetime, *, job_class: str, args: list[Any], pushed: datetime,
    enqueued: datetime, queue: str = "default", retry: bool | int = True, fmt: str = "s",
) -> dict[str, Any]:
    """The job kiqbeat must write, field by field, with where Exq reads or writes each one."""
    def stamp(instant: datetime) -> float | int:
        return round(instant.timestamp() * 1000) if fmt == "ms" else instant.timestamp()
    return {
        # lib/exq/middleware/job.ex `before_work`: String.replace(job.class, "::", ".") gives
        # the module `Elixir.<class>`; job_queue.ex `to_job_serialized` strips "Elixir.".
        "class": job_class,
        # lib/exq/worker/server.ex `dispatch_work`: apply(worker_module, :perform, job.args),
        # so always a list.
        "args": args,
        # lib/exq/redis/script.ex `scheduler_dequeue`: cjson.decode(job)['queue'] picks the
        # list a scheduled job moves to; job_queue.ex `to_job_serialized` writes it.
        "queue": queue,
        # job_queue.ex `to_job_serialized` writes a jid; telemetry.ex `metadata` reports it and
        # `find_job`/`remove_job` match on it.
        "jid": jid(name, tick),
        # job_queue.ex `dead?`: true -> Exq's max_retries, an integer > 0 -> that many retries,
        # anything else -> dead on the first failure.
        "retry": retry,
        # telemetry.ex `metadata`: round(job.enqueued_at * 1000) in ms, so float seconds.
        # job_queue.ex `to_job_serialized` writes Time.unix_seconds() for a queue job and
        # `enqueue_at` writes Time.unix_seconds(time), the instant it is due, for a job in the
        # schedule set; script.ex `scheduler_dequeue` moves that job without touching it.
        "enqueued_at": stamp(enqueued),
        # Not read by Exq (json_serializer.ex `decode_job` drops it); Sidekiq's client sets
        # it at push time (lib/sidekiq/job_util.rb `normalize_item`).
        "created_at": stamp(pushed),
        # Exq drops unknown keys when it decodes a job and keeps them in the raw JSON its
        # middlewares see: the Exq outcome middleware (clients/elixir) reads these two.
        "kiqbeat_schedule": name,
        "kiqbeat_tick": round(tick.timestamp() * 1000),
    }


@pytest.fixture
def pushed(redis_client: redis.Redis) -> tuple[datetime, dict[str, dict[str, Any]], list[Any]]:
    """Two invocations 45 s apart (a 30 s lookahead): queue jobs and schedule-set jobs."""
    config = load_config_text(CONFIG)
    seconds, _ = redis_client.time()
    minute = datetime.fromtimestamp(seconds, tz=UTC).replace(second=0)
    run(redis_client, config, now=minute - timedelta(seconds=45))
    report = run(redis_client, config, now=minute)
    jobs = {}
    for queue in ("default", "sync"):
        for raw in redis_client.lrange(f"exq:queue:{queue}", 0, -1):
            job = json.loads(raw)
            jobs[job["jid"]] = job
    return minute, jobs, report.jobs


def test_exq_namespace_keys_are_the_ones_exq_reads(
    redis_client: redis.Redis,
    pushed: tuple[datetime, dict[str, dict[str, Any]], list[Any]],
) -> None:
    keys = set(redis_client.keys("*"))
    assert {"exq:queue:default", "exq:queue:sync", "exq:queues", "exq:schedule"} <= keys
    assert all(k.startswith("exq:") for k in keys), keys  # nothing outside Exq's namespace
    assert redis_client.smembers("exq:queues") == {"default", "sync"}


def test_queue_jobs_carry_every_field_exq_reads(
    pushed: tuple[datetime, dict[str, dict[str, Any]], list[Any]],
) -> None:
    minute, jobs, _ = pushed
    assert jobs[jid("exq_report", minute)] == exq_job(
        "exq_report", minute, job_class="MyApp.ReportWorker", args=[1, {"a": 2}],
        pushed=minute, enqueued=minute)
    assert jobs[jid("exq_limited", minute)] == exq_job(
        "exq_limited", minute, job_class="MyApp.SyncWorker", args=[], queue="sync", retry=5,
        pushed=minute, enqueued=minute)
    assert jobs[jid("exq_once", minute)] == exq_job(
        "exq_once", minute, job_class="MyApp.PingWorker", args=[], retry=False,
        pushed=minute, enqueued=minute)
    for job in jobs.values():
        assert exq_telemetry_enqueued_at(job) == minute
        assert "retry_count" not in job                   # Exq starts counting from nil/0
        # What Exq keeps across a retry: its struct's fields only (created_at is dropped,
        # and so are kiqbeat's outcome keys: the Exq middleware reports a first attempt
        # only, docs/compatibility.md).
        assert set(job) - EXQ_JOB_FIELDS == {"created_at", "kiqbeat_schedule", "kiqbeat_tick"}

    assert not exq_dead_on_first_failure(jobs[jid("exq_report", minute)])  # retry: true
    assert not exq_dead_on_first_failure(jobs[jid("exq_limited", minute)])  # 5 retries
    assert exq_dead_on_first_failure(jobs[jid("exq_once", minute)])


def test_schedule_set_jobs_carry_enqueued_at_as_exqs_own_enqueue_at_writes_it(
    redis_client: redis.Redis,
    pushed: tuple[datetime, dict[str, dict[str, Any]], list[Any]],
) -> None:
    minute, _, reported = pushed
    ahead = [j for j in reported if j.queue is None]
    assert ahead, "the second invocation pushed nothing ahead"
    scored = {json.loads(raw)["jid"]: (json.loads(raw), score)
              for raw, score in redis_client.zrange("exq:schedule", 0, -1, withscores=True)}
    for job in ahead:
        payload, score = scored[job.jid]
        # job_queue.ex `do_enqueue_job_at`: score = Time.time_to_score(time), float seconds.
        assert score == job.tick.timestamp()
        assert payload == exq_job("exq_ahead", job.tick, job_class="MyApp.TickWorker", args=[],
                                  pushed=minute, enqueued=job.tick)

    # Exq's scheduler moves them unchanged; its Telemetry middleware must still read them.
    last = max(j.tick for j in ahead)
    exq_scheduler_moves_due_jobs(redis_client, "exq:", last.timestamp())
    moved = {json.loads(raw)["jid"]: json.loads(raw)
             for raw in redis_client.lrange("exq:queue:default", 0, -1)}
    for job in ahead:
        assert exq_telemetry_enqueued_at(moved[job.jid]) == job.tick


def test_every_job_kiqbeat_pushes_for_exq_has_an_enqueued_at(
    redis_client: redis.Redis,
    pushed: tuple[datetime, dict[str, dict[str, Any]], list[Any]],
) -> None:
    # The first invocation's lookahead jobs too (a new schedule's first ticks).
    every = [json.loads(raw) for raw in redis_client.zrange("exq:schedule", 0, -1)]
    every += pushed[1].values()
    assert every
    for job in every:
        exq_telemetry_enqueued_at(job)  # raises like Exq's middleware would


@pytest.mark.parametrize("scheduled", [False, True])
def test_ms_stamps_are_sidekiq_8s_and_exqs_telemetry_cannot_read_them(
    redis_client: redis.Redis, scheduled: bool,
) -> None:
    # timestamp_format: ms writes integer milliseconds; Exq's Telemetry reads seconds, so the
    # instant is past Elixir's year 9999 and DateTime.from_unix! raises (docs say: Exq uses s).
    config = load_config_text("""
namespace: "exq:"
timestamp_format: ms
lookahead: 30s
schedules:
  exq_ms: {every: 10s, class: MyApp.TickWorker}
""")
    seconds, _ = redis_client.time()
    minute = datetime.fromtimestamp(seconds, tz=UTC).replace(second=0)
    run(redis_client, config, now=minute - timedelta(seconds=45))
    report = run(redis_client, config, now=minute)
    (job_ref, *_) = [j for j in report.jobs if (j.queue is None) == scheduled]
    if scheduled:
        raws = redis_client.zrange("exq:schedule", 0, -1)
    else:
        raws = redis_client.lrange("exq:queue:default", 0, -1)
    (job,) = [json.loads(r) for r in raws if json.loads(r)["jid"] == job_ref.jid]
    assert job == exq_job("exq_ms", job_ref.tick, job_class="MyApp.TickWorker", args=[],
                          pushed=minute, enqueued=job_ref.tick if scheduled else minute,
                          fmt="ms")
    with pytest.raises(ValueError, match="invalid Unix time"):
        exq_telemetry_enqueued_at(job)
