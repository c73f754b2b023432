"""The outcome fold's cost to an invocation (issue 27): prints figures beside same-run
baselines (never asserts them).

Run: .venv/bin/python bench/outcomes.py [--schedules 1000000] [--jobs 10000]

One private redis-server; `--schedules` definitions stored (plain HSET, pipelined in chunks,
as a writer would; one in ten with `alert_after_failures`); the fold call published as an
invocation publishes it. Then a minute's worth of work: `--jobs` jobs of distinct
schedules, each reporting `started` then its end (two in a hundred `failed`, half of them of
alerting schedules), so twice as many reports, written the worker's way: each report one
call of the published fold (pipelined 100 at a time, as a pool of workers would interleave
them), timed with the redis-server's CPU; then again under SLOWLOG, for Redis's own figure. Then the
invocation's added work, timed: its first pipeline's outcome reads (the inbox's length, the
published call, the oldest changed names), the fold of what the inbox holds (nothing here),
the health of the changed names and the decision step (incidents.lua) on them.

Baselines in the same run: the same reports written today's fallback way (LPUSH + LTRIM,
pipelined) and folded by an invocation (fold_outcomes in slices, then the health of every
schedule it folded, which is what the fold handed Python before); the Redis time per report
of the fold call and of LPUSH + LTRIM (SLOWLOG); `redis-benchmark -P 64 LPUSH` (µs a
command) before and after, for scale: this machine's speed drifts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import redis

from kiqbeat.alerts.incidents import Watch, decide
from kiqbeat.alerts.step import changed_names, queue_changed_names, read_changed_names
from kiqbeat.core.limits import FOLD_SLICE, MAX_OUTCOMES_INBOX
from kiqbeat.core.payload import jid_ms
from kiqbeat.core.report import Report
from kiqbeat.demo.server import RedisServer
from kiqbeat.outcomes.records import Folded, fold_outcomes, publish_fold, read_health
from kiqbeat.redis import keys
from kiqbeat.redis.scripts import SCRIPTS

T0 = 1_790_000_040_000
PLAIN = '{"class":"W","cron":"* * * * *"}'
ALERTING = '{"class":"W","cron":"* * * * *","alert_after_failures":2}'


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--schedules", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args(argv)
    with RedisServer() as server:
        admin = redis.Redis.from_url(server.url)
        before = lpush_us(server.port)
        began = time.perf_counter()
        names = store(admin, args.schedules)
        print(f"{args.schedules:,} schedules stored in {time.perf_counter() - began:,.1f} s "
              f"(used_memory {admin.info('memory')['used_memory_human']})")
        publish_fold(admin, "", 10, SCRIPTS, None)
        rules = f"{hashlib.sha1(ALERTING.encode()).hexdigest()} 0 2 0"
        published = admin.get(keys.outcomes_script("")).decode().split(" ")  # type: ignore[union-attr]
        # Distinct schedules, one in ten alerting (those whose number is a multiple of 10).
        step = max(2, args.schedules // args.jobs)
        ran = [names[(k * step + (0 if k % 10 == 0 else 1)) % len(names)]
               for k in range(args.jobs)]
        # The rules a push of each alerting schedule that ran writes (incidents.lua).
        admin.hset(keys.expectations(""), mapping={n: rules for k, n in enumerate(ran)
                                                    if k % 10 == 0})
        for minute in range(2):  # first ticks (records made), then the next (updated)
            reports = minute_reports(ran, T0 + minute * 60_000)
            worker_way(admin, published, reports, minute)
            baseline(admin, reports, minute)
        after = lpush_us(server.port)
        print(f"baseline redis-benchmark -P 64 LPUSH: {before or 0:.2f} µs before, "
              f"{after or 0:.2f} µs after")


def store(client: redis.Redis, count: int) -> list[str]:
    """`count` definitions, one in ten alerting on failures, HSET in pipelined chunks."""
    names = [f"schedule-{i:07d}" for i in range(count)]
    for start in range(0, count, 10_000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(count, start + 10_000)):
            pipe.hset(keys.definitions(""), names[i], ALERTING if i % 10 == 0 else PLAIN)
        pipe.execute()
    return names


def minute_reports(ran: Sequence[str], tick: int) -> list[str]:
    """Each job's `started`, then its end (2 in 100 `failed`, half of them of alerting
    schedules), as compact JSON."""
    reports = []
    for k, name in enumerate(ran):
        base = {"s": name, "t": tick, "j": jid_ms(name, tick), "a": 1}
        reports.append(json.dumps({**base, "e": "started", "at": tick + 300},
                                  separators=(",", ":")))
        end = ({"e": "failed", "x": "RuntimeError", "m": "boom"} if k % 50 in (0, 25)
               else {"e": "succeeded"})
        reports.append(json.dumps({**base, **end, "at": tick + 1500, "d": 1200 + k % 700},
                                  separators=(",", ":")))
    return reports


def worker_way(client: redis.Redis, published: list[str], reports: list[str],
               minute: int) -> None:
    """Reports folded by the workers' published call; then the invocation's added work."""
    _protocol, verb, target, history = published
    inbox = keys.outcomes_inbox("")
    calls = [(verb, target, 1, inbox, 0, history, text) for text in reports]
    cpu, began = redis_cpu_s(client), time.perf_counter()
    send(client, calls)
    written_s, cpu = time.perf_counter() - began, redis_cpu_s(client) - cpu
    in_redis = slowlogged(client, lambda: send(client, calls))  # again: the same records
    per_report = sum(d for c, d in in_redis if c == verb) / max(1, len(reports))
    print(f"minute {minute}: {len(reports):,} reports folded the worker's way in "
          f"{written_s * 1000:,.0f} ms wall, pipelined 100 a round trip (redis-server CPU "
          f"{cpu * 1e6 / len(reports):,.0f} µs a report; in Redis {per_report:,.1f} µs a "
          "report by SLOWLOG)")
    took_s, detail = invocation(client)
    print(f"  the invocation's added work: {took_s * 1000:,.1f} ms ({detail})")


def baseline(client: redis.Redis, reports: list[str], minute: int) -> None:
    """The same reports written to the inbox (LPUSH + LTRIM) and folded by an invocation,
    then the health of every schedule folded (what the fold handed Python before)."""
    inbox = keys.outcomes_inbox("")
    commands: list[tuple[Any, ...]] = []
    for text in reports:
        commands += [("LPUSH", inbox, text), ("LTRIM", inbox, 0, MAX_OUTCOMES_INBOX - 1)]
    began = time.perf_counter()
    in_redis = slowlogged(client, lambda: send(client, commands))
    pushed_s = time.perf_counter() - began
    per_report = sum(d for c, d in in_redis if c in ("LPUSH", "LTRIM")) / max(1, len(reports))
    folded = Folded()
    cpu, began = redis_cpu_s(client), time.perf_counter()
    fold_outcomes(client, history=10, folded=folded)
    fold_s, cpu = time.perf_counter() - began, redis_cpu_s(client) - cpu
    names = sorted({json.loads(r)["s"] for r in reports})
    began = time.perf_counter()
    read_health(client, "", names)
    health_s = time.perf_counter() - began
    took_s, _detail = invocation(client)
    print(f"  baseline, the inbox way: LPUSH + LTRIM of the same reports {pushed_s * 1000:,.0f}"
          f" ms ({per_report:,.1f} µs a report in Redis); the invocation's fold "
          f"{fold_s * 1000:,.0f} ms ({folded.calls} calls of {FOLD_SLICE}, "
          f"{fold_s * 1e6 / max(1, folded.taken):,.0f} µs an entry, redis-server CPU "
          f"{cpu * 1e6 / max(1, folded.taken):,.0f} µs an entry) + the health of the "
          f"{len(names):,} schedules folded {health_s * 1000:,.0f} ms (what the fold handed "
          f"Python before) + the decision {took_s * 1000:,.1f} ms")


def invocation(client: redis.Redis) -> tuple[float, str]:
    """The outcome work an invocation adds: its first pipeline's reads (timed here as a round
    trip of their own; in an invocation they ride its first pipeline), the inbox's fold when
    it holds entries, the changed names' health and the decision step on them."""
    began = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    pipe.llen(keys.outcomes_inbox(""))
    pipe.get(keys.outcomes_script(""))
    queue_changed_names(pipe, "")
    waiting, _published, first = pipe.execute()
    judged = changed_names(first)
    trips, folded = 1, Folded()
    read_s = time.perf_counter() - began
    if waiting:
        fold_outcomes(client, history=10, folded=folded)
        judged = read_changed_names(client, "")
        trips += folded.calls + 1
    mark = time.perf_counter()
    health = read_health(client, "", [c.name for c in judged]) if judged else {}
    trips += bool(judged)
    health_s, mark = time.perf_counter() - mark, time.perf_counter()
    events = 0
    if judged:  # (as the alert step: no changed name, nothing else due here: no decision)
        now = datetime.now(UTC)
        events = decide(client, "", int(now.timestamp() * 1000), Watch(), Report(now=now),
                        list(health.values()), [], judged=judged).events
        trips += 1
    decide_s = time.perf_counter() - mark
    took = time.perf_counter() - began
    return took, (f"{trips} round trips: {waiting:,} inbox entries folded, {len(judged):,} "
                  f"changed names judged, {events} events; the reads "
                  f"{read_s * 1000:.1f} ms, the health {health_s * 1000:.1f} ms, the decision "
                  f"{decide_s * 1000:.1f} ms")


def send(client: redis.Redis, commands: Sequence[tuple[Any, ...]], per_trip: int = 100
         ) -> None:
    """`commands` pipelined `per_trip` at a time (a pool of workers' interleaved calls)."""
    for start in range(0, len(commands), per_trip):
        pipe = client.pipeline(transaction=False)
        for command in commands[start:start + per_trip]:
            pipe.execute_command(*command)
        pipe.execute()


def redis_cpu_s(client: redis.Redis) -> float:
    """The redis-server's CPU seconds so far (user + system, /proc)."""
    pid = int(client.info("server")["process_id"])
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def slowlogged(client: redis.Redis, work: Callable[[], None]) -> list[tuple[str, int]]:
    """Run `work` with every command logged; each command's name and µs in Redis."""
    client.config_set("slowlog-max-len", 100_000)
    client.config_set("slowlog-log-slower-than", 0)
    client.slowlog_reset()
    try:
        work()
        entries = client.slowlog_get(100_000)
    finally:
        client.config_set("slowlog-log-slower-than", 10_000)
    return [(e["command"].split(b" ", 1)[0].decode().upper(), int(e["duration"]))
            for e in entries]


def lpush_us(port: int) -> float | None:
    """µs per LPUSH of `redis-benchmark -P 64` against the private server (None: absent)."""
    program = shutil.which("redis-benchmark")
    if program is None:
        return None
    done = subprocess.run([program, "-p", str(port), "-q", "-n", "200000", "-P", "64", "-t",
                           "lpush", "--csv"], capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith('"LPUSH"'):
            return 1e6 / float(line.split(",")[1].strip('"'))
    return None


if __name__ == "__main__":
    main()
