"""The test clock (kiqbeat/redis/clock.py): in the test suite kiqbeat's Redis clock runs as
far ahead of TIME as tests/support/clock.py's `advance_clock` moved it, in Python and in every
script that reads the clock, and a process without `KIQBEAT_TEST_CLOCK=1` never reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
import redis

from kiqbeat.core.schedule import Config
from kiqbeat.engine import run
from kiqbeat.errors import ConfigError
from kiqbeat.redis.clock import TEST_CLOCK_KEY
from kiqbeat.redis.operator_reads import read_history
from kiqbeat.redis.side import RedisSide
from kiqbeat.store import Store
from tests.support.clock import advance_clock, redis_now

EVERY_SECOND = {"every": "1s", "class": "X"}
STORE_ONLY = Config(schedules=())
HOUR = timedelta(hours=1)
# The clock moves while the test runs: facts about it hold within this much.
SLACK = timedelta(seconds=30)


def server_time(client: redis.Redis) -> datetime:
    """TIME as the server tells it, with no offset."""
    seconds, micros = client.time()
    return datetime.fromtimestamp(seconds, tz=UTC) + timedelta(microseconds=micros)


def test_the_suite_runs_with_the_test_clock_on() -> None:
    assert os.environ.get("KIQBEAT_TEST_CLOCK") == "1"
    assert TEST_CLOCK_KEY is not None


def test_the_clock_read_in_python_runs_as_far_ahead_as_it_was_moved(
        client: redis.Redis) -> None:
    before = redis_now(client)
    assert abs(before - server_time(client)) < SLACK  # each test starts at offset 0
    advance_clock(client, 3600)
    ahead = redis_now(client) - server_time(client)
    assert HOUR - SLACK < ahead < HOUR + SLACK
    assert RedisSide(client, "").clock() - server_time(client) > HOUR - SLACK


def test_an_invocation_reads_the_moved_clock_and_accepts_a_now_up_to_it(
        client: redis.Redis) -> None:
    Store(client).put("x", EVERY_SECOND)
    run(client, STORE_ONLY)  # registered: its ticks from here on are owed
    later = server_time(client) + timedelta(minutes=30)
    with pytest.raises(ConfigError, match="later than the Redis clock"):
        run(client, STORE_ONLY, now=later)
    advance_clock(client, 3600)
    assert run(client, STORE_ONLY, now=later).pushed >= 29 * 60  # no longer ahead of the clock
    report = run(client, STORE_ONLY)  # due.lua's clock, the default `now`
    assert HOUR - SLACK < report.now - server_time(client) < HOUR + SLACK


def test_the_scripts_record_pushes_at_the_moved_clock(client: redis.Redis) -> None:
    store = Store(client)
    store.put("x", EVERY_SECOND)
    run(client, STORE_ONLY)
    advance_clock(client, 3600)
    run(client, STORE_ONLY)  # push.lua records each push at its clock
    pushes, _ = read_history(client, "", "x")
    assert isinstance(pushes, list) and pushes
    for push in pushes:
        assert timedelta(0) <= push.when - push.tick < SLACK  # pushed when it came due
        assert push.when - server_time(client) > HOUR - SLACK


def test_a_process_without_the_flag_never_reads_the_offset(
        client: redis.Redis, redis_url: str) -> None:
    advance_clock(client, 3600)
    env = {k: v for k, v in os.environ.items() if k != "KIQBEAT_TEST_CLOCK"}
    code = ("import json, sys, redis\n"
            "from kiqbeat.redis.clock import TEST_CLOCK_KEY, read_clock\n"
            "from kiqbeat.engine import run\n"
            "from kiqbeat.core.schedule import Config\n"
            "c = redis.Redis.from_url(sys.argv[1])\n"
            "print(json.dumps([TEST_CLOCK_KEY, read_clock(c).timestamp(),\n"
            "                  run(c, Config(schedules=())).now.timestamp()]))\n")
    done = subprocess.run([sys.executable, "-c", code, redis_url], env=env, check=True,
                          capture_output=True, text=True, timeout=60)
    key, clock_s, invocation_s = json.loads(done.stdout)
    assert key is None
    now = server_time(client)
    for seconds in (clock_s, invocation_s):
        assert abs(datetime.fromtimestamp(seconds, tz=UTC) - now) < SLACK

