"""Fixtures for the fault scenarios: schedule files on disk and a direct Redis client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from kiqbeat.redis.connection import connect


@pytest.fixture
def config_file(tmp_path: Path) -> Callable[[str], Path]:
    """Writes a schedule document to a file in the test's directory and returns its path."""
    def write(text: str, name: str = "schedules.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path
    return write


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    """kiqbeat's own kind of client on the flushed session database."""
    with connect(redis_url) as c:
        yield c


@pytest.fixture(autouse=True)
def replays_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenarios replay invocations hours back on purpose (`run-once --now`): the
    processes they start inherit the opt-in (`kiqbeat run-once --replay`)."""
    monkeypatch.setenv("KIQBEAT_ALLOW_REPLAY", "1")
