"""What each performance device (lib/kiqbeat/devices.py) buys: each turned off alone, the
rest on, against all on (and all off: the reference mode).

Run: .venv/bin/python bench/devices.py [--all-due 10000] [--store-size 100000]
                                       [--rounds 3] [--warm 3] [--variants on,memo,...]

Prints figures, asserts nothing. Two private redis-servers: one holding `--all-due`
schedules that fire every minute, one `--store-size` schedules ~1 % due a minute (bench/
store.py's). Each measurement runs in a child process of its own (`gc.freeze` and the
document memo are process-wide), the variants taking turns, `--rounds` rounds:

- cold: a fresh Engine (and client) per invocation, modules loaded, all due: 2 invocations;
- warm: one Engine, one warm-up invocation, then `--warm` invocations, all due;
- store: one Engine on the large store, a warm-up, then `--warm` invocations;
- document (variants `on` and `document` only): one Engine running a document of
  `--store-size` schedules, already applied, a warm-up, then `--warm` invocations.

`--sections` and `--variants` pick some (comma-separated); `gc` is `paused_gc` off.

Each figure is the process's CPU (time.process_time) of one invocation, which holds better
than wall time on a shared machine; wall time is printed beside it (a device that overlaps
Redis' work with Python's, as read_ahead and plan_slice do, shows in wall time only: measure
those on a quiet machine). Medians over the rounds, the mean and the largest beside them (a
rare full collection shows there).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# What turning one device off means, on an Engine's `Devices` (`off` below). warm_up, removed,
# was measured on the code before its removal (0381705: bench/results-push.txt). read_ahead
# and plan_slice overlap Redis' work with Python's: their gain shows in wall time, on a
# machine quiet enough for Redis to have a core.
VARIANTS = ["on", "parsed", "memo", "checks", "read_ahead", "plan_slice", "paused_gc",
            "reference"]


def off(devices: Any, variant: str) -> None:
    """Turn one device of `devices` off (the rest stay on); "on" changes nothing."""
    if variant == "parsed":
        devices._keep_parsed = lambda *args: None
    elif variant == "memo":
        from kiqbeat.core.plan import TickMemo

        devices.memo = TickMemo
    elif variant == "checks":
        load = devices._load

        def without_checks() -> Any:
            read = load()
            devices.checks = None
            return read

        devices._load = without_checks
    elif variant == "read_ahead":
        devices.read_ahead = False
    elif variant == "plan_slice":
        devices.plan_slice = 0
    elif variant == "overlap":  # read_ahead and plan_slice together
        devices.read_ahead, devices.plan_slice = False, 0
    elif variant in ("gc", "paused_gc"):
        from kiqbeat.core.collector import collector_paused

        devices.paused_gc = lambda: collector_paused(False)
    elif variant == "document":
        devices.document = lambda config, build: build(config)
    elif variant == "reference":
        devices.reference = True
        devices.read_ahead, devices.plan_slice = False, 0  # as the reference mode has them


def child(args: argparse.Namespace) -> None:
    """One measurement (`args.section`) of one variant, as JSON lines on stdout."""
    import redis

    from kiqbeat.devices import Devices
    from kiqbeat.engine import Engine

    at = datetime.fromisoformat(args.at)

    def engine() -> Engine:
        devices = Devices()
        off(devices, args.variant)
        return Engine(client=redis.Redis.from_url(args.url), devices=devices)

    def timed(run: Callable[[], Any]) -> Any:
        cpu, wall = time.process_time(), time.perf_counter()
        report = run()
        print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
                          "pushed": report.pushed}), flush=True)
        report.jobs.clear()
        return report

    config = None
    if args.section == "document":
        sys.path.insert(0, str(ROOT / "bench"))
        from store import definitions

        from kiqbeat.document import parse_config

        config = parse_config({"missed_jobs_window": "1h",
                               "schedules": dict(definitions(args.n))},
                              source="bench-document.yaml")
    if args.section == "cold":
        for k in range(2):
            one = engine()
            timed(lambda: one.run(now=at + timedelta(minutes=k), deadline_s=600))  # noqa: B023
            one.close()
        return
    one = engine()
    one.run(config, now=at, deadline_s=600).jobs.clear()  # the warm-up
    for k in range(1, args.warm + 1):
        timed(lambda: one.run(config, now=at + timedelta(minutes=k), deadline_s=600))  # noqa: B023
    one.close()


def measure(section: str, variant: str, url: str, at: datetime, n: int, warm: int
            ) -> list[dict[str, float]]:
    """A child process's figures for one section and variant."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIQBEAT_")}
    env.update(PYTHONPATH=str(ROOT / "lib"), KIQBEAT_ALLOW_REPLAY="1")
    out = subprocess.run([sys.executable, __file__, "--child", section, "--variant", variant,
                          "--url", url, "--at", at.isoformat(), "--n", str(n),
                          "--warm", str(warm)],
                         env=env, capture_output=True, text=True, check=True,
                         timeout=1800).stdout
    return [json.loads(line) for line in out.splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--all-due", type=int, default=10_000)
    parser.add_argument("--store-size", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--sections", default="cold,warm,store,document")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--at", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.section = args.child
        child(args)
        return
    sys.path.insert(0, str(ROOT / "bench"))
    import redis
    from store import definitions, drop_jobs

    from kiqbeat.demo.server import RedisServer
    from kiqbeat.document import parse_config
    from kiqbeat.engine import Engine

    variants = args.variants.split(",")
    sections = args.sections.split(",")
    os.environ["KIQBEAT_ALLOW_REPLAY"] = "1"
    with tempfile.TemporaryDirectory(prefix="kiqbeat-devices-"), \
            RedisServer() as due_server, RedisServer() as store_server, \
            RedisServer() as document_server:
        servers = {"cold": due_server, "warm": due_server, "store": store_server,
                   "document": document_server}
        sizes = {"cold": args.all_due, "warm": args.all_due, "store": args.store_size,
                 "document": args.store_size}
        minutes = {"cold": 2, "warm": 1 + args.warm, "store": 1 + args.warm,
                   "document": 1 + args.warm}
        clock: dict[int, datetime] = {}  # per server: the next instant to run at
        for section in sections:
            server = servers[section]
            if server.port in clock:
                continue
            admin = redis.Redis.from_url(server.url)
            seconds, _ = admin.time()
            total = args.rounds * len(variants) * (2 + 1 + args.warm) + 20
            start = datetime.fromtimestamp(int(seconds) // 60 * 60, tz=UTC) - timedelta(
                minutes=total)
            engine = Engine(client=admin)
            if section == "document":
                config = parse_config({"missed_jobs_window": "1h",
                                       "schedules": dict(definitions(args.store_size))},
                                      source="bench-document.yaml")
                engine.run(config, now=start, deadline_s=1800)
            else:
                every = section in ("cold", "warm")
                result = engine.store().import_definitions(
                    definitions(sizes[section], every_minute=every))
                assert result.written == sizes[section], result
                engine.run(now=start, deadline_s=1800)  # every schedule registered
            clock[server.port] = start + timedelta(minutes=1, seconds=1)
            print(f"# {section}: {sizes[section]:,} schedules registered", flush=True)
        figures: dict[tuple[str, str], list[dict[str, float]]] = {}
        for round_ in range(args.rounds):
            for section in sections:
                server = servers[section]
                # The variants' order turns each round: the first of a round measured slower
                # (about 10-25 % of wall time here), whichever it was.
                turn = round_ % len(variants)
                for variant in (["on", "document"] if section == "document"
                                else variants[turn:] + variants[:turn]):
                    at = clock[server.port]
                    got = measure(section, variant, server.url, at, sizes[section], args.warm)
                    clock[server.port] = at + timedelta(minutes=minutes[section])
                    drop_jobs(redis.Redis.from_url(server.url))
                    figures.setdefault((section, variant), []).extend(got)
            print(f"# round {round_ + 1} done", flush=True)
        print(f"== bench/devices.py --all-due {args.all_due} --store-size {args.store_size} "
              f"--rounds {args.rounds} --warm {args.warm}; {datetime.now(UTC):%Y-%m-%d %H:%M} "
              f"UTC, load average {os.getloadavg()[0]:.1f}")
        print("   CPU ms of one invocation (median; wall ms beside), and the ratio to all on")
        for section in sections:
            base = figures.get((section, "on"))
            if not base:
                continue
            base_cpu = statistics.median(f["cpu"] for f in base)
            pushed = statistics.median(f["pushed"] for f in base)
            print(f"  {section} ({len(base)} invocations a variant, median {pushed:,.0f} pushed)")
            for variant in [*variants, "document"]:
                got = figures.get((section, variant))
                if not got:
                    continue
                cpu = statistics.median(f["cpu"] for f in got)
                wall = statistics.median(f["wall"] for f in got)
                label = "all on" if variant == "on" else (
                    "all off" if variant == "reference" else f"{variant} off")
                mean = statistics.mean(f["cpu"] for f in got)
                most = max(f["cpu"] for f in got)
                print(f"    {label:16} CPU {cpu * 1e3:8.1f} ms  x{cpu / base_cpu:5.2f}   "
                      f"wall {wall * 1e3:8.1f} ms   (CPU mean {mean * 1e3:.1f}, max "
                      f"{most * 1e3:.1f})")


if __name__ == "__main__":
    main()
