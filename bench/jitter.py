"""How `jitter` spreads a million schedules that share one cron tick (issue 20): the pushes
per second over the jitter window, printed (never asserted).

Run: .venv/bin/python bench/jitter.py [--schedules N] [--jitter DURATION] [--engine [--size N]]

Every schedule `tenant:<i>` fires at the same nominal tick; `jitter_offset_ms` gives each
job's delivery offset. Printed: the jobs delivered in each second of the window (min, mean,
max, standard deviation; the ideal is N / window seconds each), the largest deviation from
the mean, Pearson's chi-square against a uniform spread with its degrees of freedom, and
the cost of computing one offset. No Redis: the offsets are what decides the spread.

With `--engine`, the same through kiqbeat itself, on a private redis-server: `--size` N
schedules (default 1,000,000) with the same cron (`*/5 * * * *`) and the jitter imported with
`Store.import_definitions`, registered by an invocation 30 s before the tick, then pushed by
invocations at the tick (replayed `now`; as many as the engine's deadline needs). The
`schedule` set's scores (each job's release instant) are then bucketed per second over the
window: min/mean/max per second and chi-square, as above, counted from Redis, not from
kiqbeat's report. Then the same without jitter: every job in its queue at the tick's second.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

from kiqbeat.core.durations import duration_s
from kiqbeat.core.lifecycle import jitter_offset_ms

TICK_MS = 1_772_352_000_000  # 2026-03-01T08:00:00Z
CRON = "*/5 * * * *"  # --engine: a jitter is at most the gap between two ticks


def spread(counts: list[int], total: int) -> str:
    """min/mean/max per second and chi-square against a uniform spread, as text."""
    seconds = len(counts)
    mean = total / seconds
    chi = sum((c - mean) ** 2 / mean for c in counts)
    return (f"min {min(counts):,}  mean {mean:,.1f}  max {max(counts):,}  "
            f"stdev {statistics.pstdev(counts):,.1f}; chi-square {chi:,.1f} with "
            f"{seconds - 1:,} degrees of freedom (uniform: about {seconds - 1:,} ± "
            f"{(2 * (seconds - 1)) ** 0.5:,.0f})")


def through_engine(size: int, jitter: str) -> None:
    """N schedules with one cron pushed by the engine at their tick; the spread read back."""
    from datetime import datetime, timedelta

    import redis

    from kiqbeat.demo.server import RedisServer
    from kiqbeat.engine import Engine
    from kiqbeat.errors import DeadlineError
    from kiqbeat.redis.clock import read_clock
    from kiqbeat.settings import Settings
    from kiqbeat.store import Store

    jitter_ms = round(duration_s(jitter) * 1000)
    seconds = max(1, jitter_ms // 1000)
    for with_jitter in (True, False):
        with RedisServer() as server:
            client = redis.Redis.from_url(server.url)
            store = Store(client)
            extra = {"jitter": jitter} if with_jitter else {}
            started = time.perf_counter()
            result = store.import_definitions(
                (f"tenant:{i}", {"cron": CRON, "class": "TenantWorker",
                                 "args": [i], **extra}) for i in range(size))
            imported = time.perf_counter() - started
            assert result.written == size, (result.invalid[:1], result.refused[:1])
            now = read_clock(client)
            tick = now.replace(minute=now.minute // 5 * 5, second=0, microsecond=0
                               ) - timedelta(minutes=5)
            engine = Engine(Settings(), client=client)
            def invoke(at: datetime, engine: Engine = engine) -> int:
                """One invocation at `at`; one stopped at its deadline counts what it pushed
                (the next goes on where it stopped)."""
                try:
                    report = engine.run(now=at)
                except DeadlineError:
                    return -1
                report.jobs.clear()
                return report.pushed

            while invoke(tick - timedelta(seconds=30)) != 0:  # registers them: first seen
                pass
            started, pushed, runs = time.perf_counter(), 0, 0
            while True:
                done = invoke(tick)
                runs += 1
                if done == 0:
                    break
                pushed += max(done, 0)
            pushed = sum(client.llen(k) for k in client.scan_iter("queue:*")) + client.zcard(
                "schedule")  # counted in Redis (a deadline-stopped call reports no count)
            elapsed = time.perf_counter() - started
            tick_ms = round(tick.timestamp() * 1000)
            per_second: Counter[int] = Counter()
            for _, score in client.zscan_iter("schedule", count=10_000):
                per_second[(round(score * 1000) - tick_ms) // 1000] += 1
            queued = sum(client.llen(k) for k in client.scan_iter("queue:*"))
            print(f"engine, {size:,} schedules '{CRON}'"
                  + (f", jitter {jitter} ({seconds:,} s)" if with_jitter else ", no jitter"))
            print(f"  import {imported:.1f} s; pushed {pushed:,} in {runs - 1} invocation(s) "
                  f"at the tick, {elapsed:.1f} s ({pushed / elapsed:,.0f} jobs/s)")
            if with_jitter:
                counts = [per_second.get(s, 0) for s in range(seconds)]
                outside = sum(per_second.values()) - sum(counts)
                print(f"  released per second over the window (the schedule set's scores, "
                      f"{sum(per_second.values()):,} jobs; {queued:,} in queues at once, "
                      f"offset under 1 ms; {outside} outside the window):")
                print(f"    {spread(counts, sum(counts))}")
            else:
                print(f"  {queued:,} jobs in their queue at the tick's second, "
                      f"{sum(per_second.values()):,} in the schedule set: all in one second")
            client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=1_000_000)
    parser.add_argument("--jitter", default="5m")
    parser.add_argument("--engine", action="store_true",
                        help="push through the engine on a private redis-server")
    parser.add_argument("--size", type=int, default=1_000_000,
                        help="schedules for --engine (default 1,000,000)")
    args = parser.parse_args()
    if args.engine:
        through_engine(args.size, args.jitter)
        return
    jitter_ms = round(duration_s(args.jitter) * 1000)
    seconds = max(1, jitter_ms // 1000)
    started = time.perf_counter()
    per_second = Counter(jitter_offset_ms(f"tenant:{i}", TICK_MS, jitter_ms) // 1000
                         for i in range(args.schedules))
    elapsed = time.perf_counter() - started
    counts = [per_second.get(s, 0) for s in range(seconds)]
    mean = args.schedules / seconds
    chi_square = sum((c - mean) ** 2 / mean for c in counts)
    print(f"{args.schedules:,} schedules, one tick, jitter {args.jitter} ({seconds:,} s)")
    print(f"  jobs per second: min {min(counts):,}  mean {mean:,.1f}  max {max(counts):,}  "
          f"stdev {statistics.pstdev(counts):,.1f} (Poisson-ideal {mean ** 0.5:,.1f})")
    print(f"  largest deviation from the mean: "
          f"{max(abs(c - mean) for c in counts) / mean:.2%}")
    print(f"  chi-square {chi_square:,.1f} with {seconds - 1:,} degrees of freedom "
          f"(uniform: about {seconds - 1:,} ± {(2 * (seconds - 1)) ** 0.5:,.0f})")
    print(f"  without jitter: all {args.schedules:,} in the same second")
    print(f"  offset cost: {elapsed / args.schedules * 1e6:.2f} µs each")


if __name__ == "__main__":
    main()
