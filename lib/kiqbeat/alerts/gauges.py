"""What Prometheus sees of the schedules with expectations (DESIGN §12): one row each, read
from the keys the decision step keeps, so an alert rule can watch them even when no kiqbeat
copy runs (a deadline in the past is a silent schedule whoever decides it).

Only schedules with expectations have rows (`kiqbeat:expectations` names them), at most
`limits.MAX_GAUGED_SCHEDULES`: bounded cardinality whatever the store holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from kiqbeat.core.limits import MAX_GAUGED_SCHEDULES
from kiqbeat.outcomes.records import read_health
from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors, reply_text


@dataclass(frozen=True)
class Watched:
    """One schedule with expectations, as the gauges show it."""

    name: str
    incident: str  # the open incident's event ("" when none)
    deadline_ms: int | None  # its earliest outstanding success deadline
    consecutive_failures: int
    last_success_ms: int | None


def read_watched(client: redis.Redis, namespace: str,
                 limit: int = MAX_GAUGED_SCHEDULES) -> list[Watched]:
    """The schedules with expectations (up to `limit`, by HSCAN), each with its open
    incident, deadline and health: three round trips."""
    rules_key = keys.expectations(namespace)
    names: list[str] = []
    cursor = 0
    with redis_errors(client, f"reading {rules_key}"):
        while True:
            reply: Any = client.hscan(rules_key, cursor, count=500)
            cursor, page = reply
            names += [reply_text(n) for n in page]
            if not cursor or len(names) >= limit:
                break
        names = sorted(names)[:limit]
        if not names:
            return []
        pipe = client.pipeline(transaction=False)
        pipe.zmscore(keys.deadlines(namespace), names)
        pipe.hmget(keys.incidents(namespace), names)
        deadlines, incidents = pipe.execute()
    health = read_health(client, namespace, names)
    out = []
    for name, deadline, raw in zip(names, deadlines, incidents, strict=True):
        event = ""
        if raw:
            try:
                event = str(json.loads(raw).get("e") or "")
            except (ValueError, AttributeError):
                event = "failing"  # garbled: open, as the decision step reads it
        h = health.get(name)
        out.append(Watched(name, event, None if deadline is None else int(deadline),
                           h.consecutive_failures if h else 0,
                           h.last_success_tick_ms if h else None))
    return out
