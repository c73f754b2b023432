"""Helpers for the compatibility tests: deadlines, pushes through kiqbeat, Ruby look-ups."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
import redis

from kiqbeat.core.report import Report
from kiqbeat.demo.server import RedisServer
from kiqbeat.document import load_config_text
from kiqbeat.engine import run

# The compat tests' names for helpers they share with other folders (tests/support).
from tests.support.processes import stop as stop
from tests.support.processes import wait_for
from tests.support.sidekiq import START_TIMEOUT_S as START_TIMEOUT_S
from tests.support.sidekiq import need as need

RUBY_DIR = Path(__file__).parent / "ruby"
RUNS_KEY = "kiqbeat-compat:runs"
# The queues the worker process listens to; any other queue keeps its jobs for inspection.
WORKER_QUEUES = ("default", "critical", "low")


@dataclass
class Sidekiq:
    """The running worker process and its Redis, with helpers to push and to look."""

    url: str
    client: redis.Redis
    log: Path

    def env(self) -> dict[str, str]:
        """Environment for Ruby programs that talk to this Redis."""
        return {**os.environ, "REDIS_URL": self.url}

    def redis_now(self) -> datetime:
        """The Redis clock, which kiqbeat uses too."""
        seconds, micros = self.client.time()
        return datetime.fromtimestamp(seconds, tz=UTC) + timedelta(microseconds=micros)

    def push_one_minute(self, config_text: str) -> tuple[Report, datetime]:
        """Let kiqbeat push exactly one tick per every-minute schedule: the last minute boundary.

        The first invocation, 30 s before that boundary, registers the schedules (no
        backfill); the second, at the boundary, pushes its tick. Both go through the engine.
        """
        config = load_config_text(config_text)
        minute = self.redis_now().replace(second=0, microsecond=0)
        first = run(self.client, config, now=minute - timedelta(seconds=30))
        assert first.pushed == 0 and first.new_schedules == len(config.schedules)
        report = run(self.client, config, now=minute)
        return report, minute

    def runs(self, jids: set[str]) -> list[dict[str, Any]]:
        """Every record the worker made so far for these jids, in order."""
        raw = self.client.lrange(RUNS_KEY, 0, -1)
        records = [json.loads(r) for r in raw]
        return [r for r in records if r.get("jid") in jids]

    def started(self, jid: str) -> bool:
        """Whether the worker began the job (its middleware saw it)."""
        return any(r["kind"] == "middleware" for r in self.runs({jid}))

    def finished(self, jid: str) -> bool:
        """Whether the job's perform ran (to its end, or to its failure)."""
        return any(r["kind"] == "perform" for r in self.runs({jid}))

    def wait_runs(self, jids: set[str], per_job: int = 2, timeout_s: float = 15.0
                  ) -> list[dict[str, Any]]:
        """Wait until each jid has at least `per_job` records (middleware + perform)."""
        def enough() -> list[dict[str, Any]] | None:
            found = self.runs(jids)
            counts = {j: sum(1 for r in found if r["jid"] == j) for j in jids}
            return found if all(c >= per_job for c in counts.values()) else None
        return wait_for(f"Sidekiq to run {sorted(jids)} (log: {self.log})", enough, timeout_s)

    def probe(self, *queues: str) -> dict[str, Any]:
        """What Sidekiq's API (Sidekiq::Queue, JobRecord, RetrySet, DeadSet) reads right now."""
        done = subprocess.run(["ruby", str(RUBY_DIR / "probe.rb"), *queues], env=self.env(),
                              capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            pytest.fail(f"probe.rb failed ({done.returncode}): {done.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(done.stdout)
        return result


@dataclass
class WebUI:
    """Sidekiq::Web served by puma on a loopback port."""

    base: str

    def get(self, path: str) -> str:
        """The HTML of a page; fails on any status but 200."""
        with urllib.request.urlopen(self.base + path, timeout=10) as response:
            assert response.status == 200, f"GET {path}: {response.status}"
            body: bytes = response.read()
        return body.decode()


def by_kind(records: list[dict[str, Any]], kind: str) -> dict[str, list[dict[str, Any]]]:
    """The worker's records of one kind ("middleware", "perform"), by jid, in order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record["kind"] == kind:
            out.setdefault(record["jid"], []).append(record)
    return out


class _Process(Protocol):
    process: subprocess.Popen[bytes]


W = TypeVar("W", bound=_Process)


@contextmanager
def on_own_redis(start: Callable[[str], W]) -> Iterator[W]:
    """A worker `start`ed on a private redis-server of its own, stopped afterwards."""
    with RedisServer() as server:
        started = start(server.url)
        try:
            yield started
        finally:
            stop(started.process)
