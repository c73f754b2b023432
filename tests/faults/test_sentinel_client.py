"""One long-lived Sentinel client follows repeated failovers, and gives up fast when no
Sentinel answers.

A `kiqbeat run` loop and a warm Lambda keep the client `connect` returns for their whole
life. These tests hold that client across several SIGKILLs of the master and require its
first command after the group settles to succeed, whether it kept working through each
failover or sat idle, as a Lambda between invocations does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
import redis

from kiqbeat.demo.server import free_port
from kiqbeat.redis.connection import connect

from .sentinel_support import SentinelGroup

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/redis-sentinel").exists(),
    reason="redis-sentinel is not installed (scripts/setup installs Debian's redis-sentinel)")

KILLS = 5
PROBE_EVERY_S = 0.2
SETTLED_TO_SUCCESS_MAX_S = 2.0


class Prober:
    """Writes with one client every PROBE_EVERY_S in a thread; records (began, error) pairs."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.calls: list[tuple[float, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.client.incr("probe")  # a write: a replica would refuse it
                error = None
            except redis.RedisError as exc:
                error = f"{type(exc).__name__}: {exc}"
            self.calls.append((began, error))
            self._stop.wait(PROBE_EVERY_S)

    def first_success_after(self, since: float, timeout_s: float) -> float | None:
        """Seconds from `since` to the first call begun after it that succeeded."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [began for began, error in list(self.calls) if began > since and not error]
            if found:
                return found[0] - since
            time.sleep(0.05)
        return None

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    """A group of its own: every failover here is this test's."""
    with SentinelGroup() as sentinels:
        yield sentinels


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_long_lived_client_reaches_each_new_master_once_the_group_settles(
    group: SentinelGroup,
) -> None:
    """After each of KILLS SIGKILLs of the master, the same client objects write to the new
    master within SETTLED_TO_SUCCESS_MAX_S of the group settling: one that kept writing
    through the failover, and one left idle, whose first command after it must succeed."""
    busy, idle = connect(group.url), connect(group.url)
    idle.incr("probe")  # it holds a pooled connection to the first master
    masters = [group.master_port()]
    settled_to_success_s = []
    with busy, idle, Prober(busy) as prober:
        for _ in range(KILLS):
            group.kill_master()
            group.wait_settled()
            settled = time.monotonic()
            masters.append(group.master_port())
            waited = prober.first_success_after(settled, timeout_s=10.0)
            idle.incr("probe")  # raises if the idle client cannot reach the new master
            settled_to_success_s.append(waited)
        errors = [error for _, error in prober.calls if error]
    print({"settled_to_success_s": settled_to_success_s, "masters": masters,
           "busy_errors": len(errors), "last_busy_error": errors[-1] if errors else None})
    assert all(a != b for a, b in pairwise(masters)), masters
    # The busy client did meet the failovers (its writes failed meanwhile) ...
    assert errors, "the probe never failed: no failover was crossed"
    # ... and wrote to each new master (a replica refuses writes) soon after it settled.
    assert all(s is not None and s <= SETTLED_TO_SUCCESS_MAX_S for s in settled_to_success_s), (
        settled_to_success_s, errors[-1])


def test_unreachable_sentinels_fail_a_command_within_seconds() -> None:
    """With every Sentinel refusing connections, a command fails in about one pass over
    them per redis-py retry, not after redis-py's default 10 retries per Sentinel (36 s)."""
    hosts = ",".join(f"127.0.0.1:{free_port()}" for _ in range(3))
    with connect(f"redis+sentinel://{hosts}/mymaster") as client:
        began = time.monotonic()
        with pytest.raises(redis.ConnectionError, match="No master found"):
            client.ping()
        elapsed_s = time.monotonic() - began
    assert elapsed_s < 3.0, elapsed_s
