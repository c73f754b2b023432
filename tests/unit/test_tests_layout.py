"""The test suite's own layout: no test module imports another test module.

A test module (`test_*.py`) or a `conftest.py` is imported by pytest alone: a helper two
folders share lives in tests/support/ (its fixtures loaded by tests/conftest.py's
`pytest_plugins`), and a helper of one folder in a plain module of that folder
(tests/compat/harness.py, tests/unit/cron_reference.py). Importing a test module runs its
module-level code twice under two names and makes its tests depend on another file's.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(TESTS.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(name: str, source: str, *, package: bool = False) -> set[str]:
    """The tests.* modules the module `name` (a package's __init__ when `package`) with this
    source imports, at any depth, relative imports resolved; for `from M import N`, M.N too
    (N may be a module)."""
    home = name.split(".") if package else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = home[:len(home) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found |= {module} | {f"{module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m == "tests" or m.startswith("tests.")}


def imports() -> dict[str, set[str]]:
    """Every module of the suite -> the tests.* modules it imports."""
    return {module_name(p): imported(module_name(p), p.read_text(encoding="utf-8"),
                                     package=p.name == "__init__.py")
            for p in TESTS.rglob("*.py")}


def is_test_module(name: str) -> bool:
    leaf = name.rsplit(".", 1)[-1]
    return leaf.startswith("test_") or leaf == "conftest"


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    graph = imports()
    bad = sorted(f"{name} imports {target}" for name, found in graph.items()
                 for target in found if target in graph and is_test_module(target))
    assert bad == []


def test_helpers_shared_across_folders_live_in_tests_support() -> None:
    """A module imports tests.* modules of its own folder or of tests/support only, and
    tests/support imports nothing from the test folders."""
    graph = imports()
    bad = []
    for name, found in graph.items():
        folder = ".".join(name.split(".")[:2])
        for target in found:
            if target not in graph or target.startswith("tests.support"):
                continue
            if folder == "tests.support" or not target.startswith(folder + "."):
                bad.append(f"{name} imports {target}")
    assert sorted(bad) == []


def test_the_checks_see_relative_and_absolute_imports() -> None:
    """The reading both tests above rely on finds each form of import."""
    source = ("from .conftest import Served\nfrom tests.web.test_api import path\n"
              "import tests.faults.harness\nfrom . import test_pages\n"
              "def f():\n    from ..support.console import serve\n")
    assert imported("tests.web.test_x", source) >= {
        "tests.web.conftest", "tests.web.test_api", "tests.faults.harness",
        "tests.web.test_pages", "tests.support.console"}
