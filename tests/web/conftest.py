"""A real console for the web tests: `create_app` served by uvicorn on a free loopback port,
over the session's private redis-server (emptied for each test), with an operator's and a
reader's token; httpx clients speak to it as a browser or another language would. The console
itself, its tokens and the `start_console` fixture live in tests/support/console.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from kiqbeat.store import Store
from tests.support.console import Served, Start


@pytest.fixture
def console(start_console: Start) -> Served:
    """A console with an operator (alice) and a reader (bob)."""
    return start_console()


@pytest.fixture
def store(redis_url: str) -> Iterator[Store]:
    """The store the console serves, as the Python API sees it."""
    client = redis.Redis.from_url(redis_url)
    yield Store(client)
    client.close()

