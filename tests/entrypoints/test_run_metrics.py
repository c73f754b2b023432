"""`kiqbeat run --metrics-port/--metrics-host`: the invocations' metrics, served with the
standard library (no web extra), on loopback by default, and behind the console's tokens
(kiqbeat.web.auth) anywhere else."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kiqbeat.core.report import Report
from kiqbeat.entrypoints.metrics import InvocationMetrics, serve_metrics
from kiqbeat.errors import ConfigError
from tests.support.ports import free_port
from tests.support.tools import tool

ROOT = Path(__file__).resolve().parents[2]
# Run `kiqbeat` in a child that cannot import the web extra's packages: what an install
# without the extra (the CronJob's, a plain service's) has.
WITHOUT_WEB = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("starlette", "prometheus_client", "uvicorn", "jinja2"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
sys.meta_path.insert(0, Block())
from kiqbeat.entrypoints.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _env(**extra: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("KIQBEAT_")} | extra


def _run(redis_url: str, tmp_path: Path, *flags: str, env: dict[str, str] | None = None,
         output: int = subprocess.DEVNULL) -> subprocess.Popen[str]:
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text("schedules:\n  m: {cron: '* * * * *', class: W}\n")
    return subprocess.Popen([sys.executable, "-c", WITHOUT_WEB, "run", "--config",
                             str(schedule), "--redis-url", redis_url, *flags],
                            stdout=output, stderr=output, text=True,
                            env=env or _env())


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _wait_for_first_invocation(url: str, token: str | None = None) -> str:
    deadline = time.monotonic() + 60
    while True:
        try:
            status, text = _get(url, token)
            if status == 200 and "kiqbeat_invocation_duration_seconds_count 1.0" in text:
                return text
        except OSError:
            pass
        assert time.monotonic() < deadline, "no metrics served"
        time.sleep(0.2)


def test_exposition_is_prometheus_text_format_with_every_number() -> None:
    metrics = InvocationMetrics()
    metrics.observe(Report(now=datetime.now(UTC), pushed=3, lag_s=0.5, duration_s=0.02))
    metrics.observe(Report(now=datetime.now(UTC), pushed=2, lag_s=0.1, duration_s=7))
    metrics.observe(None)
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition())}
    samples = {(s.name, s.labels.get("le")): s.value for f in families.values()
               for s in f.samples}
    assert samples[("kiqbeat_ticks_pushed_total", None)] == 5
    assert samples[("kiqbeat_largest_lag_seconds", None)] == 0.1  # the last invocation's
    assert samples[("kiqbeat_invocations_failed_total", None)] == 1
    assert families["kiqbeat_invocation_duration_seconds"].type == "histogram"
    assert samples[("kiqbeat_invocation_duration_seconds_bucket", "0.025")] == 1
    assert samples[("kiqbeat_invocation_duration_seconds_bucket", "5.0")] == 1
    assert samples[("kiqbeat_invocation_duration_seconds_bucket", "10.0")] == 2
    assert samples[("kiqbeat_invocation_duration_seconds_bucket", "+Inf")] == 2
    assert samples[("kiqbeat_invocation_duration_seconds_sum", None)] == pytest.approx(7.02)


def test_exposition_passes_promtool_check_metrics() -> None:
    promtool = tool("promtool", "Debian's prometheus")
    metrics = InvocationMetrics()
    metrics.observe(Report(now=datetime.now(UTC), pushed=1, duration_s=0.01))
    done = subprocess.run([promtool, "check", "metrics"], input=metrics.exposition(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_metrics_listen_on_loopback_by_default_and_need_no_web_extra(
    redis_url: str, tmp_path: Path,
) -> None:
    port = free_port()
    proc = _run(redis_url, tmp_path, "--metrics-port", str(port))
    try:
        text = _wait_for_first_invocation(f"http://127.0.0.1:{port}/metrics")
        assert "kiqbeat_ticks_pushed_total 0.0" in text
        listening = Path("/proc/net/tcp").read_text().splitlines()[1:]
        local = {line.split()[1] for line in listening if line.split()[3] == "0A"}
        assert f"0100007F:{port:04X}" in local  # 127.0.0.1, not 0.0.0.0
        assert f"00000000:{port:04X}" not in local
        assert _get(f"http://127.0.0.1:{port}/other")[0] == 404
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_non_loopback_metrics_host_without_tokens_is_refused(
    redis_url: str, tmp_path: Path,
) -> None:
    port = free_port()
    proc = _run(redis_url, tmp_path, "--metrics-host", "0.0.0.0", "--metrics-port", str(port),
                output=subprocess.PIPE)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "--metrics-host 0.0.0.0" in err and "KIQBEAT_WEB_READ_TOKEN" in err
    assert "Traceback" not in err


def test_with_tokens_every_scrape_presents_one(redis_url: str, tmp_path: Path) -> None:
    reader, operator = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    tokens = tmp_path / "readers"
    tokens.write_text(f"prometheus:{reader}\n")
    port = free_port()
    proc = _run(redis_url, tmp_path, "--metrics-host", "0.0.0.0", "--metrics-port", str(port),
                env=_env(KIQBEAT_WEB_READ_TOKEN_FILE=str(tokens),
                         KIQBEAT_WEB_TOKEN=operator))
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        text = _wait_for_first_invocation(url, reader)
        assert "kiqbeat_invocations_failed_total 0.0" in text
        assert _get(url, operator)[0] == 200
        for wrong in (None, "x" * 32, reader[:-1]):
            status, body = _get(url, wrong)
            assert status == 401 and "kiqbeat_" not in body
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_metrics_binds_the_host_given_and_names_a_taken_port() -> None:
    server = serve_metrics(InvocationMetrics(), "127.0.0.1", free_port(), environ={})
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        with pytest.raises(ConfigError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            serve_metrics(InvocationMetrics(), "127.0.0.1", int(port), environ={})
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(ConfigError, match="not loopback"):
        serve_metrics(InvocationMetrics(), "10.1.2.3", free_port(), environ={})


def _scrape(port: int, host_header: str, token: str | None = None
            ) -> tuple[int, dict[str, str], str]:
    """GET /metrics with the Host header given (as a browser whose name was rebound sends)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Host": host_header}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        conn.request("GET", "/metrics", headers=headers)
        reply = conn.getresponse()
        return reply.status, dict(reply.getheaders()), reply.read().decode()
    finally:
        conn.close()


def test_anonymous_metrics_refuse_a_host_that_is_not_loopback() -> None:
    """DNS rebinding: a page at evil.example resolved to 127.0.0.1 reads nothing."""
    server = serve_metrics(InvocationMetrics(), "127.0.0.1", free_port(), environ={})
    port = int(server.server_address[1])
    try:
        for host in ("evil.example", f"evil.example:{port}", "10.0.0.1"):
            status, _headers, body = _scrape(port, host)
            assert status == 421 and "loopback Host" in body and "kiqbeat_" not in body
        for host in (f"127.0.0.1:{port}", "localhost", f"[::1]:{port}"):
            status, _headers, body = _scrape(port, host)
            assert status == 200 and "kiqbeat_ticks_pushed_total" in body, (host, body)
    finally:
        server.shutdown()
        server.server_close()


def test_wrong_metrics_tokens_are_throttled_then_even_the_right_one_waits() -> None:
    """The console's throttle (kiqbeat.web.throttle): ten wrong tokens from an address, then
    every token it presents is answered 429 with Retry-After, the right one too."""
    reader = secrets.token_urlsafe(32)
    server = serve_metrics(InvocationMetrics(), "127.0.0.1", free_port(),
                           environ={"KIQBEAT_WEB_READ_TOKEN": reader})
    port = int(server.server_address[1])
    try:
        assert _scrape(port, "metrics.internal", reader)[0] == 200  # tokens: any Host
        statuses = [_scrape(port, "metrics.internal", "x" * 43)[0] for _ in range(10)]
        assert statuses == [401] * 10
        status, headers, body = _scrape(port, "metrics.internal", "x" * 43)
        assert status == 429 and int(headers["Retry-After"]) >= 1 and "wrong tokens" in body
        status, _headers, body = _scrape(port, "metrics.internal", reader)
        assert status == 429 and "kiqbeat_" not in body
    finally:
        server.shutdown()
        server.server_close()
