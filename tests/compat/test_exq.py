"""With `namespace: "exq:"` kiqbeat writes what Exq reads; checked against Exq's source (no Elixir).

From akira/exq (lib/exq/redis/job_queue.ex, lib/exq/support/job.ex, the JSON serializer):
keys are `full_key(namespace, key) = "#{namespace}:#{key}"` with namespace "exq" by default,
so `exq:queue:<q>` (a list, RPOPLPUSH from its right end, so LPUSH), `exq:queues` (a set)
and `exq:schedule` (a sorted set scored in float seconds, drained by ZRANGEBYSCORE up to
now). A job is decoded into a fixed struct: class, args, jid, queue, retry, retry_count,
enqueued_at (float seconds, as Exq's own `Time.unix_seconds()` writes), error_* and
unique_* fields. `dead?`: an integer `retry` > 0 is the retry limit, `true` means Exq's
max_retries, anything else (false, 0, missing) sends the job to `exq:dead` on its first
failure.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import redis

from kiqbeat.document.config import load_config_text
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


def exq_dead_on_first_failure(job: dict) -> bool:
    """Exq's JobQueue.dead?/1 for a job that has not failed yet (retry_count 0)."""
    retry = job.get("retry")
    if isinstance(retry, bool):
        return not retry  # true: Exq's max_retries (25 by default) applies
    if isinstance(retry, int):
        return retry < 1  # an integer limit: dead once retry_count + 1 exceeds it
    return True


def test_exq_namespace_keys_and_payloads_match_what_exq_reads(redis_client: redis.Redis) -> None:
    config = load_config_text(CONFIG)
    seconds, _ = redis_client.time()
    minute = datetime.fromtimestamp(seconds, tz=UTC).replace(second=0)
    run(redis_client, config, now=minute - timedelta(seconds=30))
    report = run(redis_client, config, now=minute)

    keys = set(redis_client.keys("*"))
    assert {"exq:queue:default", "exq:queue:sync", "exq:queues"} <= keys
    assert all(k.startswith("exq:") for k in keys), keys  # nothing outside Exq's namespace
    assert redis_client.smembers("exq:queues") == {"default", "sync"}

    jobs = {}
    for queue in ("default", "sync"):
        for raw in redis_client.lrange(f"exq:queue:{queue}", 0, -1):
            job = json.loads(raw)
            jobs[job["jid"]] = job
    by_name = {j.schedule: jobs[j.jid] for j in report.jobs if j.queue is not None}
    for job in by_name.values():
        assert {"class", "args", "jid", "queue", "retry", "enqueued_at"} <= job.keys()
        assert isinstance(job["args"], list)
        assert isinstance(job["enqueued_at"], float)       # seconds, as Exq writes them
        assert job["enqueued_at"] == minute.timestamp()
        assert "retry_count" not in job                   # Exq starts counting from nil/0
    report_job = by_name["exq_report"]
    assert (report_job["class"], report_job["args"]) == ("MyApp.ReportWorker", [1, {"a": 2}])
    assert by_name["exq_limited"]["queue"] == "sync"
    # What Exq keeps across a retry: its struct's fields only (created_at is dropped).
    assert set(report_job) - EXQ_JOB_FIELDS == {"created_at"}

    assert not exq_dead_on_first_failure(by_name["exq_report"])   # retry: true
    assert by_name["exq_limited"]["retry"] == 5                    # Exq's own per-job limit
    assert not exq_dead_on_first_failure(by_name["exq_limited"])
    assert by_name["exq_once"]["retry"] is False
    assert exq_dead_on_first_failure(by_name["exq_once"])           # dead on first failure

    # Pushed ahead: Exq's scheduler moves jobs whose score (float seconds) is <= now.
    ahead = [j for j in report.jobs if j.queue is None]
    assert ahead
    scored = dict(redis_client.zrange("exq:schedule", 0, -1, withscores=True))
    for job in ahead:
        (raw,) = [r for r in scored if json.loads(r)["jid"] == job.jid]
        assert scored[raw] == job.tick.timestamp()
        assert "enqueued_at" not in json.loads(raw)
