"""Kiqbeat::Middleware's cost (issue 27): jobs/s of an empty job through a real Sidekiq with
and without it, in the same run. Prints figures (never asserts them).

Run: .venv/bin/python bench/middleware.py [--jobs 5000] [--rounds 2]

One private redis-server; each round pushes `--jobs` empty jobs (EmptyWorker, carrying
kiqbeat_schedule and kiqbeat_tick as kiqbeat's jobs do) into a queue, then starts Sidekiq 6.4
(tests/compat/ruby/outcome_worker.rb, -c 5) with the middleware, or without it, and times
from the moment it registers until its processed count has grown by `--jobs`. Rounds
alternate with and without, so drift on this shared machine hits both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from kiqbeat.demo.server import RedisServer

WORKER = Path(__file__).resolve().parents[1] / "tests" / "compat" / "ruby" / "outcome_worker.rb"


def one_round(url: str, jobs: int, middleware: bool) -> float:
    """Seconds Sidekiq took to run `jobs` empty jobs (from its registration)."""
    client = redis.Redis.from_url(url)
    client.flushall()
    client.hset("kiqbeat:schedules", "bench", '{"class":"EmptyWorker","cron":"* * * * *"}')
    pipe = client.pipeline(transaction=False)
    for k in range(jobs):
        pipe.lpush("queue:bench", json.dumps({
            "class": "EmptyWorker", "args": [], "queue": "bench", "jid": f"{k:024x}",
            "retry": False, "created_at": time.time(), "enqueued_at": time.time(),
            "kiqbeat_schedule": "bench", "kiqbeat_tick": 1_790_000_040_000 + k * 60_000}))
    pipe.execute()
    env = {**os.environ, "REDIS_URL": url,
           "KIQBEAT_TEST_NO_MIDDLEWARE": "" if middleware else "1"}
    program = shutil.which("sidekiq") or "sidekiq"
    process = subprocess.Popen([program, "-r", str(WORKER), "-q", "bench", "-c", "5"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not client.smembers("processes"):
            time.sleep(0.01)
        began = time.perf_counter()
        while client.llen("queue:bench") or int(client.get("stat:processed") or 0) < jobs:
            time.sleep(0.01)
        return time.perf_counter() - began
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with RedisServer() as server:
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for middleware in (False, True):
                times[middleware].append(one_round(server.url, args.jobs, middleware))
        client = redis.Redis.from_url(server.url)
        reported = client.llen("kiqbeat:outcomes:inbox")
        for middleware in (False, True):
            rates = [args.jobs / t for t in times[middleware]]
            print(f"{'with' if middleware else 'without'} Kiqbeat::Middleware: "
                  f"{', '.join(f'{r:,.0f}' for r in rates)} jobs/s "
                  f"(best {max(rates):,.0f})")
        best = {m: min(times[m]) for m in times}
        print(f"cost: {(best[True] - best[False]) / args.jobs * 1e6:,.0f} µs a job "
              f"(best rounds; the last round left {reported:,} inbox entries, 2 a job)")


if __name__ == "__main__":
    main()
