"""infra/prometheus/kiqbeat-schedules.rules.yaml, checked by promtool (Debian's `prometheus`
package, installed by scripts/setup): the rules parse, they fire on the gauges the metrics
endpoints export for schedules with expectations (tests/infra/prometheus/*.test.yaml), and
every metric they name is one kiqbeat exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "infra" / "prometheus" / "kiqbeat-schedules.rules.yaml"
UNIT = Path(__file__).parent / "prometheus" / "kiqbeat-schedules.test.yaml"


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    program = shutil.which("promtool")
    if program is None:
        pytest.fail("promtool is missing: scripts/setup installs Debian's prometheus package")
    return subprocess.run([program, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def test_promtool_checks_the_schedule_rules() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 5 rules found" in checked.stdout


def test_promtool_unit_tests_fire_each_rule_on_the_gauges() -> None:
    tested = promtool("test", "rules", UNIT.name, cwd=UNIT.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_metric_the_rules_name_is_one_kiqbeat_exports() -> None:
    exported = (ROOT / "lib" / "kiqbeat" / "alerts" / "gauges.py").read_text()
    named = set(re.findall(r"\b(kiqbeat_[a-z_]+)", RULES.read_text()))
    assert named and all(f'"{metric}"' in exported for metric in named), named
