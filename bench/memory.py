"""Redis memory per schedule of kiqbeat's store and private state (issue 18 item 5): prints
figures (never asserts them).

Run: .venv/bin/python bench/memory.py [--size 100000] [--history 10]

One private redis-server; `--size` every-minute schedules imported through the API
(bench/store.py's definitions: the documented protocol's definition JSON + index entry),
registered, then invoked once a replayed minute, `--history` + 1 times, so every schedule
has pushed at least `--history` ticks (its history is full); pushed jobs are deleted before
each `INFO memory`. Then every schedule's last `--history` ticks are reported succeeded (the
worker protocol's entries, LPUSHed as a worker would, in chunks) and folded, so every
outcome record is full. Figures: used_memory over the empty server ÷ N after the import,
after the first invocation, in steady state, and with full outcome records (the outcomes'
own cost: that less the steady state); the steady state with history off (`--history 0`,
run separately). Run it on an older commit's `lib` (PYTHONPATH) to compare.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from datetime import timedelta

import redis
from store import (  # bench/store.py, beside this file
    SlowLog,
    definitions,
    drop_jobs,
    import_all,
    invoke_bulk,
    replay_start,
    used_memory,
)

from kiqbeat.core.payload import jid_ms
from kiqbeat.core.plan import to_ms
from kiqbeat.demo.server import RedisServer
from kiqbeat.engine import Engine
from kiqbeat.outcomes.records import Folded, fold_outcomes
from kiqbeat.redis import keys
from kiqbeat.settings import Settings

CHUNK = 5_000  # schedules whose outcomes are pushed to the inbox, then folded, at a time


def report_outcomes(admin: redis.Redis, n: int, first_tick_ms: int, ticks: int,
                    history: int) -> tuple[int, float]:
    """Report `ticks` succeeded ticks per schedule (durations 0.1-5 s) as a worker would,
    folding each chunk; (entries folded, seconds spent folding)."""
    rng = random.Random(5)
    names = [name for name, _ in definitions(n, every_minute=True)]
    inbox = keys.outcomes_inbox("")
    folded, spent = Folded(), 0.0
    for start in range(0, n, CHUNK):
        pipe = admin.pipeline(transaction=False)
        for name in names[start:start + CHUNK]:
            for k in range(ticks):
                tick = first_tick_ms + k * 60_000
                pipe.lpush(inbox, json.dumps({
                    "s": name, "t": tick, "j": jid_ms(name, tick), "e": "succeeded",
                    "at": tick + 9000, "a": 1, "d": rng.randrange(100, 5000)},
                    separators=(",", ":")))
        pipe.execute()
        began = time.perf_counter()
        while admin.llen(inbox):
            fold_outcomes(admin, history=history, folded=folded, slices=1000)
        spent += time.perf_counter() - began
    return folded.taken, spent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--history", type=int, default=10)
    args = parser.parse_args(argv)
    n = args.size
    with RedisServer() as server:
        admin = redis.Redis.from_url(server.url)
        slowlog = SlowLog(admin)
        base = used_memory(admin)
        engine = Engine(Settings(history=args.history), client=redis.Redis.from_url(server.url))
        import_all(engine.store(), n, every_minute=True)
        imported = used_memory(admin) - base
        t0 = replay_start(admin, args.history + 5)
        invoke_bulk(engine, slowlog, t0)
        drop_jobs(admin)
        registered = used_memory(admin) - base
        for minute in range(1, args.history + 2):
            invoke_bulk(engine, slowlog, t0 + timedelta(minutes=minute, seconds=1))
            drop_jobs(admin)
        steady = used_memory(admin) - base
        folded, fold_s = report_outcomes(admin, n, to_ms(t0) + 60_000, args.history + 1,
                                         args.history)
        with_outcomes = used_memory(admin) - base
        encodings: dict[str, int] = {}
        for key in admin.scan_iter(match="kiqbeat:*", count=1000):
            kind = admin.object("encoding", key)
            name = key.decode().split(":")[1]
            encodings[f"{name} {kind.decode() if kind else '?'}"] = encodings.get(
                f"{name} {kind.decode() if kind else '?'}", 0) + 1
        print(f"{n:,} every-minute schedules, history {args.history}, "
              f"Redis {admin.info('server')['redis_version']}: used_memory delta / N")
        print(f"  after the import (definitions + due index): {imported / n:,.0f} B/schedule")
        print(f"  after the first invocation (+ marks):      {registered / n:,.0f} B/schedule")
        print(f"  after {args.history + 1} pushes each (steady state): {steady / n:,.0f} B/schedule"
              f" (private state {(steady - imported) / n:,.0f})")
        print(f"  with full outcome records ({args.history} ticks each): "
              f"{with_outcomes / n:,.0f} B/schedule (outcomes {(with_outcomes - steady) / n:,.0f};"
              f" {folded:,} entries folded in {fold_s:.1f} s, {folded / fold_s:,.0f}/s)")
        print(f"  keys by encoding: {dict(sorted(encodings.items()))}")


if __name__ == "__main__":
    main()
