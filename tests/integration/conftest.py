"""What the integration tests share: a client of the test's private Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from kiqbeat.redis.connection import connect


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the test's private redis-server, built as kiqbeat builds its own."""
    c = connect(redis_url)
    yield c
    c.close()
