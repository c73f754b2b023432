"""Small helpers for engine tests: configs from YAML text, what Redis holds, expected ticks."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text
from kiqbeat.redis.state import read_state


def config(text: str) -> Config:
    """A Config from a YAML document."""
    return load_config_text(text, source="test")


def redis_now(client: redis.Redis) -> datetime:
    """The Redis clock."""
    seconds, micros = client.time()
    return datetime.fromtimestamp(seconds, tz=UTC) + timedelta(microseconds=micros)


def minute_floor(t: datetime) -> datetime:
    """`t` truncated to the minute."""
    return t.replace(second=0, microsecond=0)


def pushed_jobs(client: redis.Redis, namespace: str = "") -> list[dict[str, Any]]:
    """Every job in every queue listed in the queues set, oldest first, plus the schedule set."""
    jobs: list[dict[str, Any]] = []
    for queue in sorted(client.smembers(f"{namespace}queues")):
        name = queue.decode() if isinstance(queue, bytes) else queue
        raws = client.lrange(f"{namespace}queue:{name}", 0, -1)
        jobs += [json.loads(raw) for raw in reversed(raws)]
    jobs += [json.loads(raw) for raw in client.zrange(f"{namespace}schedule", 0, -1)]
    return jobs


def marks(client: redis.Redis, cfg: Config) -> dict[str, int | None]:
    """Stored watermarks by schedule name."""
    return read_state(client, cfg.namespace, [s.name for s in cfg.schedules])[1]
