"""The Redis clock: the one clock kiqbeat trusts (DESIGN §1).

A public call reads it once and passes the instant down (`now_ms`), so every write it makes
and every row it shows share one instant.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from kiqbeat.redis.connection import redis_errors


def redis_time(seconds: Any, micros: Any) -> datetime:
    """The instant TIME's two numbers name (aware UTC)."""
    return datetime.fromtimestamp(int(seconds), tz=UTC) + timedelta(microseconds=int(micros))


def read_clock(client: redis.Redis) -> datetime:
    """The Redis clock, one TIME."""
    with redis_errors(client, "reading the clock"):
        seconds, micros = client.time()
    return redis_time(seconds, micros)
