"""`kiqbeat run --metrics-port`: the invocations' Prometheus metrics, with the standard library.

- **What**: a counter per number of kiqbeat.core.report.REPORT_METRICS (the table the
  Lambda's CloudWatch metrics read too) summed over invocations (`kiqbeat_ticks_pushed_total`
  ..., `kiqbeat_ticks_skipped_total{reason}` one counter labelled by reason), with the store
  given, the gauges of the schedules with expectations (kiqbeat.alerts.gauges, read at each
  scrape), the gauge `kiqbeat_largest_lag_seconds` (the last invocation's),
  `kiqbeat_invocations_failed_total` and the histogram `kiqbeat_invocation_duration_seconds`,
  in Prometheus' text format 0.0.4. infra/grafana/ charts them and infra/prometheus/ alerts
  on them. Written here rather than with prometheus-client so that the base install
  (redis and PyYAML alone: a CronJob's or a plain service's) serves them too.
- **Where**: `--metrics-host` (default 127.0.0.1), `--metrics-port`; `GET /metrics` only.
- **Who**: the console's rule (kiqbeat.web.auth). With tokens set (`KIQBEAT_WEB_TOKEN`,
  `KIQBEAT_WEB_READ_TOKEN` or their `_FILE` forms) every scrape presents one, reader or
  operator, as `Authorization: Bearer TOKEN` (Prometheus's `authorization` setting); without
  tokens only a loopback address is served (anyone on the machine may read), and any other
  address is refused at start; a scrape whose Host header is not a loopback name is then
  answered 421 (a web page whose name was rebound to 127.0.0.1 must not read the metrics).
  Wrong tokens cost their sender time as the console's do (kiqbeat.web.throttle): past the
  burst, every token that address presents is answered 429 with Retry-After.
"""

from __future__ import annotations

import math
import os
import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from kiqbeat.core.report import REPORT_METRICS, Report
from kiqbeat.errors import ConfigError

if TYPE_CHECKING:
    from kiqbeat.web.auth import Auth

DURATION_BUCKETS_S = (.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# A scrape that has not sent its request in this long is dropped (a slow or idle client
# would otherwise hold a thread).
REQUEST_TIMEOUT_S = 10.0


def _number(value: float) -> str:
    """A sample value as Prometheus' clients write it (`5.0`, `+Inf`)."""
    return "+Inf" if value == float("inf") else repr(float(value))


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    """`{name="value",...}`, by name (as prometheus-client writes them), values escaped as the
    text format says."""
    def escaped(value: str) -> str:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    pairs = sorted(zip(names, values, strict=True))
    return "{" + ",".join(f'{n}="{escaped(v)}"' for n, v in pairs) + "}"


class InvocationMetrics:
    """The numbers of a `kiqbeat run` process's invocations, observed by the loop's thread
    and read by the scrapes' (a lock keeps each scrape's view whole)."""

    def __init__(self, where: Callable[[], tuple[Any, str]] | None = None) -> None:
        self._lock = threading.Lock()
        self._where = where  # the store (client, namespace) whose gauges each scrape reads
        self._numbers = {(m.field, m.reason): 0.0 for m in REPORT_METRICS}
        self._failed = 0
        self._bucket_counts = [0] * len(DURATION_BUCKETS_S)  # per bucket, not cumulative
        self._count = 0
        self._sum_s = 0.0

    def observe(self, report: Report | None) -> None:
        """Count one invocation (None: it failed)."""
        with self._lock:
            if report is None:
                self._failed += 1
                return
            numbers = report.as_dict()
            for m in REPORT_METRICS:
                value, key = float(m.value(numbers)), (m.field, m.reason)
                self._numbers[key] = value if m.seconds else self._numbers[key] + value
            self._count += 1
            self._sum_s += report.duration_s
            for i, bound in enumerate(DURATION_BUCKETS_S):
                if report.duration_s <= bound:
                    self._bucket_counts[i] += 1
                    break

    def exposition(self) -> str:
        """Every metric in Prometheus' text format."""
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"))

        with self._lock:
            named: set[str] = set()
            for m in REPORT_METRICS:
                name = m.prometheus if m.seconds else f"{m.prometheus}_total"
                if name not in named:  # a counter split by reason: one family
                    named.add(name)
                    family(name, "gauge" if m.seconds else "counter", m.help)
                value = _number(self._numbers[(m.field, m.reason)])
                lines.append(f"{name}{_labels(('reason',), (m.reason,))} {value}" if m.reason
                             else f"{name} {value}")
            family("kiqbeat_invocations_failed_total", "counter", "invocations that failed")
            lines.append(f"kiqbeat_invocations_failed_total {_number(self._failed)}")
            name = "kiqbeat_invocation_duration_seconds"
            family(name, "histogram", "invocation duration")
            cumulative = 0
            for bound, count in zip(DURATION_BUCKETS_S, self._bucket_counts, strict=True):
                cumulative += count
                lines.append(f'{name}_bucket{{le="{_number(bound)}"}} {_number(cumulative)}')
            lines.append(f'{name}_bucket{{le="+Inf"}} {_number(self._count)}')
            lines.append(f"{name}_count {_number(self._count)}")
            lines.append(f"{name}_sum {_number(self._sum_s)}")
        if self._where is not None:
            from kiqbeat.alerts.gauges import gauge_families

            try:
                gauges = gauge_families(*self._where())
            except Exception:
                gauges = []  # the counters are still served, the scrape always answered
            for gauge in gauges:
                family(gauge.name, "gauge", gauge.help)
                lines += [f"{gauge.name}{_labels(gauge.labels, labels)} {_number(value)}"
                          for labels, value in gauge.samples]
        return "\n".join(lines) + "\n"


def metrics_auth(host: str, environ: Mapping[str, str]) -> Auth:
    """Who may scrape: the console's tokens (kiqbeat.web.auth), or anyone on loopback when
    none is set; a ConfigError for another address without tokens."""
    from kiqbeat.web.auth import Auth, is_loopback  # stdlib only: no web extra needed

    auth = Auth.from_environ(environ, anonymous=True)
    if auth.anonymous and not is_loopback(host):
        raise ConfigError(f"--metrics-host {host}: refusing to serve metrics on an address "
                          "that is not loopback without authentication: set "
                          "KIQBEAT_WEB_READ_TOKEN (or KIQBEAT_WEB_READ_TOKEN_FILE) for "
                          "Prometheus to present, or keep the default 127.0.0.1")
    return auth


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, metrics: InvocationMetrics, auth: Auth) -> None:
        from kiqbeat.web.throttle import Throttle  # stdlib only: no web extra needed

        self.metrics, self.auth, self.throttle = metrics, auth, Throttle()
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host.strip("[]"), port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = REQUEST_TIMEOUT_S
    server_version = "kiqbeat"
    sys_version = ""

    def do_GET(self) -> None:
        from kiqbeat.web.auth import is_loopback_host  # stdlib only: no web extra needed

        address = self.client_address[0]
        if self.path.split("?", 1)[0] != "/metrics":
            self._answer(404, "not found: the metrics are at /metrics\n")
        elif self.server.auth.anonymous:
            if is_loopback_host(self.headers.get("Host", "")):
                self._answer(200, self.server.metrics.exposition(), {}, CONTENT_TYPE)
            else:  # DNS rebinding: a page's name resolved to this machine
                self._answer(421, "without tokens the metrics are served to a loopback Host "
                             "(127.0.0.1, ::1, localhost) only\n")
        elif (wait_s := self.server.throttle.wait_s(address)) > 0:
            self._answer(429, "too many wrong tokens from this address: try again later\n",
                         {"Retry-After": str(max(1, math.ceil(wait_s)))})
        elif self.server.auth.bearer(self.headers.get("Authorization", "")) is None:
            self.server.throttle.failed(address)
            self._answer(401, "a valid bearer token is required\n",
                         {"WWW-Authenticate": "Bearer"})
        else:
            self._answer(200, self.server.metrics.exposition(), {}, CONTENT_TYPE)

    def _answer(self, status: int, text: str, headers: Mapping[str, str] | None = None,
                content_type: str = "text/plain; charset=utf-8") -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """No line per scrape: `kiqbeat run`'s output is its reports."""


def serve_metrics(metrics: InvocationMetrics, host: str, port: int,
                  environ: Mapping[str, str] | None = None) -> ThreadingHTTPServer:
    """Serve GET /metrics on (host, port) from a daemon thread; the server, to `shutdown`."""
    auth = metrics_auth(host, os.environ if environ is None else environ)
    try:
        server = _Server(host, port, metrics, auth)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
                          ) from None
    threading.Thread(target=server.serve_forever, name="kiqbeat-metrics", daemon=True).start()
    return server
