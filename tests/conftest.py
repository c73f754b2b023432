"""Fixtures shared by every test folder: private redis-server processes on free loopback ports.

The redis-server is the first on PATH: Debian's by default, or the matrix's chosen one
(`scripts/test --server NAME`, tests/support/servers.py); pytest's header names it.

The suite runs kiqbeat with its test clock (`KIQBEAT_TEST_CLOCK=1`, kiqbeat/redis/clock.py),
set here before kiqbeat is imported and inherited by every kiqbeat process a test starts: a
test moves the Redis clock on with tests/support/clock.py's `advance_clock` instead of sleeping.

Hypothesis runs with no per-example deadline: on a loaded 2-core CI machine one slow
example would otherwise fail a property that holds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis
from hypothesis import HealthCheck, settings

os.environ["KIQBEAT_TEST_CLOCK"] = "1"  # before kiqbeat is imported (the docstring says why)

from kiqbeat.demo.server import RedisServer
from tests.support.servers import server_under_test

# Fixtures every folder may use, from their homes in tests/support (pytest loads them here).
pytest_plugins = ["tests.support.cli", "tests.support.console"]

settings.register_profile("kiqbeat", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kiqbeat")


def pytest_report_header() -> str:
    """Which server this run tests (a wrong --server stops the run here)."""
    return server_under_test().describe()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One private redis-server for the whole session; tests get it flushed via `redis_url`."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """URL of an empty database on the session's private redis-server."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A plain redis-py client on the empty database, for inspecting what kiqbeat wrote."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()
