"""Waiting on the processes a test starts: poll until a check holds, stop with SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None], timeout_s: float = 15.0) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


def catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler installed for `signum` (/proc's SigCgt mask): a
    signal sent before that kills it instead."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # gone
        return False
    caught = int(next(line for line in status.splitlines()
                      if line.startswith("SigCgt:")).split()[1], 16)
    return bool(caught >> (signum - 1) & 1)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s: the process is gone when this returns."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
