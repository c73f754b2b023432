"""Network faults between kiqbeat and Redis, inside a private network namespace.

A partition makes an invocation fail within its bounded time with RedisUnavailableError and
push nothing; after healing, the next invocation catches up exactly once. Under 10 % packet
loss, many invocations still push each tick once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis

from kiqbeat.engine import run
from kiqbeat.errors import KiqbeatError, RedisUnavailableError
from kiqbeat.redis.connection import connect
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import config
from tests.support.invariants import LONG, assert_clean, check, jobs_in_redis, record

from .netns import IsolatedRedis

SCHEDULES = """
missed_jobs_window: 2d
schedules:
  a: {cron: "* * * * *", class: AWorker}
  b: {cron: "*/5 * * * *", class: BWorker, queue: other}
"""


def _netns_usable() -> str:
    if os.geteuid() != 0:
        return "needs root for ip netns"
    if not (shutil.which("ip") and shutil.which("nft")):
        return "needs iproute2 and nftables"
    probe_ns = f"kqbprobe{os.getpid()}"  # this process's: the suite's workers probe at once
    probe = subprocess.run(["ip", "netns", "add", probe_ns], capture_output=True, check=False)
    subprocess.run(["ip", "netns", "del", probe_ns], capture_output=True, check=False)
    return "" if probe.returncode == 0 else f"ip netns add failed: {probe.stderr!r}"


REASON = _netns_usable()
pytestmark = pytest.mark.skipif(bool(REASON), reason=REASON or "netns usable")


@pytest.fixture
def isolated() -> Iterator[IsolatedRedis]:
    """A fresh redis-server in its own namespace; namespace, link and rules removed after."""
    with IsolatedRedis() as server:
        yield server


@pytest.mark.timeout(180)
def test_partition_fails_bounded_pushes_nothing_then_catches_up_once(
    isolated: IsolatedRedis,
) -> None:
    """During a partition an invocation raises RedisUnavailableError (time measured), Redis
    is untouched; after healing one invocation pushes every missed tick once."""
    cfg = config(SCHEDULES)
    with redis.Redis.from_url(isolated.url, decode_responses=True) as admin:
        t0 = minute_floor(redis_now(admin)) - timedelta(hours=1)
        with connect(isolated.url) as client:
            run(client, cfg, now=t0)
            run(client, cfg, now=t0 + timedelta(minutes=5))
            before = len(jobs_in_redis(admin))
            isolated.partition()
            started = time.monotonic()
            with pytest.raises(RedisUnavailableError) as caught:
                run(client, cfg, now=t0 + timedelta(minutes=20))
            took_s = time.monotonic() - started
            print(f"partition: failed after {took_s:.1f} s: {caught.value}")
            isolated.heal()
            assert len(jobs_in_redis(admin)) == before
            healed = run(client, cfg, now=t0 + timedelta(minutes=20))
        outcome = check(admin, cfg, after=t0, until=t0 + timedelta(minutes=20),
                        scenario="network partition during an invocation, then healed", runs=4,
                        invocation_s=[took_s, healed.duration_s],
                        notes=f"the partitioned invocation failed after {took_s:.1f} s with "
                              f"RedisUnavailableError; the first after healing pushed "
                              f"{healed.pushed} ticks")
    record(outcome)
    assert_clean(outcome)
    assert healed.pushed == 15 + 3


@pytest.mark.slow
@pytest.mark.timeout(900 if LONG else 120)
def test_ten_percent_packet_loss_pushes_each_tick_once(isolated: IsolatedRedis) -> None:
    """With 1 packet in 10 to Redis dropped, invocations fail or succeed, never half-do:
    at the end each tick is in Redis once."""
    steps = 1000 if LONG else 60
    cfg = config(SCHEDULES)
    with redis.Redis.from_url(isolated.url, decode_responses=True) as admin:
        t0 = minute_floor(redis_now(admin)) - timedelta(days=1)
        seconds: list[float] = []
        failures = 0
        with connect(isolated.url) as client:
            run(client, cfg, now=t0)
            isolated.lose(10)
            for k in range(1, steps + 1):
                started = time.monotonic()
                try:
                    run(client, cfg, now=t0 + timedelta(minutes=k))
                except KiqbeatError:
                    failures += 1
                seconds.append(time.monotonic() - started)
            isolated.heal()
            run(client, cfg, now=t0 + timedelta(minutes=steps))
        end = t0 + timedelta(minutes=steps)
        ordered = sorted(seconds)
        outcome = check(admin, cfg, after=t0, until=end, runs=steps + 2,
                        scenario="10 % packet loss to Redis (nftables numgen)",
                        invocation_s=seconds,
                        notes=f"{failures} of {steps} invocations failed (RedisUnavailableError) "
                              f"and were caught up by the next; median "
                              f"{ordered[len(ordered) // 2]:.3f} s, max {ordered[-1]:.1f} s")
    print(outcome.notes)
    record(outcome)
    assert_clean(outcome)
