"""Replay captured push.lua / due.lua calls against edited copies of the scripts.

Capture (one warm invocation's real calls, and the data they ran on):
  python bench/lua_replay.py capture OUT.pickle [--all-due 10000 | --rotating 200000]
Replay (EVALSHA of the scripts built from LUA_DIR, on a fresh copy of the captured data for
each round; Redis-side time as the CPU time of redis-server's main thread around each
call, slowlog off, so that the script's inner commands are not logged one by one):
  python bench/lua_replay.py replay OUT.pickle [--lua-dir DIR] [--rounds 5]
Prints, per script, microseconds per job (push.lua) / per due entry (due.lua), and the
longest call. Figures, never assertions.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import random
import signal
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis

from kiqbeat.demo.server import RedisServer
from kiqbeat.engine import Engine
from kiqbeat.redis import scripts

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import store as bench_store  # noqa: E402  (bench/store.py: the same schedules and clock)

WATCHED = {scripts.PUSH.sha: "push", scripts.DUE.sha: "due"}


def snapshot(client: redis.Redis) -> list[tuple[bytes, bytes]]:
    out = []
    for key in client.scan_iter(count=5000):
        out.append((key, client.dump(key)))
    return out


def restore(client: redis.Redis, data: list[tuple[bytes, bytes]]) -> None:
    client.flushall()
    pipe = client.pipeline(transaction=False)
    for n, (key, value) in enumerate(data, 1):
        pipe.restore(key, 0, value)
        if n % 2000 == 0:
            pipe.execute()
    pipe.execute()


def capture(out: Path, all_due: int, rotating: int, minutes: int) -> None:
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        engine = Engine(client=redis.Redis.from_url(server.url))
        every = all_due > 0
        n = all_due or rotating
        bench_store.import_all(engine.store(), n, every_minute=every)
        t0 = bench_store.replay_start(client, minutes + 2)
        while True:
            try:
                engine.run(now=t0)
                break
            except Exception as exc:  # DeadlineError: go on
                print("  registering:", type(exc).__name__)
        for k in range(1, minutes + 1):
            engine.run(now=t0 + timedelta(minutes=k, seconds=1))
        bench_store.drop_jobs(client)
        data = snapshot(client)
        calls: list[tuple[str, list[Any], list[Any]]] = []
        original = scripts.Caller.command

        def command(self: scripts.Caller, lua: scripts.Lua, keys: Any, args: Any) -> Any:
            if lua.sha in WATCHED and keys:
                calls.append((WATCHED[lua.sha], list(keys), list(args)))
            return original(self, lua, keys, args)

        scripts.Caller.command = command  # type: ignore[method-assign]
        report = engine.run(now=t0 + timedelta(minutes=minutes + 1, seconds=1))
        scripts.Caller.command = original  # type: ignore[method-assign]
        print(f"captured {len(calls)} calls, {report.pushed} pushed, {len(data)} keys")
        out.write_bytes(pickle.dumps({"data": data, "calls": calls, "jobs": report.pushed}))


def cpu_ns(pid: int) -> int:
    """CPU time of redis-server's main thread, ns (not wall time: this machine is shared, and
    a preempted script would count another process's time)."""
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def lua_text(name: str, uses: tuple[str, ...], lua_dir: Path) -> str:
    # A part this tree does not have (varints.lua before it was split out) is left out.
    parts = [scripts.LIMITS, *((lua_dir / f"{part}.lua").read_text()
                               for part in ("checks", *uses, name)
                               if (lua_dir / f"{part}.lua").exists())]
    return "\n".join(parts)


USES = {"push": scripts.PUSH.uses, "due": scripts.DUE.uses}  # as scripts.py builds them


def replay(path: Path, lua_dir: Path, rounds: int, slowlog: bool, top: int = 0) -> None:
    captured = pickle.loads(path.read_bytes())
    calls, data = captured["calls"], captured["data"]
    texts = {name: lua_text(name, USES[name], lua_dir) for name in USES}
    shas = {name: hashlib.sha1(t.encode()).hexdigest() for name, t in texts.items()}
    jobs = captured["jobs"]
    totals: dict[str, list[float]] = {"push": [], "due": []}
    longest: dict[str, float] = {"push": 0.0, "due": 0.0}
    walls: dict[str, float] = {"push": 0.0, "due": 0.0}  # seconds, as the client saw them
    per_call: list[tuple[float, int, int]] = []  # push.lua: CPU us, jobs pushed, keys
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        for _ in range(rounds):
            restore(client, data)
            for text in texts.values():
                client.script_load(text)
            client.config_set("slowlog-log-slower-than", 0 if slowlog else -1)
            client.slowlog_reset()
            perf = None
            if os.environ.get("LUA_REPLAY_PERF"):
                perf = subprocess.Popen(["perf", "record", "-g", "-o",
                                         os.environ["LUA_REPLAY_PERF"], "-p",
                                         str(server.process.pid)])  # type: ignore[union-attr]
                time.sleep(0.5)
            used = {"push": 0.0, "due": 0.0}
            pid = server.process.pid  # type: ignore[union-attr]
            for name, keys, args in calls:
                before, started = cpu_ns(pid), time.perf_counter()
                reply = client.evalsha(shas[name], len(keys), *keys, *args)
                usec = (cpu_ns(pid) - before) / 1000
                walls[name] = max(walls[name], time.perf_counter() - started)
                if isinstance(reply, redis.ResponseError):
                    raise reply
                used[name] += usec
                if name == "push":
                    per_call.append((usec, int(reply[0]), len(keys)))
                longest[name] = max(longest[name], usec / 1000)
            if perf:
                perf.send_signal(signal.SIGINT)
                perf.wait()
            for name in used:
                totals[name].append(used[name])
    counts = {name: sum(1 for c in calls if c[0] == name) for name in USES}
    for name in USES:
        if not totals[name]:
            continue
        print(f"{name}.lua: {statistics.median(totals[name]) / jobs:.2f} us/job median "
              f"(min {min(totals[name]) / jobs:.2f}) over {rounds} rounds, {counts[name]} calls, "
              f"longest {longest[name]:.2f} ms CPU, {walls[name] * 1000:.2f} ms wall (client)")
    if top:
        show_top(per_call, top)


def show_top(per_call: list[tuple[float, int, int]], top: int) -> None:
    for usec, pushed, nkeys in sorted(per_call, reverse=True)[:top]:
        print(f"  push.lua call: {usec:.0f} us CPU, {pushed} pushed, {nkeys} keys")


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("capture")
    c.add_argument("out", type=Path)
    c.add_argument("--all-due", type=int, default=0)
    c.add_argument("--rotating", type=int, default=0)
    c.add_argument("--minutes", type=int, default=2)
    r = sub.add_parser("replay")
    r.add_argument("path", type=Path)
    r.add_argument("--lua-dir", type=Path,
                   default=Path(scripts.__file__).resolve().parent / "lua")
    r.add_argument("--rounds", type=int, default=5)
    r.add_argument("--slowlog", action="store_true")
    r.add_argument("--top", type=int, default=0, help="print the N longest push.lua calls")
    args = parser.parse_args()
    random.seed(1)
    if args.what == "capture":
        started = time.perf_counter()
        capture(args.out, args.all_due, args.rotating, args.minutes)
        print(f"  {time.perf_counter() - started:.1f} s")
    else:
        replay(args.path, args.lua_dir, args.rounds, args.slowlog, args.top)


if __name__ == "__main__":
    main()
