"""kiqbeat benchmarks: prints figures (never asserts them) against a private redis-server.

Run: .venv/bin/python bench/bench.py [--quick]

Each figure names its target from issue 3; bench/store.py measures the schedule store
(issue 11) at up to 1,000,000 schedules. Absolute rates drift ±30 % on shared
machines, so the push rate is also printed as a ratio to redis-benchmark's pipelined
LPUSH of job-sized values, measured in the same run on the same server.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import statistics
import subprocess
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from kiqbeat.core.schedule import Config
from kiqbeat.demo.server import RedisServer, redis_server_path
from kiqbeat.document import parse_config
from kiqbeat.engine import Engine
from kiqbeat.redis import keys
from kiqbeat.redis.connection import connect
from kiqbeat.redis.definitions import BATCH


class CountingConnection(redis.Connection):
    """Counts round trips: every packed send is one request the client then waits for."""

    sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sends += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


def counting_client(url: str) -> redis.Redis:
    client = connect(url)
    client.connection_pool.connection_class = CountingConnection
    return client


def redis_now(client: redis.Redis) -> datetime:
    seconds, micros = client.time()
    return datetime.fromtimestamp(seconds, tz=UTC) + timedelta(microseconds=micros)


def build(n: int, cron_of: Any, window: str = "1h") -> Config:
    schedules = {
        f"schedule-{i:06d}": {"cron": cron_of(i), "class": "BenchWorker", "queue": f"q{i % 8}",
                              "args": [i, "some-argument", {"tenant": i % 97}]}
        for i in range(n)
    }
    return parse_config({"missed_jobs_window": window, "schedules": schedules}, source="bench")


def redis_benchmark_lpush(port: int, requests: int) -> float:
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-P", "64", "-n", str(requests), "-d", "330",
         "-t", "lpush", "-q"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"LPUSH: ([\d.]+) requests per second", out.replace("\r", "\n"))
    return float(found.group(1)) if found else float("nan")


def bench_push_rate(url: str, port: int, n: int) -> None:
    client = connect(url)
    client.flushall()
    engine = Engine(client=client)  # one long-lived engine, as `kiqbeat run` keeps
    cfg = build(n, lambda i: "* * * * *")
    t0 = redis_now(client).replace(second=0, microsecond=0) - timedelta(minutes=30)
    engine.run(cfg, now=t0)  # first seen
    engine.run(cfg, now=t0 + timedelta(minutes=1))  # warm: caches, script loaded
    rates = []
    for minute in range(2, 5):
        started = time.perf_counter()
        report = engine.run(cfg, now=t0 + timedelta(minutes=minute))
        elapsed = time.perf_counter() - started
        assert report.pushed == n
        rates.append(n / elapsed)
    baseline = redis_benchmark_lpush(port, 400_000)
    best = max(rates)
    print(f"push rate, {n:,} schedules all due (warm, best of 3): {best:,.0f} jobs/s "
          f"(median {statistics.median(rates):,.0f}); target >= 100,000")
    print(f"redis-benchmark -P 64 LPUSH 330-byte values: {baseline:,.0f}/s; "
          f"ratio {best / baseline:.2f} (target >= 0.25)")


def bench_round_trips(url: str, sizes: list[int]) -> None:
    for n in sizes:
        client = counting_client(url)
        client.flushall()
        engine = Engine(client=client)
        cfg = build(n, lambda i: "* * * * *")
        t0 = redis_now(client).replace(second=0, microsecond=0) - timedelta(minutes=30)
        engine.run(cfg, now=t0)
        engine.run(cfg, now=t0 + timedelta(minutes=1))
        CountingConnection.sends = 0
        report = engine.run(cfg, now=t0 + timedelta(minutes=2))
        idle_before = CountingConnection.sends
        CountingConnection.sends = 0
        engine.run(cfg, now=t0 + timedelta(minutes=2, seconds=30))
        # The store reads due entries in batches of BATCH: one read and one push per batch,
        # and one more read when the last batch came back full (it cannot tell it was last).
        batches = -(-n // BATCH)
        expected = 2 * batches + (n % BATCH == 0)
        print(f"round trips, {n:,} schedules: {idle_before} with all due "
              f"({report.chunks} push chunks; expected 1 read + 1 push per batch of {BATCH:,}, "
              f"+1 read after a full last batch = {expected}); "
              f"{CountingConnection.sends} when nothing is due (target 1)")


def bench_sparse(url: str, n: int) -> None:
    client = connect(url)
    client.flushall()
    engine = Engine(client=client)  # one long-lived engine, as `kiqbeat run` keeps
    zones = ["UTC", "Asia/Kolkata", "Europe/Paris", "America/New_York", "Australia/Sydney"]
    rng = random.Random(1)
    # Every 2 hours at a random minute: 1/120 of the schedules (0.83 %) are due each minute.
    cfg = build(n, lambda i: f"{rng.randrange(60)} {i % 2}-23/2 * * * {zones[i % 5]}")
    t0 = redis_now(client).replace(second=0, microsecond=0) - timedelta(hours=3)
    started = time.perf_counter()
    engine.run(cfg, now=t0)
    cold = time.perf_counter() - started
    times, pushed = [], []
    for minute in range(1, 31):
        started = time.perf_counter()
        report = engine.run(cfg, now=t0 + timedelta(minutes=minute, seconds=1))
        times.append(time.perf_counter() - started)
        pushed.append(report.pushed)
    print(f"{n:,} schedules, ~1 % due per minute: first invocation (registers all) {cold:.2f} s; "
          f"then per invocation median {statistics.median(times):.3f} s, max {max(times):.3f} s "
          f"over 30 minutes, {statistics.mean(pushed):.0f} jobs/minute; target <= 0.3 s")


def bench_catch_up(url: str, ticks: int) -> None:
    client = connect(url)
    client.flushall()
    engine = Engine(client=client)  # one long-lived engine, as `kiqbeat run` keeps
    cfg = build(1, lambda i: "* * * * * *", window="24h")
    t0 = redis_now(client).replace(microsecond=0) - timedelta(seconds=ticks + 60)
    engine.run(cfg, now=t0)
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 10_000)
    client.slowlog_reset()
    started = time.perf_counter()
    report = engine.run(cfg, now=t0 + timedelta(seconds=ticks))
    total = time.perf_counter() - started
    calls = [e["duration"] for e in client.slowlog_get(10_000)
             if e["command"].upper().startswith((b"EVALSHA", b"EVAL"))]
    client.config_set("slowlog-log-slower-than", 10_000)
    longest, median = max(calls) / 1000, statistics.median(calls) / 1000
    print(f"catch-up of {report.pushed:,} ticks: {total:.2f} s total in {report.chunks} "
          f"script calls; longest call {longest:.2f} ms, median {median:.2f} ms "
          "(Redis-side, SLOWLOG); target <= 5 ms")


def bench_state_bytes(url: str, n: int, invocations: int) -> None:
    client = connect(url)
    client.flushall()
    engine = Engine(client=client)  # one long-lived engine, as `kiqbeat run` keeps
    cfg = build(n, lambda i: "* * * * *")
    t0 = redis_now(client).replace(second=0, microsecond=0) - timedelta(minutes=invocations + 5)

    ns = cfg.namespace

    def state_bytes(names: tuple[str, ...] = (keys.watermarks(ns), keys.first_seen(ns))) -> int:
        return sum(client.memory_usage(k, samples=0) or 0 for k in names)

    engine.run(cfg, now=t0)
    before = state_bytes()
    # The store (DESIGN §7) also keeps each definition and a due index entry.
    store = state_bytes((keys.definitions(ns), keys.due(ns), keys.document_index(ns, "bench")))
    for minute in range(1, invocations + 1):
        engine.run(cfg, now=t0 + timedelta(minutes=minute))
        if minute % 50 == 0:
            for q in range(8):
                client.delete(keys.queue(cfg.namespace, f"q{q}"))  # keep memory flat; not state
    after = state_bytes()
    print(f"kiqbeat state, {n:,} schedules: {before / n:.0f} bytes/schedule at start, "
          f"{after / n:.0f} after {invocations:,} invocations (target <= 200, unchanged); "
          f"the store's definitions, due index and document index add {store / n:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    quick = parser.parse_args().quick
    redis_version = subprocess.run([redis_server_path(), "--version"], capture_output=True,
                                   text=True).stdout.split()[2]
    print(f"machine: {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, {os.cpu_count()} cores; {redis_version}")
    with RedisServer() as server:
        bench_push_rate(server.url, server.port, 2_000 if quick else 10_000)
        bench_round_trips(server.url, [1_000, 10_000] if quick else [1_000, 10_000, 100_000])
        bench_sparse(server.url, 10_000 if quick else 100_000)
        bench_catch_up(server.url, 6_000 if quick else 60_000)
        bench_state_bytes(server.url, 1_000, 100 if quick else 1_000)


if __name__ == "__main__":
    main()
