"""Prometheus metrics (prometheus-client): the numbers the CloudWatch dashboard shows.

Two sources, one set of names (infra/grafana/kiqbeat.json charts them):

- **Invocations** (`kiqbeat run --metrics-port PORT`): counters fed from each `Report` —
  `kiqbeat_ticks_pushed_total`, `kiqbeat_ticks_already_pushed_total`,
  `kiqbeat_ticks_missed_total` (ticks lost: older than the window),
  `kiqbeat_missed_recorded_total`, `kiqbeat_ticks_skipped_total{reason}` (catch_up, paused,
  except, skip, max_runs, overlap: skipped on purpose),
  `kiqbeat_definitions_set_aside_total`, `kiqbeat_schedules_planned_total`,
  `kiqbeat_invocations_failed_total`; the gauge
  `kiqbeat_largest_lag_seconds` (the last invocation's) and the histogram
  `kiqbeat_invocation_duration_seconds`. The report's numbers come from
  kiqbeat.core.report's REPORT_METRICS, the table the Lambda's metrics read too.
- **The store** (the console's GET /metrics), read from Redis at each scrape in one
  pipelined round trip plus one page of the due index: `kiqbeat_schedules`,
  `kiqbeat_schedules_set_aside`, `kiqbeat_schedules_with_missed`,
  `kiqbeat_schedules_due`, `kiqbeat_schedules_paused` (from the sweep's last pass),
  `kiqbeat_schedules_failing` (kiqbeat:outcomes:errors' length),
  `kiqbeat_overdue_seconds` (the most overdue schedule's lag), and
  `kiqbeat_backfilled_total` (ticks the console's backfills pushed).
- **Schedules with expectations** (both endpoints; `kiqbeat run` with its store), read at each
  scrape: `kiqbeat_schedule_incident{schedule, event}`,
  `kiqbeat_schedule_success_deadline_timestamp_seconds{schedule}`,
  `kiqbeat_schedule_consecutive_failures{schedule}`,
  `kiqbeat_schedule_last_success_timestamp_seconds{schedule}`, only for schedules with
  expectations (at most `MAX_GAUGED_SCHEDULES`), and `kiqbeat_alert_backlog_events{sink}`,
  `kiqbeat_alert_backlog_oldest_seconds{sink}`.

The console's /metrics needs a token (reader or operator: Prometheus's `authorization`
setting) unless the console is anonymous on loopback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import redis
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from kiqbeat.alerts.delivery import backlogs
from kiqbeat.alerts.gauges import read_watched
from kiqbeat.core.report import REPORT_METRICS, Report

if TYPE_CHECKING:
    from kiqbeat.web.console import Console


def schedule_gauges(client: redis.Redis, namespace: str) -> Iterator[GaugeMetricFamily]:
    """The gauges of the schedules with expectations (alerts/gauges.py), and the alert
    sinks' backlog: what infra/prometheus/kiqbeat-schedules.rules.yaml alerts on."""
    rows = read_watched(client, namespace)
    incident = GaugeMetricFamily("kiqbeat_schedule_incident", "1 while the schedule's "
                                 "incident (failing, silent, paused) is open", labels=[
                                     "schedule", "event"])
    deadline = GaugeMetricFamily("kiqbeat_schedule_success_deadline_timestamp_seconds",
                                 "when the earliest outstanding tick must have succeeded "
                                 "(expect_success_within)", labels=["schedule"])
    failures = GaugeMetricFamily("kiqbeat_schedule_consecutive_failures",
                                 "failed ticks in a row", labels=["schedule"])
    success = GaugeMetricFamily("kiqbeat_schedule_last_success_timestamp_seconds",
                                "the tick of the newest success", labels=["schedule"])
    for row in rows:
        for event in ("failing", "silent", "paused"):
            incident.add_metric([row.name, event], 1.0 if row.incident == event else 0.0)
        if row.deadline_ms is not None:
            deadline.add_metric([row.name], row.deadline_ms / 1000)
        failures.add_metric([row.name], float(row.consecutive_failures))
        if row.last_success_ms is not None:
            success.add_metric([row.name], row.last_success_ms / 1000)
    yield from (incident, deadline, failures, success)
    waiting = GaugeMetricFamily("kiqbeat_alert_backlog_events", "alert events waiting for "
                                "a sink", labels=["sink"])
    oldest = GaugeMetricFamily("kiqbeat_alert_backlog_oldest_seconds", "age of the oldest "
                               "alert event waiting for a sink", labels=["sink"])
    for backlog in backlogs(client, namespace):
        waiting.add_metric([backlog.sink], float(backlog.waiting))
        oldest.add_metric([backlog.sink], backlog.oldest_age_s or 0.0)
    yield from (waiting, oldest)


class ScheduleGauges(Collector):
    """`schedule_gauges` at each scrape, from the store `where` names (client, namespace)."""

    def __init__(self, where: Callable[[], tuple[redis.Redis, str]]) -> None:
        self.where = where

    def collect(self) -> Iterator[GaugeMetricFamily]:
        client, namespace = self.where()
        yield from schedule_gauges(client, namespace)


class InvocationMetrics:
    """The counters of a `kiqbeat run` process, served on their own port; with `where`, the
    schedules' gauges too, read from that store at each scrape."""

    def __init__(self, registry: CollectorRegistry | None = None,
                 where: Callable[[], tuple[redis.Redis, str]] | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        if where is not None:
            r.register(ScheduleGauges(where))
        self.numbers: dict[str, Gauge | Counter] = {}
        for m in REPORT_METRICS:
            if m.reason:  # one counter, labelled by reason
                if m.prometheus not in self.numbers:
                    self.numbers[m.prometheus] = Counter(m.prometheus, m.help, ["reason"],
                                                         registry=r)
            else:
                self.numbers[m.prometheus] = (Gauge if m.seconds else Counter)(
                    m.prometheus, m.help, registry=r)
        self.failed = Counter("kiqbeat_invocations_failed", "invocations that failed",
                              registry=r)
        self.duration = Histogram("kiqbeat_invocation_duration_seconds", "invocation "
                                  "duration", registry=r,
                                  buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10,
                                           30, 60))

    def observe(self, report: Report | None) -> None:
        """Count one invocation (None: it failed)."""
        if report is None:
            self.failed.inc()
            return
        numbers = report.as_dict()
        for m in REPORT_METRICS:
            metric = self.numbers[m.prometheus]
            value = m.value(numbers)
            if m.reason:
                metric.labels(m.reason).inc(value)
            elif isinstance(metric, Gauge):
                metric.set(value)
            else:
                metric.inc(value)
        self.duration.observe(report.duration_s)

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Serve GET /metrics on `port` from a thread of this process."""
        start_http_server(port, addr=host, registry=self.registry)


class StoreCollector(Collector):
    """The store's numbers, read at each scrape."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        overview = self.console.overview()
        counts = overview.status.counts
        for name, help_text, value in (
                ("kiqbeat_schedules", "schedules stored", counts.schedules),
                ("kiqbeat_schedules_set_aside", "definitions set aside", counts.set_aside),
                ("kiqbeat_schedules_with_missed", "schedules with missed ticks recorded",
                 counts.with_missed),
                ("kiqbeat_schedules_due", "schedules due now (planned by the next "
                 "invocation)", counts.overdue),
                ("kiqbeat_schedules_failing", "schedules whose newest reported failure no "
                 "success has followed", overview.failing_count)):
            yield GaugeMetricFamily(name, help_text, value=value)
        if overview.paused is not None:
            yield GaugeMetricFamily("kiqbeat_schedules_paused", "paused schedules (the "
                                    "sweep's last pass)", value=overview.paused)
        rows = overview.status.schedules
        yield GaugeMetricFamily("kiqbeat_overdue_seconds", "the most overdue schedule's lag",
                                value=max((r.lag_s for r in rows), default=0.0))
        yield CounterMetricFamily("kiqbeat_backfilled", "ticks pushed by the console's "
                                  "backfills", value=self.console.backfilled)
        yield from schedule_gauges(self.console.client, self.console.namespace)


def metrics_endpoint(request: Request) -> Response:
    """GET /metrics: the store's numbers, for a reader or operator (or anonymous)."""
    auth = request.app.state.auth
    principal = request.state.principal or auth.bearer(request.headers.get("authorization",
                                                                           ""))
    if principal is None:
        return PlainTextResponse("a valid bearer token is required", status_code=401)
    registry: CollectorRegistry | None = getattr(request.app.state, "registry", None)
    if registry is None:
        registry = CollectorRegistry()
        collector = StoreCollector(request.app.state.console)
        registry.register(collector)
        request.app.state.registry, request.app.state.collector = registry, collector
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
