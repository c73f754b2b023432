"""The Redis clock as kiqbeat reads it, and the test clock that runs it ahead.

kiqbeat refuses `--now` later than the Redis clock, so a test that needs time to pass moves
the clock on instead of sleeping: `advance_clock` adds to the offset kiqbeat's test clock
reads (kiqbeat/redis/clock.py; tests/conftest.py turns it on for the whole suite). Each test
starts at offset 0 (`redis_url` flushes the server). Never use it in place of a wait for a
real worker or process: only the Redis clock moves, not their work.
"""

from __future__ import annotations

from datetime import datetime

import redis

from kiqbeat.redis.clock import TEST_CLOCK_KEY, read_clock


def redis_now(client: redis.Redis) -> datetime:
    """The Redis clock as kiqbeat reads it (the test clock's offset included)."""
    return read_clock(client)


def advance_clock(client: redis.Redis, seconds: float) -> datetime:
    """Run kiqbeat's Redis clock `seconds` further ahead (whole milliseconds), for this
    process and every kiqbeat process and script on this server; the clock after."""
    if TEST_CLOCK_KEY is None:
        raise RuntimeError("the test clock is off: KIQBEAT_TEST_CLOCK=1 must be set before "
                           "kiqbeat is imported (tests/conftest.py sets it)")
    client.incrby(TEST_CLOCK_KEY, round(seconds * 1000))
    return redis_now(client)


def room_before_boundary(client: redis.Redis, every_s: float, need_s: float) -> None:
    """Move the clock on, if need be, until at least `need_s` are left before the Redis
    clock's next multiple of `every_s` (just past one): steps that follow within `need_s`
    see no tick of an every-`every_s` schedule come due between them."""
    left = every_s - redis_now(client).timestamp() % every_s
    if left <= need_s:
        advance_clock(client, left + 0.05)


def minute_floor(t: datetime) -> datetime:
    """`t` truncated to the minute."""
    return t.replace(second=0, microsecond=0)

