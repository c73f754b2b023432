"""kiqbeat operations benchmarks (issue 12): prints figures (never asserts them).

Run: .venv/bin/python bench/operations.py [--schedules 20000] [--backfill-hours 24]

One private redis-server (free loopback port, `save ""`, `appendonly no`) per section, so
each memory figure is of that section alone:

1. What the history costs: `--schedules` schedules firing every minute, invoked for 12
   replayed minutes (each history then holds its 10 newest pushes), once with the
   default `history` of 10 and once with 0 — Redis memory per schedule (INFO memory,
   queues deleted first) and push.lua's Redis-side time per job (SLOWLOG), side by side.
2. What a missed record costs: one schedule firing every second, its invokers stopped for
   30 days — the record's size in bytes, and the recording invocation's time.
3. Backfill: one schedule firing every second, `--backfill-hours` of it recorded as missed
   — jobs/s end to end, backfill.lua's Redis-side time per job and its longest call.
4. Run now: median and longest `Store.trigger` over 200 calls.

The clock is replayed as bench/store.py does: `Engine.run(now=...)` at instants in the
Redis clock's past.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time
from datetime import UTC, datetime, timedelta

import redis

from kiqbeat.demo.server import RedisServer, redis_server_path
from kiqbeat.engine import Engine
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.clock import read_clock
from kiqbeat.settings import Settings
from kiqbeat.store import Store

NAMES = {scripts.PUSH.sha: "push.lua", scripts.BACKFILL.sha: "backfill.lua",
         scripts.TRIGGER.sha: "trigger.lua", scripts.DUE.sha: "due.lua"}


def script_times(admin: redis.Redis) -> dict[str, list[int]]:
    """Microseconds of each kiqbeat script call since the last reset (SLOWLOG), by script;
    the commands a script calls (client "?:0") are inside its own entry and left out."""
    out: dict[str, list[int]] = {}
    for entry in admin.slowlog_get(1_000_000):
        words = bytes(entry["command"]).split(b" ", 2)
        if entry.get("client_address") == b"?:0" or len(words) < 2:
            continue
        name = NAMES.get(words[1].decode(errors="replace"))
        if name:
            out.setdefault(name, []).append(int(entry["duration"]))
    admin.slowlog_reset()
    return out


def server() -> tuple[RedisServer, redis.Redis]:
    srv = RedisServer().start()
    admin = redis.Redis.from_url(srv.url)
    admin.config_set("slowlog-max-len", 1_000_000)
    admin.config_set("slowlog-log-slower-than", 0)
    return srv, admin


def used_memory(admin: redis.Redis) -> int:
    admin.slowlog_reset()
    return int(admin.info("memory")["used_memory"])


def history_section(n: int) -> dict[int, tuple[float, float, float]]:
    """history size -> (bytes per schedule, bytes of history per schedule, push.lua µs/job)."""
    out = {}
    for keep in (0, 10):
        srv, admin = server()
        try:
            store = Store(admin)
            empty = used_memory(admin)
            store.import_definitions((f"s{i}", {"cron": "* * * * *", "class": "Worker",
                                                "args": [i]}) for i in range(n))
            engine = Engine(Settings(history=keep), client=admin)
            start = read_clock(admin).replace(second=0, microsecond=0) - timedelta(minutes=20)
            engine.run(now=start, deadline_s=600)  # registers every schedule
            admin.slowlog_reset()
            jobs = 0
            for minute in range(1, 13):
                jobs += engine.run(now=start + timedelta(minutes=minute, seconds=1),
                                   deadline_s=600).pushed
                admin.delete(keys.queue("", "default"))
            push_us = sum(script_times(admin).get("push.lua", []))
            admin.delete(keys.queues(""))
            history_bytes = admin.memory_usage(keys.history("")) or 0
            out[keep] = ((used_memory(admin) - empty) / n, history_bytes / n, push_us / jobs)
        finally:
            admin.close()
            srv.stop()
    return out


def outage(admin: redis.Redis, store: Store, hours: float) -> tuple[Engine, datetime, float]:
    """One every-second schedule, registered `hours` + 1 h ago, invoked now: its ticks older
    than the 1 h window are recorded as missed. Returns the engine, now, and the seconds the
    recording invocation took."""
    store.put("every-second", {"every": "1s", "class": "Tick"})
    engine = Engine(client=admin)
    now = read_clock(admin)
    engine.run(now=now - timedelta(hours=hours + 1), deadline_s=600)
    started = time.perf_counter()
    engine.run(now=now, deadline_s=600)
    return engine, now, time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--schedules", type=int, default=20_000)
    parser.add_argument("--backfill-hours", type=float, default=24.0)
    args = parser.parse_args(argv)
    version = subprocess.run([redis_server_path(), "--version"], capture_output=True,
                             text=True, check=True).stdout.split()[2].removeprefix("v=")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, Redis {version}; {datetime.now(tz=UTC):%Y-%m-%d %H:%M} "
          f"UTC; load average {os.getloadavg()[0]:.1f}")
    print(f"command: bench/operations.py --schedules {args.schedules} "
          f"--backfill-hours {args.backfill_hours:g}")

    figures = history_section(args.schedules)
    (off, _, push_off), (on, hist, push_on) = figures[0], figures[10]
    print(f"1. history, {args.schedules:,} every-minute schedules after 12 minutes: Redis "
          f"memory {off:,.0f} B/schedule with history 0, {on:,.0f} B with 10 "
          f"(+{on - off:,.0f}; the history hash {hist:,.0f} B/schedule); push.lua "
          f"{push_off:.1f} µs/job without, {push_on:.1f} µs/job with ({push_on / push_off:.2f}x)")

    srv, admin = server()
    try:
        store = Store(admin)
        _, _, took = outage(admin, store, hours=30 * 24)
        size = admin.hstrlen(keys.missed(""), "every-second")
        ranges = store.missed(["every-second"])
        print(f"2. every-second schedule down 30 days: recorded as {len(ranges)} range(s) in "
              f"{size} bytes ({ranges[0].ticks:,}{'+' if ranges[0].capped else ''} ticks); "
              f"the recording invocation took {took * 1000:.0f} ms")
    finally:
        admin.close()
        srv.stop()

    srv, admin = server()
    try:
        store = Store(admin)
        outage(admin, store, hours=args.backfill_hours)
        admin.slowlog_reset()
        started = time.perf_counter()
        result = store.backfill(["every-second"])
        took = time.perf_counter() - started
        calls = script_times(admin).get("backfill.lua", [0])
        print(f"3. backfill of {result.pushed:,} ticks ({args.backfill_hours:g} h every "
              f"second): {took:.1f} s, {result.pushed / took:,.0f} jobs/s; backfill.lua "
              f"{sum(calls) / max(result.pushed, 1):.1f} µs/job in Redis over {len(calls)} "
              f"calls, longest {max(calls) / 1000:.1f} ms")
        admin.delete(keys.queue("", "default"))
        times = []
        for _ in range(200):
            started = time.perf_counter()
            store.trigger("every-second")
            times.append(time.perf_counter() - started)
        print(f"4. trigger: median {statistics.median(times) * 1000:.2f} ms, longest "
              f"{max(times) * 1000:.2f} ms over 200 "
              "(3 round trips each: definition, clock, script)")
    finally:
        admin.close()
        srv.stop()


if __name__ == "__main__":
    main()
