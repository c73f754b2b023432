"""Cold invocations (issue 18, item 3): a fresh `kiqbeat run-once` process, timed whole.

Run: .venv/bin/python bench/cold.py [--size 100000] [--store-size 1000000] [--runs 5]
                                    [--all-due 10000] [--import-jsonl 50000]
                                    [--before REV] [--profile]

Prints figures, asserts nothing. One private redis-server; each figure is the wall time of a
new `python -m kiqbeat run-once --json` process, interpreter start-up included, as a
Kubernetes CronJob pod or a cold Lambda pays it every minute:

1. `--size` schedules from one unchanged document file (bench/store.py's schedules: 60 %
   hourly, 40 % daily, ~1.03 % due a minute): a first process applies it, then `--runs`
   processes each replay one later minute (`--now ... --replay`). With `--before REV`, the
   same first with the code of REV (`git archive REV lib` into a temporary directory), so
   the gain is a ratio measured in the same run (two processes: each costs ~20 s there).
2. `--store-size` schedules in the store and no document: imported with
   `Store.import_definitions` and registered by in-process invocations (minutes at
   1,000,000), then `--runs` processes as above; with `--before REV`, as many of REV's,
   the two codes taking the minutes in turns. `--profile` adds `-X importtime`'s
   slowest imports and a cProfile of one such process.
3. `--all-due` schedules firing every minute (issue 28, item 4): `--runs` rounds, each a fresh
   process with every one due (a new minute), then one with nothing due (the same minute
   again); with `--before REV`, REV's code takes its rounds in turn with this tree's, on the
   same store. Prints each code's medians, the difference (the cost of the due schedules
   beyond start-up), jobs/s, what a nothing-due process imports (`-X importtime`: modules
   and their own time), and every script call's time inside Redis over this tree's
   first all-due process (SLOWLOG) per job, beside `redis-benchmark -P 64 LPUSH` of a
   job-sized value measured right after.
4. `--import-jsonl` schedules through `kiqbeat schedules import FILE --jsonl` (a new
   process), this tree's and REV's in turn, into an emptied store: the rate, write.lua's
   time inside Redis and the process's CPU per definition, and a one-line import's CPU (the
   start-up the per-definition CPU is also given without). `--size 0 --skip-store
   --all-due 0` runs this section alone.
5. `--startup` (issue 28, item 4): what a nothing-due process's time is made of, in turns
   with it: the interpreter alone (`python -c pass`, `-S`, `-I`), and redis-py's own import
   (as kiqbeat's processes load it: its asyncio client deferred), which kiqbeat cannot
   cut. Then the container image's case: the official python image deletes its standard
   library's bytecode and kiqbeat's image writes none (PYTHONDONTWRITEBYTECODE, a read-only
   root), so a process compiles each standard module it imports unless the image compiled
   them (infra/Dockerfile): this interpreter with a copy of its standard library without
   .pyc files, and with them compiled, in turns.

The clock is replayed as in bench/store.py: schedules are registered at T, a minute's second
well in the Redis clock's past, and each process runs at T + k minutes + 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis
from bench import redis_benchmark_lpush  # bench/bench.py, beside this file

# bench/store.py, beside this file: the same schedules, the same fresh processes
from store import SlowLog, definitions, drop_jobs, run_once, write_document

from kiqbeat.demo.server import RedisServer
from kiqbeat.engine import Engine
from kiqbeat.errors import DeadlineError

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 1.0


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's ended children so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def redis_minute(client: redis.Redis) -> datetime:
    seconds, _ = client.time()
    return datetime.fromtimestamp(int(seconds) // 60 * 60, tz=UTC)


def code_of(rev: str, into: Path) -> Path:
    """The `lib` tree of git revision `rev`, unpacked under `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "lib"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return compiled(into / "lib")


def compiled(lib: Path) -> Path:
    """`lib`, its modules compiled (`__pycache__`), as an installed package's are: a process
    that compiled every module it imports would time the compiler, not kiqbeat."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(lib)], check=True,
                   stdout=subprocess.DEVNULL)
    return lib


def cold_runs(lib: Path, url: str, t0: datetime, runs: int, document: Path | None
              ) -> list[tuple[float, dict[str, Any]]]:
    out = []
    for k in range(1, runs + 1):
        seconds, report, _ = run_once(lib, url, t0 + timedelta(minutes=k, seconds=1), document)
        out.append((seconds, report))
    return out


def line(what: str, results: list[tuple[float, dict[str, Any]]]) -> tuple[float, float]:
    times = [s for s, _ in results]
    due = statistics.mean(r["schedules"] for _, r in results)
    pushed = statistics.mean(r["pushed"] for _, r in results)
    median, worst = statistics.median(times), max(times)
    print(f"  {what}: {len(times)} processes, ~{due:,.0f} due, ~{pushed:,.0f} pushed: median "
          f"{median:.2f} s, max {worst:.2f} s ({', '.join(f'{t:.2f}' for t in times)}); "
          f"round trips {', '.join(str(r['round_trips']) for _, r in results)}")
    return median, worst


ROWS: list[tuple[str, str, str]] = []


def row(what: str, measured: str, met: bool | None) -> None:
    ROWS.append((what, measured, "-" if met is None else "met" if met else "NOT MET"))


def bench_document(server: RedisServer, admin: redis.Redis, n: int, runs: int,
                   before: Path | None, work: Path) -> None:
    print(f"\n== a fresh run-once process, {n:,} schedules from one unchanged document")
    document = work / "schedules.yaml"
    write_document(document, n)
    print(f"  document: {document.stat().st_size / 1e6:.1f} MB")
    codes = ([("before", before)] if before else []) + [("after", ROOT / "lib")]
    for label, lib in codes:
        admin.flushall()
        t0 = redis_minute(admin) - timedelta(minutes=runs + 5) + timedelta(seconds=1)
        first_s, first, _ = run_once(lib, server.url, t0, document)
        print(f"  {label}: the first process (applies the document, registers every "
              f"schedule): {first_s:.2f} s, {first['round_trips']} round trips")
        results = cold_runs(lib, server.url, t0, 2 if label == "before" else runs, document)
        median, worst = line(f"{label}, unchanged document", results)
        row(f"{label}: fresh run-once, document of {n:,}, ~1 % due",
            f"median {median:.2f} s, max {worst:.2f} s", None if label == "before"
            else worst <= TARGET_S)


def bench_store(server: RedisServer, admin: redis.Redis, n: int, runs: int,
                profile: bool, before: Path | None, work: Path) -> None:
    print(f"\n== a fresh run-once process, {n:,} schedules in the store, no document")
    admin.flushall()
    client = redis.Redis.from_url(server.url)
    engine = Engine(client=client)
    started = time.perf_counter()
    result = engine.store().import_definitions(definitions(n))
    assert result.written == n, result
    imported_s = time.perf_counter() - started
    t0 = redis_minute(admin) - timedelta(minutes=2 * runs + 10) + timedelta(seconds=1)
    started = time.perf_counter()
    while True:  # every schedule is "plan me" once: registered at t0
        try:
            engine.run(now=t0, deadline_s=600)
            break
        except DeadlineError:
            continue
    registered_s = time.perf_counter() - started
    client.close()
    print(f"  imported in {imported_s:.0f} s, registered in {registered_s:.0f} s (in-process)")
    if before is None:
        results = cold_runs(ROOT / "lib", server.url, t0, runs, None)
    else:  # minutes taken in turns, so that both codes meet the same load
        results, earlier = [], []
        for k in range(1, 2 * runs + 1):
            lib = before if k % 2 else ROOT / "lib"
            seconds, report, _ = run_once(lib, server.url, t0 + timedelta(minutes=k, seconds=1),
                                          None)
            (earlier if k % 2 else results).append((seconds, report))
        median, worst = line("before, no document", earlier)
        row(f"before: fresh run-once, {n:,} in the store, no document, ~1 % due",
            f"median {median:.2f} s, max {worst:.2f} s", None)
    median, worst = line("no document", results)
    row(f"fresh run-once, {n:,} in the store, no document, ~1 % due",
        f"median {median:.2f} s, max {worst:.2f} s", worst <= TARGET_S)
    runs = runs if before is None else 2 * runs
    at = t0 + timedelta(minutes=runs + 1, seconds=1)
    empty_s, _, _ = run_once(ROOT / "lib", server.url, t0 + timedelta(minutes=runs, seconds=2),
                             None)
    print(f"  nothing due (the same minute again): {empty_s:.2f} s")
    row(f"fresh run-once, {n:,} in the store, nothing due", f"{empty_s:.2f} s", None)
    if profile:
        _, _, stderr = run_once(ROOT / "lib", server.url, at, None, "-X", "importtime")
        imports = []
        for text in stderr.splitlines():
            if text.startswith("import time:") and "|" in text:
                _, cumulative, name = text.split("|")
                if cumulative.strip().isdigit():
                    imports.append((int(cumulative), name.rstrip()))
        print("  -X importtime, top-level imports by cumulative time (ms):")
        for cumulative, name in sorted(imports, reverse=True)[:15]:
            if not name.startswith("   "):
                print(f"    {cumulative / 1000:7.1f}  {name.strip()}")
        stats = work / "run-once.prof"
        run_once(ROOT / "lib", server.url, at + timedelta(minutes=1), None, "-m", "cProfile",
                 "-o", str(stats))
        import pstats

        print("  cProfile of one process (cumulative, top 25):")
        pstats.Stats(str(stats)).sort_stats("cumulative").print_stats(25)


def bench_all_due(server: RedisServer, admin: redis.Redis, n: int, runs: int,
                  before: Path | None) -> None:
    print(f"\n== a fresh run-once process, {n:,} schedules all due (`* * * * *`), and nothing "
          "due (the same minute again)")
    admin.flushall()
    client = redis.Redis.from_url(server.url)
    engine = Engine(client=client)
    result = engine.store().import_definitions(definitions(n, every_minute=True))
    assert result.written == n, result
    codes = ([("before", before)] if before else []) + [("after", ROOT / "lib")]
    t0 = redis_minute(admin) - timedelta(minutes=runs * len(codes) + 10)
    engine.run(now=t0, deadline_s=600)  # every schedule registered ("plan me" once)
    client.close()
    times: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label, _ in codes}
    # Each process's CPU (user + system), which a loaded machine inflates less than its wall
    # time: the ratio between two codes holds better.
    cpus: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label, _ in codes}
    slow = None
    minute = 0
    for round_ in range(runs):
        for label, lib in codes:
            minute += 1
            at = t0 + timedelta(minutes=minute, seconds=1)
            if label == "after" and round_ == 0:
                slowlog = SlowLog(admin)
            cpu = children_cpu_s()
            seconds, report, _ = run_once(lib, server.url, at, None)
            cpus[label][0].append(children_cpu_s() - cpu)
            if label == "after" and round_ == 0:
                slow = slowlog.read()
                admin.config_set("slowlog-log-slower-than", 10_000)
            assert report["pushed"] == n, report
            cpu = children_cpu_s()
            idle_s, idle, _ = run_once(lib, server.url, at + timedelta(seconds=1), None)
            cpus[label][1].append(children_cpu_s() - cpu)
            assert idle["pushed"] == 0 and idle["schedules"] == 0, idle
            times[label][0].append(seconds)
            times[label][1].append(idle_s)
            drop_jobs(admin)
    lpush = redis_benchmark_lpush(server.port, 400_000)
    at = t0 + timedelta(minutes=minute, seconds=2)  # the last minute again: nothing due
    for label, lib in codes:  # where a nothing-due process goes: its imports
        modules, self_ms = imports_of(run_once(lib, server.url, at, None, "-X", "importtime")[2])
        print(f"  {label}: nothing due: {modules} modules imported, {self_ms:.0f} ms of their "
              "own code (-X importtime, which adds its own cost)")
    for label, _ in codes:
        due, idle = (statistics.median(t) for t in times[label])
        print(f"  {label}: nothing due: median {idle:.3f} s ({_listed(times[label][1])}); "
              f"{n:,} due: median {due:.3f} s ({_listed(times[label][0])}); beyond nothing "
              f"due: {due - idle:.3f} s ({n / max(due - idle, 1e-9):,.0f} jobs/s)")
        due_cpu, idle_cpu = (statistics.median(t) for t in cpus[label])
        print(f"  {label}: CPU of the process: nothing due: median {idle_cpu:.3f} s "
              f"({_listed(cpus[label][1])}); {n:,} due: median {due_cpu:.3f} s "
              f"({_listed(cpus[label][0])}); beyond nothing due: {due_cpu - idle_cpu:.3f} s")
        row(f"{label}: fresh run-once, nothing due, CPU", f"median {idle_cpu:.3f} s", None)
        row(f"{label}: fresh run-once, {n:,} due, CPU beyond nothing due",
            f"{due_cpu - idle_cpu:.3f} s", None)
        row(f"{label}: fresh run-once, nothing due", f"median {idle:.3f} s",
            None if label == "before" else idle <= 0.3)
        row(f"{label}: fresh run-once, {n:,} due, beyond nothing due", f"{due - idle:.3f} s",
            None if label == "before" else due - idle <= 0.2)
    if slow is not None:
        scripts_us = sum(us for kind, us in slow.entries if kind.endswith(".lua")
                         or kind in ("EVALSHA", "EVAL", "FCALL"))
        per_job, lpush_us = scripts_us / n, 1e6 / lpush
        print(f"  scripts inside Redis over this tree's first all-due process (SLOWLOG): "
              f"{scripts_us / 1000:.1f} ms, {per_job:.2f} us a job; redis-benchmark -P 64 "
              f"LPUSH of 330 bytes: {lpush:,.0f}/s ({lpush_us:.2f} us): {per_job / lpush_us:.1f}x")
        row("after: scripts inside Redis per job of a cold run-once, x LPUSH",
            f"{per_job / lpush_us:.1f}x", per_job / lpush_us <= 3)


def bench_import_jsonl(server: RedisServer, admin: redis.Redis, n: int, runs: int,
                       before: Path | None, work: Path) -> None:
    print(f"\n== `kiqbeat schedules import FILE --jsonl` of {n:,} schedules (a new process)")
    path, first = work / "schedules.jsonl", work / "first.jsonl"
    with path.open("w") as out:
        for name, data in definitions(n):
            out.write(json.dumps({"name": name, "definition": data}) + "\n")
    first.write_text(path.read_text().split("\n", 1)[0] + "\n")
    codes = ([("before", before)] if before else []) + [("after", ROOT / "lib")]
    rates: dict[str, list[float]] = {label: [] for label, _ in codes}
    # Per definition, for each import: write.lua's time inside Redis (INFO commandstats: every
    # EVALSHA of the import is a write call), and the CPU of redis-server and of the process.
    script_us: dict[str, list[float]] = {label: [] for label, _ in codes}
    redis_cpu_us: dict[str, list[float]] = {label: [] for label, _ in codes}
    process_cpu_us: dict[str, list[float]] = {label: [] for label, _ in codes}
    # The CPU of a process importing one line: its start-up, which the per-definition CPU
    # beyond it leaves out.
    startup_s: dict[str, list[float]] = {label: [] for label, _ in codes}
    for _ in range(runs):
        for label, lib in codes:
            env = {k: v for k, v in os.environ.items() if not k.startswith("KIQBEAT_")}
            env.update(PYTHONPATH=str(lib))
            command = [sys.executable, "-m", "kiqbeat", "schedules", "import", str(first),
                       "--jsonl", "--no-progress", "--json", "--redis-url", server.url]
            admin.flushall()
            usage_before = children_cpu_s()
            subprocess.run(command, capture_output=True, env=env, check=True)
            startup_s[label].append(children_cpu_s() - usage_before)
            admin.flushall()
            admin.config_resetstat()
            cpu_before, usage_before = _redis_cpu_s(admin), children_cpu_s()
            started = time.perf_counter()
            command[5] = str(path)
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            elapsed = time.perf_counter() - started
            if done.returncode != 0 or json.loads(done.stdout)["written"] != n:
                raise SystemExit(f"import failed ({done.returncode}): {done.stderr[-1000:]}")
            rates[label].append(n / elapsed)
            calls = admin.info("commandstats").get("cmdstat_evalsha", {})
            script_us[label].append(calls.get("usec", 0) / n)
            redis_cpu_us[label].append((_redis_cpu_s(admin) - cpu_before) * 1e6 / n)
            process_cpu_us[label].append((children_cpu_s() - usage_before) * 1e6 / n)
    admin.flushall()
    for label, _ in codes:
        rate = statistics.median(rates[label])
        print(f"  {label}: median {rate:,.0f}/s ({', '.join(f'{r:,.0f}' for r in rates[label])}); "
              f"per definition (median): write.lua inside Redis "
              f"{statistics.median(script_us[label]):.1f} us (commandstats), redis-server CPU "
              f"{statistics.median(redis_cpu_us[label]):.1f} us, the process's CPU "
              f"{statistics.median(process_cpu_us[label]):.1f} us; a one-line import's CPU "
              f"(start-up) {statistics.median(startup_s[label]):.3f} s")
        beyond_us = (statistics.median(process_cpu_us[label])
                     - statistics.median(startup_s[label]) * 1e6 / n)
        row(f"{label}: `schedules import --jsonl` of {n:,}", f"{rate:,.0f}/s",
            None if label == "before" else rate >= 40_000)
        row(f"{label}: write.lua inside Redis per definition of that import",
            f"{statistics.median(script_us[label]):.1f} us", None)
        row(f"{label}: the process's CPU per definition beyond its start-up",
            f"{beyond_us:.1f} us", None)


def bench_startup(server: RedisServer, runs: int, work: Path) -> None:
    print("\n== what a fresh nothing-due run-once is made of (wall and CPU medians, in turns)")
    admin = redis.Redis.from_url(server.url)
    admin.flushall()
    Engine(client=admin).run(config=None)  # an empty store: nothing due, its checks done
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIQBEAT_")}
    env.update(PYTHONPATH=str(ROOT / "lib"), KIQBEAT_REDIS_URL=server.url)
    run_once = [sys.executable, "-m", "kiqbeat", "run-once", "--json"]
    # As run-once loads it: the collector paused, what is loaded frozen at exit (cli.main).
    redis_alone = ("import gc; gc.disable(); import kiqbeat.deferred as d; d.defer_unused(); "
                   "import redis; gc.freeze()")
    _turns(runs, {"run-once, nothing due": (run_once, env),
                  "python -c pass": ([sys.executable, "-c", "pass"], env),
                  "python -S -c pass": ([sys.executable, "-S", "-c", "pass"], env),
                  "python -I -c pass": ([sys.executable, "-I", "-c", "pass"], env),
                  "redis-py's import alone": ([sys.executable, "-c", redis_alone], env)})
    # The image's case: this interpreter's standard library copied without bytecode, and a
    # second copy compiled (compileall, as infra/Dockerfile does); kiqbeat's and redis-py's
    # modules compiled in both, as pip leaves them.
    stdlib = Path(sysconfig.get_path("stdlib"))
    homes = {}
    for label in ("without", "with"):
        home = work / f"home-{label}"
        shutil.copytree(stdlib, home / "lib" / stdlib.name, ignore=shutil.ignore_patterns(
            "__pycache__", "site-packages", "test", "tests", "idle_test"))
        if label == "with":
            subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0",
                            str(home / "lib" / stdlib.name)], check=True,
                           stdout=subprocess.DEVNULL)
        homes[label] = {**env, "PYTHONHOME": str(home), "PYTHONDONTWRITEBYTECODE": "1",
                        "PYTHONPATH": os.pathsep.join([str(ROOT / "lib"),
                                                       sysconfig.get_path("purelib")])}
    base = [getattr(sys, "_base_executable", sys.executable), *run_once[1:]]
    _turns(runs, {"run-once, the image's stdlib without .pyc": (base, homes["without"]),
                  "run-once, the image's stdlib compiled": (base, homes["with"])})
    admin.close()


def _turns(runs: int, commands: dict[str, tuple[list[str], dict[str, str]]]) -> None:
    """Each command `runs` times, the commands in turns; their wall and CPU medians."""
    walls: dict[str, list[float]] = {label: [] for label in commands}
    cpus: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(runs):
        for label, (command, env) in commands.items():
            cpu, started = children_cpu_s(), time.perf_counter()
            subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=True)
            walls[label].append(time.perf_counter() - started)
            cpus[label].append(children_cpu_s() - cpu)
    for label in commands:
        wall, cpu = statistics.median(walls[label]), statistics.median(cpus[label])
        print(f"  {label}: wall {wall:.3f} s ({_listed(walls[label])}), CPU {cpu:.3f} s")
        row(f"{label}, CPU", f"median {cpu:.3f} s", None)


def _redis_cpu_s(admin: redis.Redis) -> float:
    cpu = admin.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def imports_of(stderr: str) -> tuple[int, float]:
    """How many modules a `-X importtime` process imported, and their own time in ms."""
    selves = [int(text.split("|")[0].split(":")[1]) for text in stderr.splitlines()
              if text.startswith("import time:") and text.split("|")[0].split(":")[1].strip()
              .isdigit()]
    return len(selves), sum(selves) / 1000


def _listed(times: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--store-size", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", metavar="REV", help="also time the code of git REV")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--skip-store", action="store_true")
    parser.add_argument("--all-due", type=int, default=10_000,
                        help="schedules all due for section 3 (0: skip it)")
    parser.add_argument("--import-jsonl", type=int, default=0,
                        help="schedules for section 4 (0: skip it)")
    parser.add_argument("--startup", action="store_true",
                        help="section 5: the interpreter's and redis-py's shares, the image's "
                             "standard library with and without bytecode")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiqbeat-cold-") as tmp, RedisServer() as server:
        work = Path(tmp)
        admin = redis.Redis.from_url(server.url)
        before = code_of(args.before, work) if args.before else None
        compiled(ROOT / "lib")
        if args.size:
            bench_document(server, admin, args.size, args.runs, before, work)
        if not args.skip_store and args.store_size:
            bench_store(server, admin, args.store_size, args.runs, args.profile, before, work)
        if args.all_due:
            bench_all_due(server, admin, args.all_due, args.runs, before)
        if args.import_jsonl:
            bench_import_jsonl(server, admin, args.import_jsonl, args.runs, before, work)
        if args.startup:
            bench_startup(server, args.runs, work)
        admin.close()
    print(f"\n{'figure':<66} {'measured':<34} target (1 s; 0.3 s, 0.2 s, 3x, 40,000/s)")
    for what, measured, verdict in ROWS:
        print(f"{what:<66} {measured:<34} {verdict}")


if __name__ == "__main__":
    main()
