"""The alert tests' shared pieces: the schedules that go silent or fail, the first tick,
an engine with a webhook, and the outbox's events as Redis holds them."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import redis

from kiqbeat.core.payload import jid
from kiqbeat.core.plan import to_ms
from kiqbeat.engine import Engine
from kiqbeat.settings import Settings

T0 = datetime(2025, 12, 24, 0, 0, tzinfo=UTC)
OUTBOX = "kiqbeat:alerts:outbox"
SILENT = """
schedules:
  nightly: {cron: "* * * * *", class: N, queue: nobody_reads, expect_success_within: 3m}
  plain: {cron: "* * * * *", class: P, queue: nobody_reads}
"""
FAILING = """
schedules:
  flaky: {cron: "* * * * *", class: F, alert_after_failures: 3, pause_after_failures: 5}
"""


def engine(client: redis.Redis, hook: str = "", secret: str = "") -> Engine:
    return Engine(Settings(alert_webhook=hook, alert_secret=secret), client=client)


def events(client: redis.Redis) -> list[dict[str, str]]:
    """The outbox's events, oldest first, as their fields."""
    return [{k.decode(): v.decode() for k, v in fields.items()}
            for _id, fields in client.xrange(OUTBOX)]


def report_outcome(client: redis.Redis, name: str, tick: datetime, event: str) -> None:
    """What the worker middleware writes when a job of `name`'s tick ends (`event`)."""
    entry = {"s": name, "t": to_ms(tick), "j": jid(name, tick), "e": event,
             "at": to_ms(tick) + 1000, "a": 1, "d": 1000}
    if event == "failed":
        entry |= {"x": "RuntimeError", "m": "boom"}
    client.lpush("kiqbeat:outcomes:inbox", json.dumps(entry))
