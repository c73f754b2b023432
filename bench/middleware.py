"""Kiqbeat::Middleware's cost (issue 27): jobs/s of an empty job through a real Sidekiq with
and without it, in the same run. Prints figures (never asserts them).

Run: .venv/bin/python bench/middleware.py [--jobs 5000] [--rounds 2]

One private redis-server; each round pushes `--jobs` empty jobs (EmptyWorker, carrying
kiqbeat_schedule and kiqbeat_tick as kiqbeat's jobs do) into a queue, then starts Sidekiq 6.4
(tests/compat/ruby/outcome_worker.rb, -c 5) without the middleware, with it folding its own
reports (the fold call published, as any invocation publishes it), or with it writing to the
inbox (nothing published), and times from the moment it registers until its queue is empty
(the last job fetched; Sidekiq counts processed jobs only at its heartbeat). Rounds
alternate the three, so drift on this shared machine hits all.
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
from kiqbeat.outcomes.records import publish_fold
from kiqbeat.redis import keys
from kiqbeat.redis.scripts import SCRIPTS

WORKER = Path(__file__).resolve().parents[1] / "tests" / "compat" / "ruby" / "outcome_worker.rb"


MODES = {"none": "without Kiqbeat::Middleware", "fold": "with it, folding its reports",
         "inbox": "with it, to the inbox"}


def one_round(url: str, jobs: int, mode: str) -> tuple[float, int]:
    """Seconds Sidekiq took to run `jobs` empty jobs (from its registration), and the inbox
    entries it left."""
    middleware = mode != "none"
    client = redis.Redis.from_url(url)
    client.flushall()
    client.hset("kiqbeat:schedules", "bench", '{"class":"EmptyWorker","cron":"* * * * *"}')
    if mode == "fold":
        publish_fold(client, "", 10, SCRIPTS, None)
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
        # Timed to the queue's last fetch (at most -c jobs still running then): Sidekiq
        # writes stat:processed only at its heartbeat (about every 5 s), which made earlier
        # figures multiples of it (600 and 298 jobs/s of 3,000 jobs: 5 s and 10 s).
        while client.llen("queue:bench"):
            time.sleep(0.005)
        took = time.perf_counter() - began
        while int(client.get("stat:processed") or 0) < jobs:  # all ran (not timed)
            time.sleep(0.05)
        return took, client.llen(keys.outcomes_inbox(""))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with RedisServer() as server:
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        left: dict[str, int] = {}
        for _ in range(args.rounds):
            for mode in MODES:
                took, left[mode] = one_round(server.url, args.jobs, mode)
                times[mode].append(took)
        for mode, label in MODES.items():
            rates = [args.jobs / t for t in times[mode]]
            print(f"{label}: {', '.join(f'{r:,.0f}' for r in rates)} jobs/s "
                  f"(best {max(rates):,.0f})")
        best = {m: min(times[m]) for m in times}
        for mode in ("fold", "inbox"):
            print(f"cost {MODES[mode]}: {(best[mode] - best['none']) / args.jobs * 1e6:,.0f} "
                  "µs a job (best rounds)")
        print(f"inbox entries left by the last round: {left['fold']:,} folding (reports "
              f"before the call was read), {left['inbox']:,} to the inbox")


if __name__ == "__main__":
    main()
