"""Prometheus metrics (prometheus-client): the numbers the CloudWatch dashboard shows.

Two sources, one set of names (infra/grafana/kiqbeat.json charts them):

- **Invocations** (`kiqbeat run --metrics-port PORT`, kiqbeat.entrypoints.metrics: the
  standard library's, so that it needs no web extra): counters fed from each `Report` —
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
  `kiqbeat_schedules_due`, `kiqbeat_schedules_paused` (the name index's counters),
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

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from kiqbeat.alerts.gauges import gauge_families
from kiqbeat.web.bearer import Refusal, authenticate

if TYPE_CHECKING:
    from kiqbeat.web.console import Console


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
                                    "name index and the pause records)",
                                    value=overview.paused)
        rows = overview.status.schedules
        yield GaugeMetricFamily("kiqbeat_overdue_seconds", "the most overdue schedule's lag",
                                value=max((r.lag_s for r in rows), default=0.0))
        yield CounterMetricFamily("kiqbeat_backfilled", "ticks pushed by the console's "
                                  "backfills", value=self.console.backfilled)
        for family in gauge_families(self.console.client, self.console.namespace):
            metric = GaugeMetricFamily(family.name, family.help, labels=list(family.labels))
            for labels, sample in family.samples:
                metric.add_metric(list(labels), sample)
            yield metric


def metrics_endpoint(request: Request) -> Response:
    """GET /metrics: the store's numbers, for a reader or operator (or anonymous)."""
    if request.state.principal is None:
        refusal = authenticate(request)
        if isinstance(refusal, Refusal):
            return PlainTextResponse(refusal.message, status_code=refusal.status,
                                     headers=refusal.headers)
    registry: CollectorRegistry | None = getattr(request.app.state, "registry", None)
    if registry is None:
        registry = CollectorRegistry()
        registry.register(StoreCollector(request.app.state.console))
        request.app.state.registry = registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
