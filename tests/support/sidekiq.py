"""A real Sidekiq worker process (Debian's ruby-sidekiq) on a test's Redis."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
import redis

from tests.support.processes import stop, wait_for
from tests.support.tools import tool

START_TIMEOUT_S = 30.0
# What to install when Sidekiq or its web UI is missing.
PACKAGES = "Debian's ruby-sidekiq, ruby-rack and puma"


def need(program: str) -> str:
    """The path of a Ruby-side program (ruby, sidekiq, puma, redis-cli); skipped when it is
    missing, failed under CI (tests/support/tools.py)."""
    return tool(program, PACKAGES)


def start_sidekiq(url: str, worker: Path, log: Path, *args: str, namespace: str = "",
                  env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`sidekiq -r WORKER ARGS...` on the Redis at `url`, its output in `log`; returns once
    its heartbeat registers it (`{namespace}processes`: the "Starting processing" line
    appears only on a terminal), failing the test with the log's end if it exits first."""
    with log.open("wb") as out:
        process = subprocess.Popen([need("sidekiq"), "-r", str(worker), *args],
                                   env={**os.environ, "REDIS_URL": url, **(env or {})},
                                   stdout=out, stderr=subprocess.STDOUT)
    client = redis.Redis.from_url(url, socket_timeout=10)

    def started() -> bool:
        if process.poll() is not None:
            pytest.fail(f"sidekiq exited with {process.returncode}: "
                        f"{log.read_text(errors='replace')[-3000:]}")
        return bool(client.smembers(f"{namespace}processes"))

    try:
        wait_for(f"sidekiq to start (log: {log})", started, START_TIMEOUT_S)
    except BaseException:
        stop(process)
        raise
    finally:
        client.close()
    return process
