"""The alert decision step's cost (issue 27): one incidents.lua call per invocation, in a store
of 1,000,000 schedules, beside a same-run baseline (pipelined LPUSH of 10,000 job-sized
values: the floor of pushing them). Two minutes are timed:

- steady: 10,000 schedules with expectations pushed (their deadlines armed) and 10,000
  successes folded (their deadlines taken away): what a healthy minute costs;
- storm: 10,000 failures reaching `alert_after_failures` and 10,000 deadlines due, each an
  event (outbox and audit entries): the worst minute, every schedule at once.

Run: .venv/bin/python bench/alerts.py [--schedules N] [--load N] [--repeat R]

Prints figures, never asserts them. The store is filled with plain HSETs (definitions of
`--schedules` names, `--load` of them with expectations); the decision touches only the
`--load` names it is given and the deadlines due, whatever the store holds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from datetime import UTC, datetime

import redis

from kiqbeat.alerts.incidents import Watch, decide
from kiqbeat.core.outcomes import Health
from kiqbeat.core.plan import to_ms
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Expectations
from kiqbeat.demo.server import RedisServer
from kiqbeat.redis import keys

JOB = json.dumps({"class": "BenchWorker", "args": [1, "some-argument", {"tenant": 3}],
                  "queue": "q0", "jid": "0" * 24, "created_at": 1.0, "enqueued_at": 1.0,
                  "retry": True, "kiqbeat_schedule": "schedule-000001",
                  "kiqbeat_tick": 1767225600000}).encode()


def fill(client: redis.Redis, schedules: int, load: int, now_ms: int) -> dict[str, str]:
    """Definitions of `schedules` names; the first `load` with expectations, a deadline due
    and (one in two) a failure on record. Their SHA1s."""
    shas: dict[str, str] = {}
    pipe = client.pipeline(transaction=False)
    for i in range(schedules):
        name = f"schedule-{i:07d}"
        definition = json.dumps({"cron": "* * * * *", "class": "BenchWorker",
                                 "args": [i], "expect_success_within": "2m",
                                 "alert_after_failures": 3} if i < load else
                                {"cron": "* * * * *", "class": "BenchWorker", "args": [i]})
        pipe.hset(keys.definitions(""), name, definition)
        if i < load:
            sha = hashlib.sha1(definition.encode()).hexdigest()
            shas[name] = sha
            pipe.hset(keys.expectations(""), name, f"{sha} 120000 3 0")
            pipe.zadd(keys.deadlines(""), {name: now_ms - 1000})
            if i % 2:
                pipe.hset(keys.outcomes_errors(""), name, f"{now_ms - 60_000}\tRuntimeError: x")
        if len(pipe) >= 10_000:
            pipe.execute()
    pipe.execute()
    return shas


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedules", type=int, default=1_000_000)
    parser.add_argument("--load", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url, socket_timeout=300)  # FLUSHALL of 1M
        rows = []
        for attempt in range(args.repeat):
            client.flushall()
            now = datetime.now(tz=UTC).replace(microsecond=0)
            now_ms = to_ms(now)
            started = time.perf_counter()
            shas = fill(client, args.schedules if attempt == 0 else args.load, args.load,
                        now_ms)
            client.delete(keys.deadlines(""))  # the steady minute: none due yet
            if attempt == 0:
                print(f"filled {args.schedules:,} schedules ({args.load:,} with expectations) "
                      f"in {time.perf_counter() - started:.1f} s; Redis holds "
                      f"{client.info('memory')['used_memory_human']}")
            names = sorted(shas)
            watch = Watch({n: (shas[n], Expectations(120_000, 3, None)) for n in names})
            report = Report(now=now)
            report.pushed_runs = [(n, "q0", [now_ms], [0], "1") for n in names]
            successes = [Health(n, "succeeded", now_ms, now_ms, 0, 5, None, None)
                         for n in names]
            failures = [Health(n, "failed", now_ms - 60_000, None, 3, 5, None, None)
                        for n in names]
            # Baseline, same run: 10,000 job-sized LPUSHes in one pipeline.
            pipe = client.pipeline(transaction=False)
            for _ in range(args.load):
                pipe.lpush("queue:baseline", JOB)
            began = time.perf_counter()
            pipe.execute()
            baseline_ms = (time.perf_counter() - began) * 1000
            client.delete("queue:baseline")
            began = time.perf_counter()
            decide(client, "", now_ms, watch, report, [], ["webhook"])  # arms
            steady = decide(client, "", now_ms, Watch(), Report(now=now), successes,
                            ["webhook"])
            steady_ms = (time.perf_counter() - began) * 1000
            for i, name in enumerate(names):  # every deadline due, every streak on record
                client.zadd(keys.deadlines(""), {name: now_ms - 1000}) if i % 2 else None
                client.hset(keys.outcomes_errors(""), name, f"{now_ms}\tRuntimeError: x")
            began = time.perf_counter()
            storm = decide(client, "", now_ms + 1, Watch(), Report(now=now), failures,
                           ["webhook"])
            storm_ms = (time.perf_counter() - began) * 1000
            rows.append((steady_ms, storm_ms, baseline_ms))
            print(f"run {attempt + 1}: steady {steady_ms:.1f} ms ({args.load:,} armed, "
                  f"{args.load:,} successes, {steady.events} events); storm {storm_ms:.1f} ms "
                  f"({storm.events:,} events); baseline LPUSH x{args.load:,} "
                  f"{baseline_ms:.1f} ms; ratios {steady_ms / baseline_ms:.2f}, "
                  f"{storm_ms / baseline_ms:.2f}")
        quiet = Report(now=now)
        began = time.perf_counter()
        decide(client, "", to_ms(now), Watch(), quiet, [], ["webhook"])
        idle_ms = (time.perf_counter() - began) * 1000
        d = statistics.median(r[0] for r in rows)
        w = statistics.median(r[1] for r in rows)
        b = statistics.median(r[2] for r in rows)
        print(f"median: steady {d:.1f} ms, storm {w:.1f} ms, baseline {b:.1f} ms (ratios "
              f"{d / b:.2f}, {w / b:.2f}); "
              f"a decision with nothing to do {idle_ms:.2f} ms (and none is sent: "
              "alerts/step.py skips it)")


if __name__ == "__main__":
    main()
