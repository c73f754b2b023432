"""infra/systemd/: the plain service's units pass `systemd-analyze verify` with no warning,
are hardened (exposure "OK" by `systemd-analyze security`), keep the Redis password and the
tokens in root-only files, and run what the docs and the Procfile run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tools import tool

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "infra" / "systemd").glob("*.service"))
INSTALLED = "/opt/kiqbeat/bin/kiqbeat"  # where docs/deploy.md installs kiqbeat


def systemd_analyze() -> str:
    return tool("systemd-analyze", "Debian's systemd")


def _here(unit: Path, tmp_path: Path, text: str | None = None) -> Path:
    """The unit with ExecStart's kiqbeat pointed at this machine's (verify checks that the
    command exists), in tmp_path."""
    copy = tmp_path / unit.name
    copy.write_text((text or unit.read_text()).replace(
        INSTALLED, str(Path(sys.executable).with_name("kiqbeat"))))
    return copy


def _verify(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([systemd_analyze(), "verify", str(path)], capture_output=True,
                          text=True, timeout=120, check=False)


def _service(unit: Path) -> dict[str, list[str]]:
    """The [Service] section, each key with every value it is given."""
    found: dict[str, list[str]] = {}
    section = ""
    for line in unit.read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def test_there_is_a_unit_for_run_and_one_for_web() -> None:
    commands = {u.name: _service(u)["ExecStart"][0].split()[:2] for u in UNITS}
    assert commands == {"kiqbeat.service": [INSTALLED, "run"],
                        "kiqbeat-web.service": [INSTALLED, "web"]}


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_systemd_analyze_verify_passes_without_a_warning(unit: Path, tmp_path: Path) -> None:
    done = _verify(_here(unit, tmp_path))
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), (
        done.stdout + done.stderr)


def test_verify_as_run_here_reports_a_bad_value(tmp_path: Path) -> None:
    """The check can fail: a value systemd would ignore is reported."""
    unit = UNITS[0]
    done = _verify(_here(unit, tmp_path, unit.read_text().replace("ProtectHome=yes",
                                                                  "ProtectHome=bogus")))
    assert "ProtectHome" in done.stdout + done.stderr or "protect home" in done.stderr


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_units_are_hardened(unit: Path, tmp_path: Path) -> None:
    service = _service(unit)
    for key, value in (("DynamicUser", "yes"), ("ProtectSystem", "strict"),
                       ("ProtectHome", "yes"), ("PrivateTmp", "yes"),
                       ("NoNewPrivileges", "yes"), ("CapabilityBoundingSet", "")):
        assert service[key] == [value], key
    done = subprocess.run([systemd_analyze(), "security", "--offline=yes",
                           str(_here(unit, tmp_path))],
                          capture_output=True, text=True, timeout=120, check=False)
    level = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\w+)", done.stdout)
    assert level and float(level.group(1)) <= 2.0 and level.group(2) == "OK", done.stdout[-500:]


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_secrets_come_from_root_only_files_never_from_the_unit(unit: Path) -> None:
    """The Redis URL (its password) from an EnvironmentFile, the console's tokens through
    LoadCredential: systemd reads both as root, so they stay mode 0600, root's; the unit
    itself names no secret."""
    service = _service(unit)
    assert service["EnvironmentFile"] == ["/etc/kiqbeat/redis.env"]
    environment = " ".join(service.get("Environment", []))
    assert "KIQBEAT_REDIS_URL" not in environment and "redis://" not in unit.read_text()
    if "web" in service["ExecStart"][0].split():
        credentials = dict(c.split(":", 1) for c in service["LoadCredential"])
        assert f"KIQBEAT_WEB_TOKEN_FILE=%d/{next(iter(credentials))}" in environment
        assert set(credentials.values()) == {"/etc/kiqbeat/web-operators",
                                             "/etc/kiqbeat/web-readers"}
        assert "KIQBEAT_WEB_TOKEN=" not in environment


def test_the_procfile_runs_what_the_run_unit_runs() -> None:
    procfile = (ROOT / "infra" / "Procfile").read_text()
    processes = dict(line.split(":", 1) for line in procfile.splitlines()
                     if line.strip() and not line.startswith("#"))
    assert processes["kiqbeat"].split()[:2] == ["kiqbeat", "run"]
    assert processes["web"].split()[:2] == ["kiqbeat", "web"]
    assert "--host 0.0.0.0" in processes["web"] and "$PORT" in processes["web"]
