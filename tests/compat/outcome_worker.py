"""The real Sidekiq 6.4 worker of the outcome tests (tests/compat/ruby/outcome_worker.rb,
with Kiqbeat::Middleware), shared by test_outcomes and test_buffer_one_sidekiq."""

from __future__ import annotations

import json
import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import redis

from kiqbeat.core.schedule import Config
from kiqbeat.engine import run
from kiqbeat.outcomes import fold_outcomes
from kiqbeat.outcomes.records import read_health
from tests.support.sidekiq import start_sidekiq

from .harness import RUBY_DIR, wait_for

LEDGER = "kiqbeat-test:ledger"
QUEUE = "outcomes"


class Worker:
    """A Sidekiq process running outcome_worker.rb on its own Redis (namespace `ns`)."""

    def __init__(self, url: str, ns: str = "", *flags: str) -> None:
        self.url, self.ns = url, ns
        self.client = redis.Redis.from_url(url, socket_timeout=10)
        self.log = Path(tempfile.mkdtemp(prefix="kiqbeat-outcomes-")) / "sidekiq.log"
        self.process = start_sidekiq(url, RUBY_DIR / "outcome_worker.rb", self.log,
                                     "-q", QUEUE, "-c", "3", *flags, namespace=ns,
                                     env={"KIQBEAT_TEST_NAMESPACE": ns.rstrip(":")})

    def now(self) -> datetime:
        seconds, micros = self.client.time()
        return datetime.fromtimestamp(seconds + micros / 1e6).astimezone()

    def ledger(self, jid: str) -> list[str]:
        return [e["event"] for e in map(json.loads, self.client.lrange(LEDGER, 0, -1))
                if e["jid"] == jid]

    def push_minute(self, config: Config) -> datetime:
        """kiqbeat registers the schedules 30 s before the last minute boundary, then pushes
        that boundary's tick: one job per every-minute schedule."""
        minute = self.now().replace(second=0, microsecond=0)
        run(self.client, config, now=minute - timedelta(seconds=30))
        report = run(self.client, config, now=minute)
        assert report.pushed == len(config.schedules)
        return minute

    def health(self, name: str, until: Any, what: str, timeout_s: float = 30.0) -> Any:
        """Fold (as an invocation does) until `until(health)` holds."""
        def check() -> Any:
            fold_outcomes(self.client, self.ns)
            found = read_health(self.client, self.ns, [name])[name]
            return found if until(found) else None
        return wait_for(f"{name}: {what} (log: {self.log})", check, timeout_s)
