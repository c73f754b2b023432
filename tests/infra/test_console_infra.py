"""infra/ for the console: its Deployment and Service, the Grafana dashboard, and the
Prometheus metrics both promise (what a dashboard charts is what kiqbeat exports)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from kiqbeat.core.report import REPORT_METRICS, Report
from kiqbeat.entrypoints.metrics import InvocationMetrics
from kiqbeat.web.auth import VARIABLES
from tests.support.marks import stored_mark
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "infra" / "k8s" / "console.yaml"
DASHBOARD = ROOT / "infra" / "grafana" / "kiqbeat.json"


def console_documents() -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(CONSOLE.read_text())}


def test_the_console_deployment_serves_web_with_tokens_from_a_secret_behind_a_service() -> None:
    docs = console_documents()
    spec = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["args"][:3] == ["web", "--host", "0.0.0.0"]
    env = {e["name"]: e for e in container["env"]}
    file_variables = {v[1] for v in VARIABLES.values()}
    assert {"KIQBEAT_WEB_TOKEN_FILE", "KIQBEAT_WEB_READ_TOKEN_FILE"} == file_variables & set(env)
    assert not {v[0] for v in VARIABLES.values()} & set(env)  # no token in the manifest
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    for name in file_variables:
        assert Path(env[name]["value"]).parent == Path(mounts["tokens"])
    assert "secretName" in volumes["tokens"]["secret"]
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsGroup"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    service = docs["Service"]["spec"]
    assert service["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
    assert service["ports"][0]["targetPort"] == container["ports"][0]["name"]


def exported_names() -> set[str]:
    """Every metric name kiqbeat exports: the invocations' and the console's."""
    metrics = InvocationMetrics()
    metrics.observe(Report(now=datetime.now(UTC)))
    text = metrics.exposition()
    source = (ROOT / "lib" / "kiqbeat" / "web" / "metrics.py").read_text()
    store = set(re.findall(r'"(kiqbeat_[a-z_]+)"', source))
    store |= {f"{n}_total" for n in store}
    return set(re.findall(r"^(kiqbeat_[a-z_]+)", text, re.MULTILINE)) | store


def test_the_grafana_dashboard_charts_only_metrics_kiqbeat_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {n for e in exprs for n in re.findall(r"kiqbeat_[a-z_]+", e)}
    assert used and used <= exported_names(), used - exported_names()
    assert {"kiqbeat_ticks_pushed_total", "kiqbeat_ticks_missed_total",
            "kiqbeat_missed_recorded_total", "kiqbeat_backfilled_total",
            "kiqbeat_largest_lag_seconds", "kiqbeat_invocations_failed_total"} <= used


def test_invocation_metrics_count_each_report_and_each_failure() -> None:
    metrics = InvocationMetrics()
    metrics.observe(Report(now=datetime.now(UTC), pushed=3, already_pushed=2, missed=1,
                           missed_recorded=4, set_aside=1, lag_s=0.5, duration_s=0.02))
    metrics.observe(Report(now=datetime.now(UTC), pushed=2, lag_s=0.1, duration_s=0.01))
    metrics.observe(None)
    text = metrics.exposition()
    for line in ("kiqbeat_ticks_pushed_total 5.0", "kiqbeat_ticks_already_pushed_total 2.0",
                 "kiqbeat_ticks_missed_total 1.0", "kiqbeat_missed_recorded_total 4.0",
                 "kiqbeat_definitions_set_aside_total 1.0",
                 "kiqbeat_invocations_failed_total 1.0", "kiqbeat_largest_lag_seconds 0.1",
                 "kiqbeat_invocation_duration_seconds_count 2.0"):
        assert line in text


def test_kiqbeat_run_serves_its_metrics_on_the_port_given(redis_url: str, tmp_path: Path) -> None:
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text("schedules:\n  m: {cron: '* * * * *', class: W}\n")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kiqbeat", "run", "--config", str(schedule),
                             "--redis-url", redis_url, "--metrics-port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
                if "kiqbeat_invocation_duration_seconds_count 1.0" in text:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "no metrics served"
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "kiqbeat_ticks_pushed_total 0.0" in text  # a first invocation: first-seen only
    with redis.Redis.from_url(redis_url) as client:
        assert getattr(stored_mark(client, "m"), "first_seen_ms", None) is not None


def test_kiqbeat_run_exports_every_number_the_lambda_sends_as_a_metric(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from handler import app

    report = Report(now=datetime.now(UTC), schedules=7, pushed=3, already_pushed=2, missed=1,
                    missed_recorded=4, set_aside=5, lag_s=0.5, duration_s=0.02)
    sent: dict[str, float] = {}
    monkeypatch.setattr(app.metrics, "add_metric",
                        lambda name, unit, value: sent.__setitem__(name, value))
    app._record(report, None)
    metrics = InvocationMetrics()
    metrics.observe(report)
    text = metrics.exposition()
    exported = {name: float(value) for name, value
                in re.findall(r"^(kiqbeat_[a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", text,
                              re.MULTILINE)}
    # Each CloudWatch metric has a Prometheus twin carrying the same number (the report's
    # numbers are distinct, but for the reasons' zeros), and there is no other: a metric
    # split by reason is one CloudWatch metric per reason, one labelled sample each.
    twins = sorted(value for name, value in exported.items()
                   if (name.split("{")[0].endswith("_total")
                       or name == "kiqbeat_largest_lag_seconds")
                   and name != "kiqbeat_invocations_failed_total")
    assert len(sent) == len(REPORT_METRICS) and sorted(sent.values()) == twins
    assert 'kiqbeat_ticks_skipped_total{reason="overlap"} 0.0' in text
