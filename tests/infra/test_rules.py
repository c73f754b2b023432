"""infra/prometheus/ and infra/k8s/prometheusrule.yaml: the runbook's alerts as Prometheus
rules, checked and unit-tested by promtool; the PrometheusRule carries the same groups."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.tools import tool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "infra" / "prometheus"
PROMETHEUS_RULE = ROOT / "infra" / "k8s" / "prometheusrule.yaml"
OPERATIONS = ROOT / "docs" / "operations.md"
# Every YAML file there is a rules file, but for promtool's unit tests (`*.test.yaml`).
RULE_FILES = sorted(p for p in RULES.glob("*.yaml") if not p.name.endswith(".test.yaml"))
TEST_FILES = sorted(RULES.glob("*.test.yaml"))


def promtool() -> str:
    return tool("promtool", "Debian's prometheus")


def groups(path: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = yaml.safe_load(path.read_text())["groups"]
    return found


def test_there_are_rules_and_unit_tests_of_them() -> None:
    assert RULE_FILES and TEST_FILES
    tested = {f for t in TEST_FILES for f in yaml.safe_load(t.read_text())["rule_files"]}
    assert "kiqbeat.rules.yaml" in tested


@pytest.mark.parametrize("rules", RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules_passes(rules: Path) -> None:
    done = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("tests", TEST_FILES, ids=lambda p: p.name)
def test_promtool_test_rules_passes(tests: Path) -> None:
    done = subprocess.run([promtool(), "test", "rules", tests.name], cwd=RULES,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_test_rules_fails_when_an_alert_does_not_fire(tmp_path: Path) -> None:
    """The unit tests can fail: with one alert's threshold raised out of reach, they do."""
    for path in [*RULE_FILES, *TEST_FILES]:
        (tmp_path / path.name).write_text(path.read_text())
    rules = tmp_path / "kiqbeat.rules.yaml"
    rules.write_text(rules.read_text().replace(
        "sum(increase(kiqbeat_invocations_failed_total[5m])) >= 3",
        "sum(increase(kiqbeat_invocations_failed_total[5m])) >= 300"))
    done = subprocess.run([promtool(), "test", "rules", "kiqbeat.rules.test.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode != 0 and "KiqbeatInvocationsFailing" in done.stdout + done.stderr


def test_the_prometheus_rule_carries_every_rules_file_group_verbatim() -> None:
    """infra/k8s/prometheusrule.yaml's groups are exactly those of infra/prometheus/'s
    rules files (no group left out, none of its own), rule for rule."""
    (rule,) = [d for d in yaml.safe_load_all(PROMETHEUS_RULE.read_text()) if d]
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    in_files = sorted((g for path in RULE_FILES for g in groups(path)), key=lambda g: g["name"])
    in_rule = sorted(rule["spec"]["groups"], key=lambda g: g["name"])
    assert [g["name"] for g in in_rule] == [g["name"] for g in in_files]
    assert in_rule == in_files


def test_every_runbook_alert_has_a_rule_pointing_at_its_section() -> None:
    """The runbook's three conditions (ErrorsAlarm, MissedRecordedAlarm, NotRunningAlarm)
    each have a rule on the loop's metrics and one on the CronJob path's; every rule links
    a section of docs/operations.md that exists."""
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", OPERATIONS.read_text(), re.M)}
    by_group: dict[str, set[str]] = {}
    for path in RULE_FILES:
        for group in groups(path):
            for rule in group["rules"]:
                if "alert" not in rule:
                    continue
                page, _, anchor = rule["annotations"]["runbook"].partition("#")
                assert page == "docs/operations.md" and anchor in headings, rule["alert"]
                by_group.setdefault(group["name"], set()).add(anchor)
    wanted = {"errorsalarm", "missedrecordedalarm", "notrunningalarm"}
    assert by_group["kiqbeat-invocations"] == wanted
    assert by_group["kiqbeat-cronjob"] == wanted
