"""kiqbeat/deferred.py: a deferred module's code runs once, at its first missing attribute,
and its submodules import without it; one already imported or not installed is left alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "lib"


def run(tmp_path: Path, code: str) -> list[str]:
    """The lines a new interpreter prints running `code`, with `tmp_path` and kiqbeat's
    `lib` on its path."""
    package = tmp_path / "outer" / "inner"
    package.mkdir(parents=True, exist_ok=True)
    (tmp_path / "outer" / "__init__.py").write_text("")
    (package / "__init__.py").write_text(
        "print('inner ran')\nfrom outer.inner.part import VALUE\nDOUBLE = 2 * VALUE\n")
    (package / "part.py").write_text("print('part ran')\nVALUE = 21\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60, check=True,
                          env={"PYTHONPATH": f"{tmp_path}:{LIB}", "PATH": "/usr/bin:/bin"})
    return done.stdout.splitlines()


def test_a_deferred_module_runs_once_at_its_first_missing_attribute(tmp_path: Path) -> None:
    assert run(tmp_path, (
        "from kiqbeat.deferred import defer\n"
        "import sys, outer\n"
        "assert defer('outer.inner') is sys.modules['outer.inner']\n"
        "import outer.inner\n"
        "print('imported')\n"
        "from outer.inner.part import VALUE\n"  # a submodule: the package's code not run
        "print('part', VALUE)\n"
        "print('double', outer.inner.DOUBLE)\n"
        "from outer.inner import DOUBLE\n"
        "print('again', DOUBLE)\n"
        "try:\n"
        "    outer.inner.missing\n"
        "except AttributeError as exc:\n"
        "    print('AttributeError', 'missing' in str(exc))\n")) == [
        "imported", "part ran", "part 21", "inner ran", "double 42", "again 42",
        "AttributeError True"]


def test_a_module_already_imported_or_not_installed_is_left_alone(tmp_path: Path) -> None:
    assert run(tmp_path, (
        "import outer.inner, sys\n"
        "from kiqbeat.deferred import defer, defer_unused\n"
        "before = sys.modules['outer.inner']\n"
        "defer_unused()\n"
        "print(sys.modules['outer.inner'] is before, outer.inner.DOUBLE)\n"
        "print(defer('no_such_package.sub'), defer('no_such_module'), defer('sys.path'))\n"
        "print('no_such_package.sub' in sys.modules)\n")) == [
        "inner ran", "part ran", "True 42", "None None None", "False"]


def test_a_thread_reading_while_another_runs_the_module_waits_for_it(tmp_path: Path) -> None:
    # The package's code sleeps between its first and its last name: a second thread reading
    # the last one meanwhile must wait for the load, not get an AttributeError.
    assert run(tmp_path, (
        "import pathlib, sys, threading\n"
        "pathlib.Path('outer/inner/__init__.py').write_text("
        "'import time\\nFIRST = 1\\ntime.sleep(0.5)\\nLAST = 2\\n')\n"
        "from kiqbeat.deferred import defer\n"
        "import outer\n"
        "defer('outer.inner')\n"
        "import outer.inner\n"
        "got = {}\n"
        "def read(what):\n"
        "    try:\n"
        "        got[what] = getattr(outer.inner, what)\n"
        "    except AttributeError as exc:\n"
        "        got[what] = repr(exc)\n"
        "first = threading.Thread(target=read, args=('FIRST',))\n"
        "first.start()\n"
        "import time; time.sleep(0.2)\n"
        "read('LAST')\n"
        "first.join()\n"
        "print(got['FIRST'], got['LAST'])\n")) == ["1 2"]
