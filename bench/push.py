"""The push path's cost per job (issue 28, item 4), cold and warm, Python and Redis side.

Run: .venv/bin/python bench/push.py [--all-due 10000] [--runs 5] [--before REV]
                                    [--profile] [--warm 3]

Prints figures, asserts nothing. One private redis-server holding `--all-due` schedules that
fire every minute (bench/store.py's), registered once. Then, per code (this tree's, and
REV's with `--before`, taking turns on the same store):

- `--runs` fresh `kiqbeat run-once` processes with every schedule due (a new minute) and as
  many with nothing due (the same minute again): medians, and the difference;
- over each all-due process, INFO commandstats: the time every script call spent inside
  Redis (the EVALSHA row), per job, beside `redis-benchmark -P 64 LPUSH` of a job-sized
  value measured right after each code's rounds;
- `--warm` invocations of one in-process engine after a warm-up, jobs/s (best and median);
- with `--profile`, a cProfile of one fresh all-due process (this tree's), its top entries
  by own time.

The clock is replayed as in bench/store.py (schedules registered in the Redis clock's past,
each process a later minute + 1 s).
"""

from __future__ import annotations

import argparse
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import redis
from bench import redis_benchmark_lpush  # bench/bench.py, beside this file
from cold import code_of, compiled, redis_minute
from store import definitions, drop_jobs, run_once

from kiqbeat.demo.server import RedisServer
from kiqbeat.engine import Engine

ROOT = Path(__file__).resolve().parents[1]


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's ended children so far: a loaded
    machine inflates a process's CPU less than its wall time."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def script_us(admin: redis.Redis) -> float:
    """Microseconds all script calls spent inside Redis since the last CONFIG RESETSTAT."""
    stats = admin.info("commandstats")
    return float(sum(v["usec"] for k, v in stats.items()
                     if k in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall")))


def warm_rates(lib: Path, url: str, n: int, t0: datetime, invocations: int) -> list[float]:
    """jobs/s of `invocations` warm invocations of one engine (a child process running
    `lib`'s code), after one warm-up invocation."""
    program = (
        "import sys, time, redis; from datetime import datetime, timedelta\n"
        "from kiqbeat.engine import Engine\n"
        "url, n, t0, k = sys.argv[1], int(sys.argv[2]), datetime.fromisoformat(sys.argv[3]),"
        " int(sys.argv[4])\n"
        "client = redis.Redis.from_url(url); engine = Engine(client=client)\n"
        "engine.run(now=t0, deadline_s=600)\n"
        "for m in range(1, k + 1):\n"
        "    started = time.perf_counter()\n"
        "    report = engine.run(now=t0 + timedelta(minutes=m), deadline_s=600)\n"
        "    took = time.perf_counter() - started\n"
        "    assert report.pushed == n, report\n"
        "    print(n / took, flush=True)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIQBEAT_")}
    env.update(PYTHONPATH=str(lib), KIQBEAT_ALLOW_REPLAY="1")
    out = subprocess.run([sys.executable, "-c", program, url, str(n), t0.isoformat(),
                          str(invocations)], env=env, capture_output=True, text=True,
                         check=True, timeout=900).stdout
    return [float(line) for line in out.split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--all-due", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--before", metavar="REV", help="also time the code of git REV")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    n = args.all_due
    with tempfile.TemporaryDirectory(prefix="kiqbeat-push-") as tmp, RedisServer() as server:
        work = Path(tmp)
        admin = redis.Redis.from_url(server.url)
        codes = ([("before", code_of(args.before, work))] if args.before else []) + [
            ("after", compiled(ROOT / "lib"))]
        client = redis.Redis.from_url(server.url)
        engine = Engine(client=client)
        result = engine.store().import_definitions(definitions(n, every_minute=True))
        assert result.written == n, result
        minutes = (args.runs + 1) * len(codes) + args.warm * len(codes) + 40
        t0 = redis_minute(admin) - timedelta(minutes=minutes)
        engine.run(now=t0, deadline_s=600)  # every schedule registered
        client.close()
        due: dict[str, list[float]] = {label: [] for label, _ in codes}
        idle: dict[str, list[float]] = {label: [] for label, _ in codes}
        inside: dict[str, list[float]] = {label: [] for label, _ in codes}
        cpu: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label, _ in codes}
        minute = 0
        for _ in range(args.runs):
            for label, lib in codes:
                minute += 1
                at = t0 + timedelta(minutes=minute, seconds=1)
                admin.config_resetstat()
                used = children_cpu_s()
                seconds, report, _ = run_once(lib, server.url, at, None)
                cpu[label][0].append(children_cpu_s() - used)
                inside[label].append(script_us(admin) / n)
                assert report["pushed"] == n, report
                used = children_cpu_s()
                idle_s, nothing, _ = run_once(lib, server.url, at + timedelta(seconds=1), None)
                cpu[label][1].append(children_cpu_s() - used)
                assert nothing["pushed"] == 0, nothing
                due[label].append(seconds)
                idle[label].append(idle_s)
                drop_jobs(admin)
        lpush_us = 1e6 / redis_benchmark_lpush(server.port, 400_000)
        print(f"== {n:,} schedules all due; redis-benchmark -P 64 LPUSH of 330 B: "
              f"{lpush_us:.2f} us")
        for label, _ in codes:
            d, i = statistics.median(due[label]), statistics.median(idle[label])
            per_job = statistics.median(inside[label])
            print(f"  {label}: fresh run-once: nothing due median {i:.3f} s, all due median "
                  f"{d:.3f} s ({', '.join(f'{t:.3f}' for t in due[label])}); beyond nothing "
                  f"due {d - i:.3f} s; scripts inside Redis {per_job:.2f} us a job = "
                  f"{per_job / lpush_us:.1f}x LPUSH")
            due_cpu, idle_cpu = (statistics.median(t) for t in cpu[label])
            print(f"  {label}: CPU of the process: nothing due median {idle_cpu:.3f} s, all due "
                  f"median {due_cpu:.3f} s ({', '.join(f'{t:.3f}' for t in cpu[label][0])}); "
                  f"beyond nothing due {due_cpu - idle_cpu:.3f} s "
                  f"({(due_cpu - idle_cpu) / n * 1e6:.1f} us a job)")
        if args.warm:
            for label, lib in codes:
                minute += 1  # a warm-up minute, then one a warm invocation
                rates = warm_rates(lib, server.url, n,
                                   t0 + timedelta(minutes=minute, seconds=1), args.warm)
                minute += args.warm
                drop_jobs(admin)
                print(f"  {label}: warm, {args.warm} invocations: best {max(rates):,.0f} "
                      f"jobs/s, median {statistics.median(rates):,.0f} jobs/s")
        if args.profile:
            minute += 1
            out = work / "profile.out"
            _, report, _ = run_once(ROOT / "lib", server.url,
                                    t0 + timedelta(minutes=minute, seconds=1), None,
                                    "-m", "cProfile", "-o", str(out))
            assert report["pushed"] == n, report
            stats = pstats.Stats(str(out))
            stats.sort_stats("tottime").print_stats(30)
            stats.sort_stats("cumulative").print_stats(40)
        admin.close()


if __name__ == "__main__":
    main()
