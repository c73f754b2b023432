"""The Engine object: what it keeps between invocations, and what it reports each time."""

from __future__ import annotations

from datetime import timedelta

import redis

from kiqbeat.engine import Engine
from kiqbeat.settings import Settings
from tests.integration.helpers import config, redis_now

EVERY_SECOND = """
missed_jobs_window: 60s
wait_replicas: 1
wait_timeout: 0.1s
schedules:
  pulse:
    cron: "* * * * * *"
    class: PulseWorker
"""


def seed_mark(client: redis.Redis, name: str, seconds_ago: float) -> None:
    """A watermark as if the last invocation ran `seconds_ago` (no sleeping)."""
    mark = redis_now(client) - timedelta(seconds=seconds_ago)
    client.hset("kiqbeat:watermarks", name, int(mark.timestamp() * 1000))


def test_each_invocations_own_warnings_are_reported_every_time_config_warnings_once(
    redis_client: redis.Redis,
) -> None:
    cfg = config(EVERY_SECOND)
    engine = Engine(client=redis_client)
    reports = []
    for _ in range(3):
        seed_mark(redis_client, "pulse", 3)  # ticks to push, so WAIT runs and falls short
        reports.append(engine.run(cfg))
    short = [[w for w in r.warnings if "replicas acknowledged" in w] for r in reports]
    assert all(len(s) == 1 for s in short), short  # no replica here: short every time
    window = [[w for w in r.warnings if w.startswith("missed_jobs_window is")] for r in reports]
    assert [len(w) for w in window] == [1, 0, 0]  # the document's warning, once
    assert all(r.unreplicated == r.pushed > 0 for r in reports)


def test_an_engine_runs_its_startup_checks_once_per_client(redis_client: redis.Redis) -> None:
    redis_client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        engine = Engine(client=redis_client)
        cfg = config(EVERY_SECOND.replace("wait_replicas: 1", "wait_replicas: 0"))
        first, second = engine.run(cfg), engine.run(cfg)
        # A fresh engine on the same client reports it again: it has not told anyone yet.
        third = Engine(client=redis_client).run(cfg)
    finally:
        redis_client.config_set("maxmemory-policy", "noeviction")
    evicting = [sum("maxmemory-policy" in w for w in r.warnings) for r in (first, second, third)]
    assert evicting == [1, 0, 1]


def test_an_engine_reads_its_document_and_redis_from_settings(
    tmp_path: object, redis_url: str, redis_client: redis.Redis,
) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "schedule.yaml"
    path.write_text(EVERY_SECOND.replace("wait_replicas: 1", "wait_replicas: 0"))
    engine = Engine(Settings.load({"KIQBEAT_CONFIG": str(path), "KIQBEAT_REDIS_URL": redis_url,
                                   "KIQBEAT_MISSED_JOBS_WINDOW": "2m"}))
    assert engine.config().missed_jobs_window_s == 120
    assert engine.run().new_schedules == 1
    assert redis_client.hexists("kiqbeat:watermarks", "pulse")
    engine.close()
