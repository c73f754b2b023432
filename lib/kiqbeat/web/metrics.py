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
  `kiqbeat_overdue_seconds` (the most overdue schedule's lag), and
  `kiqbeat_backfilled_total` (ticks the console's backfills pushed).

The console's /metrics needs a token (reader or operator: Prometheus's `authorization`
setting) unless the console is anonymous on loopback.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

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

from kiqbeat.core.report import REPORT_METRICS, Report

if TYPE_CHECKING:
    from kiqbeat.web.console import Console


class InvocationMetrics:
    """The counters of a `kiqbeat run` process, served on their own port."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
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
                 "invocation)", counts.overdue)):
            yield GaugeMetricFamily(name, help_text, value=value)
        if overview.paused is not None:
            yield GaugeMetricFamily("kiqbeat_schedules_paused", "paused schedules (the "
                                    "sweep's last pass)", value=overview.paused)
        rows = overview.status.schedules
        yield GaugeMetricFamily("kiqbeat_overdue_seconds", "the most overdue schedule's lag",
                                value=max((r.lag_s for r in rows), default=0.0))
        yield CounterMetricFamily("kiqbeat_backfilled", "ticks pushed by the console's "
                                  "backfills", value=self.console.backfilled)


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
