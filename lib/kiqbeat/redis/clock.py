"""The Redis clock: the one clock kiqbeat trusts (DESIGN §1).

A public call reads it once and passes the instant down (`now_ms`), so every write it makes
and every row it shows share one instant.

The test clock: kiqbeat refuses `--now` later than the Redis clock, so a test that needs
time to pass would have to sleep. In a process started with `KIQBEAT_TEST_CLOCK=1` (the
test suite sets it; a deployment never does), the clock reads `TEST_CLOCK_KEY`'s whole
milliseconds (none, or a user that may not read it: 0) and runs that far ahead of TIME,
here and in every script (`redis_clock` in lua/checks.lua, written by scripts.py), so a
test moves time on with one INCRBY (tests/support/clock.py). Without the variable the key
is never read.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from kiqbeat.redis.connection import redis_errors

# The test clock's offset (module docstring): its key, in tests only, else None.
TEST_CLOCK_KEY = ("kiqbeat-test-clock-offset-ms" if os.environ.get("KIQBEAT_TEST_CLOCK") == "1"
                  else None)


def redis_time(seconds: Any, micros: Any) -> datetime:
    """The instant TIME's two numbers name (aware UTC)."""
    return datetime.fromtimestamp(int(seconds), tz=UTC) + timedelta(microseconds=int(micros))


def read_clock(client: redis.Redis) -> datetime:
    """The Redis clock, one TIME."""
    with redis_errors(client, "reading the clock"):
        if TEST_CLOCK_KEY is None:
            seconds, micros = client.time()
            return redis_time(seconds, micros)
        pipe = client.pipeline(transaction=False)
        pipe.time()
        pipe.get(TEST_CLOCK_KEY)
        (seconds, micros), offset = pipe.execute(raise_on_error=False)
    ahead_ms = 0 if isinstance(offset, Exception) else int(offset or 0)
    return redis_time(seconds, micros) + timedelta(milliseconds=ahead_ms)
