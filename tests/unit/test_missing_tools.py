"""A test whose Ruby, Sidekiq or other installed piece is missing is skipped locally and
fails under CI (tests/support/tools.py `missing`): a broken scripts/setup can never pass
as a green run with fewer tests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.sidekiq import need
from tests.support.tools import missing, tool

TESTS = Path(__file__).resolve().parents[1]
ABSENT = "kiqbeat-no-such-program"


def test_a_missing_piece_skips_without_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="ruby-activejob is not installed"):
        missing("ruby-activejob is not installed")


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_missing_piece_fails_under_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match=r"ruby-activejob is not installed.*CI"):
        missing("ruby-activejob is not installed")


def test_a_missing_program_names_what_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=rf"{ABSENT} is not installed .*ruby-sidekiq"):
        need(ABSENT)
    with pytest.raises(pytest.fail.Exception, match=rf"{ABSENT} is not installed .*promtool"):
        tool(ABSENT, "Debian's prometheus (promtool)")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        need(ABSENT)


def test_a_present_program_is_found() -> None:
    assert Path(tool("sh", "the base system")).name == "sh"


# Skips that are not a missing installed piece: a server of the matrix without a feature, a
# machine without writable cgroups, a parameter of the matrix.
ALLOWED_SKIPS = {"support/servers.py", "support/tools.py", "integration/test_confined.py",
                 "entrypoints/test_demo.py", "infra/test_template.py", "security/test_tls.py",
                 "security/test_acl.py"}


def test_no_test_skips_for_a_missing_piece_on_its_own() -> None:
    """Every `pytest.skip` call outside the allowed ones goes through `missing` (the compat
    tests' Ruby and Sidekiq among them)."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        where = path.relative_to(TESTS).as_posix()
        if where in ALLOWED_SKIPS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "skip" and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "pytest"):
                found.append(f"{where}:{node.lineno}")
    assert found == []
