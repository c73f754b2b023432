"""What Prometheus sees of the schedules with expectations (DESIGN §12): one row each, read
from the keys the decision step keeps, so an alert rule can watch them even when no kiqbeat
copy runs (a deadline in the past is a silent schedule whoever decides it).

Only schedules with expectations have rows (`kiqbeat:expectations` names them), at most
`limits.MAX_GAUGED_SCHEDULES`: bounded cardinality whatever the store holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from kiqbeat.alerts.incidents import incident_record
from kiqbeat.core.limits import MAX_GAUGED_SCHEDULES
from kiqbeat.core.outcomes import deadline_ms
from kiqbeat.outcomes.records import read_health
from kiqbeat.redis import keys
from kiqbeat.redis.connection import hash_pages, redis_errors, reply_text


@dataclass(frozen=True)
class Watched:
    """One schedule with expectations, as the gauges show it."""

    name: str
    incident: str  # the open incident's event ("" when none)
    deadline_ms: int | None  # its earliest outstanding success deadline
    consecutive_failures: int
    last_success_ms: int | None


def read_watched(client: redis.Redis, namespace: str) -> list[Watched]:
    """The schedules with expectations (up to MAX_GAUGED_SCHEDULES, by HSCAN), each with its
    open incident, deadline and health: three round trips."""
    rules_key = keys.expectations(namespace)
    names: list[str] = []
    for page in hash_pages(client, rules_key, 500):
        names += [reply_text(n) for n in page]
        if len(names) >= MAX_GAUGED_SCHEDULES:
            break
    names = sorted(names)[:MAX_GAUGED_SCHEDULES]
    if not names:
        return []
    with redis_errors(client, f"reading {rules_key}"):
        pipe = client.pipeline(transaction=False)
        pipe.zmscore(keys.deadlines(namespace), names)
        pipe.hmget(keys.incidents(namespace), names)
        deadlines, incidents = pipe.execute()
    health = read_health(client, namespace, names)
    out = []
    for name, deadline, raw in zip(names, deadlines, incidents, strict=True):
        event = incident_record(raw)[0] if raw is not None else ""
        h = health.get(name)
        out.append(Watched(name, event, deadline_ms(deadline),
                           h.consecutive_failures if h else 0,
                           h.last_success_tick_ms if h else None))
    return out


@dataclass(frozen=True)
class GaugeFamily:
    """One gauge and its samples (label values, value), in no exporter's types: the console
    (prometheus-client) and `kiqbeat run --metrics-port` (the standard library) both serve
    these."""

    name: str
    help: str
    labels: tuple[str, ...]
    samples: tuple[tuple[tuple[str, ...], float], ...]


def gauge_families(client: redis.Redis, namespace: str) -> list[GaugeFamily]:
    """The gauges of the schedules with expectations and the alert sinks' backlog: what
    infra/prometheus/kiqbeat-schedules.rules.yaml alerts on."""
    from kiqbeat.alerts.delivery import backlogs

    rows = read_watched(client, namespace)
    sinks = backlogs(client, namespace)
    return [
        GaugeFamily("kiqbeat_schedule_incident", "1 while the schedule's incident (failing, "
                    "silent, paused) is open", ("schedule", "event"),
                    tuple(((r.name, event), 1.0 if r.incident == event else 0.0)
                          for r in rows for event in ("failing", "silent", "paused"))),
        GaugeFamily("kiqbeat_schedule_success_deadline_timestamp_seconds", "when the earliest "
                    "outstanding tick must have succeeded (expect_success_within)",
                    ("schedule",), tuple(((r.name,), r.deadline_ms / 1000) for r in rows
                                         if r.deadline_ms is not None)),
        GaugeFamily("kiqbeat_schedule_consecutive_failures", "failed ticks in a row",
                    ("schedule",), tuple(((r.name,), float(r.consecutive_failures))
                                         for r in rows)),
        GaugeFamily("kiqbeat_schedule_last_success_timestamp_seconds", "the tick of the "
                    "newest success", ("schedule",),
                    tuple(((r.name,), r.last_success_ms / 1000) for r in rows
                          if r.last_success_ms is not None)),
        GaugeFamily("kiqbeat_alert_backlog_events", "alert events waiting for a sink",
                    ("sink",), tuple(((b.sink,), float(b.waiting)) for b in sinks)),
        GaugeFamily("kiqbeat_alert_backlog_oldest_seconds", "age of the oldest alert event "
                    "waiting for a sink", ("sink",),
                    tuple(((b.sink,), b.oldest_age_s or 0.0) for b in sinks)),
    ]
