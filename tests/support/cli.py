"""kiqbeat's command line in tests: in this process (the `kiqbeat` fixture), in a child
Python (`kiqbeat_cli`), or with stderr on a pseudo-terminal (`run_on_a_terminal`)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Ran:
    """What one in-process `kiqbeat` command printed and returned."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


Kiqbeat = Callable[..., Ran]


@pytest.fixture
def kiqbeat(redis_url: str, monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> Kiqbeat:
    """`kiqbeat ARGS...` run in this process, on the test's Redis (from the environment)."""
    from kiqbeat.entrypoints.cli import main

    for name in list(os.environ):
        if (name.startswith("KIQBEAT_") and name != "KIQBEAT_TEST_CLOCK") or name == "REDIS_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("KIQBEAT_REDIS_URL", redis_url)

    def run(*args: str) -> Ran:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run


SCHEDULE = """
missed_jobs_window: 1d
schedules:
  minutely:
    cron: "* * * * *"
    class: MinuteWorker
"""


def kiqbeat_cli(*args: str, env: dict[str, str] | None = None,
                timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the `kiqbeat` command in a child Python, without the settings this process has
    (the test clock's flag kept); output captured as text."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("KIQBEAT_", "REDIS_URL")) or k == "KIQBEAT_TEST_CLOCK"
                } | (env or {})
    return subprocess.run([sys.executable, "-m", "kiqbeat", *args], capture_output=True,
                          text=True, env=full_env, timeout=timeout_s, check=False)


def run_on_a_terminal(args: list[str], env: dict[str, str],
                       size: tuple[int, int]) -> tuple[int, str, str]:
    """Run a command with stderr on a pseudo-terminal of `size` (rows, columns; a new one
    is 0 by 0); its exit code, stdout and what reached the terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *size, 0, 0))
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    out, _ = proc.communicate(timeout=120)
    reader.join(timeout=10)
    os.close(master)
    return proc.returncode, out.decode(), b"".join(chunks).decode(errors="replace")
