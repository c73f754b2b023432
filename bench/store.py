"""kiqbeat schedule store benchmarks (issue 11): prints figures (never asserts them).

Run: .venv/bin/python bench/store.py [--size 1000000] [--minutes 30] [--profile]

One run against one private redis-server (free loopback port, `save ""`, `appendonly no`,
no maxmemory) gives every figure, then a table saying which target is met:

1. 10,000 schedules all due: jobs/s end to end, beside redis-benchmark's pipelined LPUSH
   of job-sized values and push.lua's own Redis-side time per job (SLOWLOG); nothing due.
2. 100,000 schedules from one document, ~1 % due each minute: per-invocation time with
   the document already applied, and the one-time costs of applying it and a 1 % change.
3. `--size` schedules (default 1,000,000; 5 zones; 60 % hourly `M * * * *`, 40 % daily
   `M H * * *`, M and H spread, so ~1.03 % fire each minute): bulk import through
   `kiqbeat schedules import --jsonl` (a new process, at most 200,000 schedules; then
   flushed) and through
   `Store.import_definitions`, registering them all (the invocations right after the
   import: every schedule is "plan me", and each invocation stops at its deadline and the
   next goes on), `--minutes` invocations a simulated minute apart, Redis memory per
   schedule, peak Python memory of an invocation, nothing due.

The clock is replayed: `Engine.run(now=...)` may not pass the Redis clock, so each section
takes T = the Redis clock's minute less (minutes + 10 or more) minutes, registers its
schedules at T (their first-seen and watermark are T, as if installed then), and invokes
at T + k minutes + 1 s for k = 1, 2, ...: every `now` is in the Redis clock's past, and
ticks fall exactly as they would live. No mark is written by hand.

Timings wrap the engine's own steps where it looks them up (read_due, _entries = parse +
validate, plan_due, push, _apply; Store.check and write for imports). SLOWLOG is reset
before and read after each measured step (see SlowLog for the thresholds), and reset again
before INFO memory (its entries take memory). Memory figures delete pushed jobs first.
Peak Python memory is tracemalloc's peak over one invocation (allocations during it); the
registering invocations report ru_maxrss growth instead (tracemalloc would slow them).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib.util
import io
import json
import os
import platform
import pstats
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis
from bench import redis_benchmark_lpush  # bench/bench.py, beside this file

from kiqbeat import engine as engine_module
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.demo.server import RedisServer, redis_server_path
from kiqbeat.document import parse_config
from kiqbeat.engine import Document, Engine
from kiqbeat.errors import DeadlineError
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.definitions import StartedWrite
from kiqbeat.redis.side import RedisSide
from kiqbeat.store import Store

ZONES = ("UTC", "Asia/Kolkata", "Europe/Paris", "America/New_York", "Australia/Sydney")
QUEUES = 8
SCRIPT_NAMES = {scripts.DUE.sha: "due.lua", scripts.PUSH.sha: "push.lua",
                scripts.WRITE.sha: "write.lua"}
IDLE_REPEATS = 20
# The CLI import is timed on at most this many (its rate is per schedule; a million more
# would add six minutes to the run).
CLI_IMPORT_MAX = 200_000


# ---------------------------------------------------------------------------- measuring


class Split:
    """Seconds spent in named steps, by wrapping each where the engine or store looks it up."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        original = getattr(owner, attr)
        seconds = self.seconds

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                seconds[label] += time.perf_counter() - started

        setattr(owner, attr, timed)

    def take(self) -> dict[str, float]:
        """The seconds so far, then start again from zero."""
        out = dict(self.seconds)
        self.seconds.clear()
        return out


SPLIT = Split()


def _gc_timer() -> Callable[[str, dict[str, Any]], None]:
    """Counts the cyclic garbage collector's pauses as the step "gc" (inside other steps)."""
    started = [0.0]

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            SPLIT.seconds["gc"] += time.perf_counter() - started[0]
            if info.get("generation") == 2:
                SPLIT.seconds["gc (full collections)"] += 1

    return callback


gc.callbacks.append(_gc_timer())
SPLIT.wrap(RedisSide, "read_due", "read_due")
SPLIT.wrap(Engine, "_entries", "parse+validate")
SPLIT.wrap(engine_module, "plan_due", "plan")
SPLIT.wrap(RedisSide, "push", "push")
SPLIT.wrap(Engine, "_apply", "apply document")
SPLIT.wrap(Store, "check", "validate")
SPLIT.wrap(RedisSide, "write", "redis write")
# An import sends each write call and reads its reply after checking the next call's
# definitions: its Redis time is the packing and sending, and the waits not hidden.
SPLIT.wrap(RedisSide, "start_write", "redis write")
SPLIT.wrap(StartedWrite, "finish", "redis write")
STEPS = ("read_due", "parse+validate", "plan", "push")


@dataclass
class Slow:
    """What SLOWLOG saw in one measured window: every command's duration, by kind."""

    entries: list[tuple[str, int]] = field(default_factory=list)  # (kind, microseconds)

    def add(self, other: Slow) -> None:
        self.entries += other.entries

    def longest(self) -> tuple[float, str]:
        if not self.entries:
            return 0.0, "-"
        kind, micros = max(self.entries, key=lambda e: e[1])
        return micros / 1000, kind

    def total_us(self, kind: str) -> int:
        return sum(us for k, us in self.entries if k == kind)

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.entries if k == kind)


class SlowLog:
    """SLOWLOG, read and reset around each measured step.

    Redis 7 logs the commands a script calls one by one too (client address "?:0"): they are
    left out, since the script's own entry holds their time. Steps of one invocation log
    every command (slowlog-log-slower-than 0); bulk steps (an import, registering every
    schedule, applying a whole document) log those of 1 ms or more, or the scripts' millions
    of inner commands would push the scripts' own entries out of the log.
    """

    MAX_LEN = 200_000
    BULK_US = 1_000

    def __init__(self, admin: redis.Redis) -> None:
        self.admin = admin
        admin.config_set("slowlog-max-len", self.MAX_LEN)
        self.every()

    def every(self) -> None:
        self.admin.config_set("slowlog-log-slower-than", 0)
        self.admin.slowlog_reset()

    def bulk(self) -> None:
        self.admin.config_set("slowlog-log-slower-than", self.BULK_US)
        self.admin.slowlog_reset()

    def reset(self) -> None:
        self.admin.slowlog_reset()

    def read(self) -> Slow:
        raw = self.admin.slowlog_get(self.MAX_LEN)
        if len(raw) >= self.MAX_LEN:
            print("  (warning: SLOWLOG full; the oldest entries of this step were lost)")
        out = Slow()
        for entry in raw:
            if entry.get("client_address") == b"?:0":  # called by a script
                continue
            words = bytes(entry["command"]).split(b" ", 2)
            kind = words[0].decode(errors="replace").upper()
            if kind == "SLOWLOG" or (kind == "CONFIG" and b"slowlog" in words[-1]):
                continue
            if kind in ("EVALSHA", "EVAL") and len(words) > 1:
                kind = SCRIPT_NAMES.get(words[1].decode(errors="replace"), kind)
            out.entries.append((kind, int(entry["duration"])))
        self.admin.slowlog_reset()
        return out


def used_memory(admin: redis.Redis) -> int:
    admin.slowlog_reset()  # its entries hold memory too
    return int(admin.info("memory")["used_memory"])


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def redis_now(client: redis.Redis) -> datetime:
    seconds, micros = client.time()
    return datetime.fromtimestamp(seconds, tz=UTC) + timedelta(microseconds=micros)


def replay_start(client: redis.Redis, minutes: int) -> datetime:
    """T: the Redis clock's minute less `minutes` + 10, so every replayed `now` is past."""
    return redis_now(client).replace(second=0, microsecond=0) - timedelta(minutes=minutes + 10)


def drop_jobs(admin: redis.Redis) -> None:
    """Delete pushed jobs (not kiqbeat's state), so memory figures count the store alone."""
    admin.delete(*(keys.queue("", f"q{q}") for q in range(QUEUES)), keys.schedule(""),
                 keys.queues(""))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def split_line(splits: list[dict[str, float]], times: list[float]) -> str:
    """Median seconds per step over the invocations, and what is left (engine glue)."""
    parts = []
    for step in STEPS:
        parts.append(f"{step} {ms(statistics.median(s.get(step, 0.0) for s in splits))}")
    rest = statistics.median(t - sum(s.get(k, 0.0) for k in STEPS)
                             for s, t in zip(splits, times, strict=True))
    gc_s = statistics.median(s.get("gc", 0.0) for s in splits)
    full = statistics.median(s.get("gc (full collections)", 0.0) for s in splits)
    return "; ".join(parts) + f"; other {ms(rest)} (garbage collector pauses, inside the " \
        f"steps: {ms(gc_s)}, {full:.0f} full collection(s))"


@dataclass
class Row:
    what: str
    measured: str
    target: str
    met: bool | None  # None: no target, for information

    def verdict(self) -> str:
        return "-" if self.met is None else ("met" if self.met else "NOT MET")


ROWS: list[Row] = []


def row(what: str, measured: str, target: str = "", met: bool | None = None) -> None:
    ROWS.append(Row(what, measured, target or "(information)", met))


def profiled(label: str, enabled: bool, call: Callable[[], Any], top: int = 18) -> Any:
    """Run `call`, under cProfile when enabled; keeps the top functions for the end."""
    if not enabled:
        return call()
    profiler = cProfile.Profile()
    result = profiler.runcall(call)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    body = text.getvalue()
    body = body[body.find("   ncalls"):] if "   ncalls" in body else body
    print(f"\n  --- cProfile, {label} (top {top} by own time)\n{body.rstrip()}\n", flush=True)
    return result


# ---------------------------------------------------------------------------- schedules


def definition(i: int, rng: random.Random, *, every_minute: bool = False) -> dict[str, Any]:
    """Schedule i: 60 % hourly at a spread minute, 40 % daily; 5 zones; job-sized args."""
    if every_minute:
        cron = "* * * * *"
    elif i % 5 < 3:
        cron = f"{rng.randrange(60)} * * * *"
    else:
        cron = f"{rng.randrange(60)} {rng.randrange(24)} * * *"
    return {"class": "BenchWorker", "cron": cron, "tz": ZONES[i % len(ZONES)],
            "queue": f"q{i % QUEUES}", "args": [i, "some-argument", {"tenant": i % 97}]}


def definitions(n: int, *, every_minute: bool = False) -> Iterator[tuple[str, dict[str, Any]]]:
    rng = random.Random(11)
    for i in range(n):
        yield f"schedule-{i:07d}", definition(i, rng, every_minute=every_minute)


def import_all(store: Store, n: int, *, every_minute: bool = False) -> tuple[float, Any]:
    started = time.perf_counter()
    result = store.import_definitions(definitions(n, every_minute=every_minute))
    elapsed = time.perf_counter() - started
    assert result.written == n and not result.invalid and not result.refused, result
    return elapsed, result


@dataclass
class Invocation:
    seconds: float
    report: Report
    split: dict[str, float]
    slow: Slow


def invoke(engine: Engine, slowlog: SlowLog, now: datetime, config: Config | None = None
           ) -> Invocation:
    slowlog.reset()
    SPLIT.take()
    started = time.perf_counter()
    report = engine.run(config, now=now)
    elapsed = time.perf_counter() - started
    report.jobs.clear()  # as `kiqbeat run` drops each report: kept, they would slow the GC
    return Invocation(elapsed, report, SPLIT.take(), slowlog.read())


@dataclass
class Bulk:
    """A step that may take several invocations: each stops at the engine's deadline, and
    the next goes on where it stopped (DESIGN §1), all at the same replayed `now`."""

    invocations: int
    seconds: float
    split: dict[str, float]
    slow: Slow
    report: Report  # the last invocation's

    def split_text(self) -> str:
        return ", ".join(f"{k} {v:.1f} s" if k != "gc (full collections)" else f"{k} {v:.0f}"
                         for k, v in self.split.items())


def invoke_bulk(engine: Engine, slowlog: SlowLog, now: datetime,
                config: Config | None = None) -> Bulk:
    slowlog.bulk()
    SPLIT.take()
    split: dict[str, float] = defaultdict(float)
    count = 0
    started = time.perf_counter()
    while True:
        count += 1
        try:
            report = engine.run(config, now=now)
            report.jobs.clear()
            break
        except DeadlineError:
            if count >= 100:
                raise
        finally:
            for step, seconds in SPLIT.take().items():
                split[step] += seconds
    elapsed = time.perf_counter() - started
    slow = slowlog.read()
    slowlog.every()
    return Bulk(count, elapsed, dict(split), slow, report)


def idle(engine: Engine, slowlog: SlowLog, now: datetime, config: Config | None = None
         ) -> list[Invocation]:
    runs = [invoke(engine, slowlog, now, config) for _ in range(IDLE_REPEATS)]
    assert all(r.report.pushed == 0 and r.report.schedules == 0 for r in runs)
    return runs


def idle_rows(n: int, runs: list[Invocation]) -> None:
    trips = max(r.report.round_trips for r in runs)
    times = [r.seconds for r in runs]
    print(f"  nothing due, {n:,} schedules, {len(runs)} invocations: round trips {trips} "
          f"(every one), time median {ms(statistics.median(times))}, max {ms(max(times))}")
    row(f"nothing due, {n:,} schedules: round trips", f"{trips}", "<= 1", trips <= 1)
    row(f"nothing due, {n:,} schedules: time (median of {len(runs)})",
        f"{ms(statistics.median(times))} (max {ms(max(times))})", "<= 10 ms",
        statistics.median(times) <= 0.010)


# ---------------------------------------------------------------------------- sections


def bench_all_due(server: RedisServer, admin: redis.Redis, slowlog: SlowLog, n: int,
                  profile: bool) -> None:
    print(f"\n== {n:,} schedules, every one due each minute (`* * * * *`)")
    admin.flushall()
    client = redis.Redis.from_url(server.url)
    engine = Engine(client=client)  # one long-lived engine, as `kiqbeat run` keeps
    import_all(engine.store(), n, every_minute=True)
    t0 = replay_start(admin, 8)
    first = invoke_bulk(engine, slowlog, t0)
    invoke(engine, slowlog, t0 + timedelta(minutes=1, seconds=1))  # warm: caches, scripts
    runs = [invoke(engine, slowlog, t0 + timedelta(minutes=k, seconds=1)) for k in (2, 3, 4)]
    for r in runs:
        assert r.report.pushed == n, r.report.summary()
    rates = [n / r.seconds for r in runs]
    slow = Slow()
    for r in runs:
        slow.add(r.slow)
    jobs = sum(r.report.pushed for r in runs)
    push_us = slow.total_us("push.lua") / jobs
    due_us = slow.total_us("due.lua") / jobs
    last = 4
    if profile:
        last = 5
        profiled(f"one invocation, {n:,} schedules all due", True,
                 lambda: engine.run(now=t0 + timedelta(minutes=5, seconds=1)))
    idle_runs = idle(engine, slowlog, t0 + timedelta(minutes=last, seconds=30))
    drop_jobs(admin)
    baseline = redis_benchmark_lpush(server.port, 400_000)
    best = max(rates)
    print(f"  first invocation (registers {n:,}): {first.seconds:.2f} s "
          f"({first.invocations} invocation(s))")
    print(f"  warm, 3 invocations: {', '.join(f'{r:,.0f}' for r in rates)} jobs/s; "
          f"{runs[0].report.round_trips} round trips, {runs[0].report.chunks} push calls each")
    split = split_line([r.split for r in runs], [r.seconds for r in runs])
    print(f"  time split (median): {split}")
    print(f"  Redis-side (SLOWLOG): push.lua {push_us:.2f} us/job "
          f"({slow.count('push.lua')} calls, longest {slow.longest()[0]:.2f} ms); "
          f"due.lua {due_us:.2f} us/job")
    print(f"  redis-benchmark -P 64 LPUSH of 330-byte values: {baseline:,.0f}/s "
          f"({1e6 / baseline:.2f} us each); kiqbeat/LPUSH ratio {best / baseline:.3f}")
    row(f"{n:,} all due: jobs/s end to end (best of 3)",
        f"{best:,.0f} (median {statistics.median(rates):,.0f}); LPUSH -P 64 {baseline:,.0f}/s, "
        f"ratio {best / baseline:.3f}; push.lua {push_us:.2f} us/job in Redis",
        ">= 100,000", best >= 100_000)
    idle_rows(n, idle_runs)
    client.close()


def bench_document(server: RedisServer, admin: redis.Redis, slowlog: SlowLog, n: int,
                   minutes: int, profile: bool) -> None:
    print(f"\n== {n:,} schedules from one document, ~1 % due each minute")
    admin.flushall()
    schedules = dict(definitions(n))
    started = time.perf_counter()
    config = parse_config({"missed_jobs_window": "1h", "schedules": schedules},
                          source="bench-document.yaml")
    parsed_s = time.perf_counter() - started
    client = redis.Redis.from_url(server.url)
    engine = Engine(client=client)
    t0 = replay_start(admin, minutes + 2)
    first = invoke_bulk(engine, slowlog, t0, config)
    assert admin.hlen(keys.watermarks("")) == n
    apply_s = first.split.get("apply document", 0.0)
    runs = [invoke(engine, slowlog, t0 + timedelta(minutes=k, seconds=1), config)
            for k in range(1, minutes + 1)]
    assert not any(r.report.documents_applied for r in runs)
    times = [r.seconds for r in runs]
    due = statistics.mean(r.report.schedules for r in runs)
    slow = Slow()
    for r in runs:
        slow.add(r.slow)
    longest, kind = slow.longest()

    changed = dict(schedules)
    for i, name in enumerate(sorted(changed)):
        if i % 100 == 0:
            changed[name] = {**changed[name], "args": [i, "changed-argument"]}
    started = time.perf_counter()
    config2 = parse_config({"missed_jobs_window": "1h", "schedules": changed},
                           source="bench-document.yaml")
    parsed2_s = time.perf_counter() - started
    started = time.perf_counter()
    Document.of(config2)
    encode_s = time.perf_counter() - started
    k = minutes + 1
    diff = invoke_bulk(engine, slowlog, t0 + timedelta(minutes=k, seconds=1), config2)
    diff_apply_s = diff.split.get("apply document", 0.0)
    after = [invoke(engine, slowlog, t0 + timedelta(minutes=k + j, seconds=1), config2)
             for j in (1, 2)]
    k += 2
    if profile:
        k += 1
        profiled(f"one warm invocation, document of {n:,}, ~1 % due", True,
                 lambda: engine.run(config2, now=t0 + timedelta(minutes=k, seconds=1)))
    idle_runs = idle(engine, slowlog, t0 + timedelta(minutes=k, seconds=30), config2)
    idle_times = [r.seconds for r in idle_runs]
    print(f"  parse_config of the document (read + validate {n:,} schedules): {parsed_s:.2f} s "
          f"(again after the change: {parsed2_s:.2f} s)")
    print(f"  first invocation: {first.seconds:.2f} s in {first.invocations} invocation(s) "
          f"({first.split_text()}); applying the document is `apply document`; read_due "
          f"includes the first pipeline's check for sidekiq-scheduler/-cron jobs of the same "
          f"names (2 EXISTS per schedule, on each new config); longest Redis command "
          f"{first.slow.longest()[0]:.2f} ms ({first.slow.longest()[1]})")
    print(f"  warm, {minutes} invocations, {due:,.0f} due on average: median "
          f"{ms(statistics.median(times))}, max {ms(max(times))}; round trips "
          f"{statistics.median(r.report.round_trips for r in runs):.0f} (median); longest "
          f"Redis command {longest:.2f} ms ({kind})")
    print(f"  time split (median): {split_line([r.split for r in runs], times)}")
    print(f"  1 % changed ({n // 100:,} definitions): the invocation applying it "
          f"{diff.seconds:.2f} s ({diff.split_text()}), of which the diff written "
          f"{diff_apply_s:.2f} s ({diff.report.round_trips} round trips); encoding the "
          f"changed document's {n:,} definitions and digest (Document.of, measured apart) "
          f"{encode_s:.2f} s; "
          f"the next two invocations {ms(after[0].seconds)}, {ms(after[1].seconds)}")
    row(f"document of {n:,}, warm, ~{due:,.0f} due: per invocation (median of {minutes})",
        f"{ms(statistics.median(times))} (max {ms(max(times))})", "<= 50 ms",
        statistics.median(times) <= 0.050)
    row(f"document of {n:,}: first apply (one-time)",
        f"{apply_s:.2f} s to apply; {first.seconds:.2f} s the whole first invocation")
    row(f"document of {n:,}: a 1 % change (diff)",
        f"{diff_apply_s:.2f} s to apply; {diff.seconds:.2f} s the whole invocation")
    print(f"  nothing due, document of {n:,}, {len(idle_runs)} invocations: round trips "
          f"{max(r.report.round_trips for r in idle_runs)}, time median "
          f"{ms(statistics.median(idle_times))}, max {ms(max(idle_times))}")
    row(f"document of {n:,}: nothing due (median of {len(idle_runs)})",
        f"{ms(statistics.median(idle_times))}, "
        f"{max(r.report.round_trips for r in idle_runs)} round trip(s)")
    client.close()


def bench_import_cli(server: RedisServer, admin: redis.Redis, n: int) -> None:
    """`kiqbeat schedules import FILE --jsonl`, timed as a user runs it (a new process)."""
    if importlib.util.find_spec("kiqbeat.entrypoints.schedules") is None:
        print("  `kiqbeat schedules import`: skipped (lib/kiqbeat/entrypoints/schedules.py "
              "does not exist yet)")
        row("`kiqbeat schedules import`", "skipped: no lib/kiqbeat/entrypoints/schedules.py")
        return
    with tempfile.TemporaryDirectory(prefix="kiqbeat-bench-") as directory:
        path = Path(directory) / "schedules.jsonl"
        with path.open("w") as out:
            for name, data in definitions(n):
                out.write(json.dumps({"name": name, "definition": data}) + "\n")
        admin.flushall()
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "kiqbeat", "schedules", "import", str(path), "--jsonl",
             "--no-progress", "--json", "--redis-url", server.url],
            capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - started
        size_mb = path.stat().st_size / 2**20
    admin.flushall()
    written = json.loads(done.stdout)["written"] if done.returncode == 0 else 0
    if written != n:
        print(f"  `kiqbeat schedules import`: failed ({done.returncode}): {done.stderr[-500:]}")
        row("`kiqbeat schedules import --jsonl`", "failed", ">= 20,000/s", False)
        return
    print(f"  `kiqbeat schedules import FILE --jsonl` ({size_mb:.0f} MB, a new process): "
          f"{n / elapsed:,.0f} schedules/s ({elapsed:.1f} s)")
    row(f"import {n:,} via `kiqbeat schedules import --jsonl`", f"{n / elapsed:,.0f}/s",
        ">= 20,000/s", n / elapsed >= 20_000)


def bench_store(server: RedisServer, admin: redis.Redis, slowlog: SlowLog, n: int,
                minutes: int, profile: bool) -> None:
    print(f"\n== {n:,} schedules in the store (5 zones; 60 % hourly, 40 % daily)")
    bench_import_cli(server, admin, min(n, CLI_IMPORT_MAX))
    admin.flushall()
    base = used_memory(admin)
    client = redis.Redis.from_url(server.url)
    engine = Engine(client=client)
    store = engine.store()

    slowlog.bulk()
    SPLIT.take()
    seconds, _ = import_all(store, n)
    import_split = SPLIT.take()
    import_slow = slowlog.read()
    slowlog.every()
    validate_s = import_split.get("validate", 0.0)
    write_s = import_split.get("redis write", 0.0)
    mem_imported = used_memory(admin) - base
    longest, kind = import_slow.longest()
    print(f"  import: {n / seconds:,.0f} schedules/s ({seconds:.1f} s): validation "
          f"(Store.check) {validate_s:.1f} s = {validate_s / n * 1e6:.0f} us/definition; "
          f"Redis writes (pack, send, waits for replies) {write_s:.1f} s = "
          f"{write_s / n * 1e6:.1f} us/definition; other {seconds - validate_s - write_s:.1f} s; "
          f"longest Redis command {longest:.2f} ms ({kind}, "
          f"{import_slow.count('write.lua')} write.lua calls); "
          f"process ru_maxrss {maxrss_mb():.0f} MB")
    row(f"import {n:,} via Store.import_definitions",
        f"{n / seconds:,.0f}/s (validation {validate_s / n * 1e6:.0f} us/def, "
        f"Redis {write_s / n * 1e6:.1f} us/def)", ">= 20,000/s", n / seconds >= 20_000)
    if profile:
        profiled("Store.check of 20,000 definitions", True,
                 lambda: [store.check(name, d) for name, d in definitions(20_000)])

    t0 = replay_start(admin, minutes + 5)
    rss_before = maxrss_mb()
    first = invoke_bulk(engine, slowlog, t0)
    rss_first = maxrss_mb() - rss_before
    assert admin.hlen(keys.watermarks("")) == n
    longest, kind = first.slow.longest()
    print(f"  registering all {n:,} (the invocations after the import, each stopped by the "
          f"{engine.settings.deadline_s:g} s deadline but the last): {first.seconds:.1f} s in "
          f"{first.invocations} invocations ({first.split_text()}); longest Redis command "
          f"{longest:.2f} ms "
          f"({kind}); process ru_maxrss {maxrss_mb():.0f} MB (the high-water mark of the "
          f"whole run so far; +{rss_first:.0f} MB during these invocations)")
    drop_jobs(admin)
    mem_registered = used_memory(admin) - base

    runs: list[Invocation] = []
    for k in range(1, minutes + 1):
        runs.append(invoke(engine, slowlog, t0 + timedelta(minutes=k, seconds=1)))
        if k % 10 == 0:
            drop_jobs(admin)
    times = [r.seconds for r in runs]
    due = [r.report.schedules for r in runs]
    pushed = [r.report.pushed for r in runs]
    slow = Slow()
    for r in runs:
        slow.add(r.slow)
    longest, kind = slow.longest()
    print(f"  {minutes} invocations a minute apart: {statistics.mean(due):,.0f} due on average "
          f"({min(due):,}-{max(due):,}), {statistics.mean(pushed):,.0f} pushed; time median "
          f"{statistics.median(times):.3f} s, max {max(times):.3f} s; round trips median "
          f"{statistics.median(r.report.round_trips for r in runs):.0f}; longest Redis "
          f"command {longest:.2f} ms ({kind})")
    print(f"  time split (median): {split_line([r.split for r in runs], times)}")
    calls = sorted(us for kind_, us in slow.entries if kind_ == "push.lua")
    if calls:
        print(f"  push.lua in Redis (SLOWLOG): {slow.total_us('push.lua') / sum(pushed):.1f} "
              f"us/job; per call median {calls[len(calls) // 2] / 1000:.2f} ms, 99th "
              f"percentile {calls[len(calls) * 99 // 100] / 1000:.2f} ms, max "
              f"{calls[-1] / 1000:.2f} ms over {len(calls)} calls of <= 1,000 jobs; due.lua "
              f"{slow.total_us('due.lua') / sum(due):.1f} us per due entry")
    per_parse = statistics.median(r.split.get("parse+validate", 0.0) / max(1, r.report.schedules)
                                  for r in runs)
    print(f"  parse+validate per due definition: {per_parse * 1e6:.0f} us "
          f"(the engine keeps at most {engine_module.MAX_PARSED:,} parsed)")
    worst = max(runs, key=lambda r: r.seconds)
    print(f"  slowest invocation: {worst.report.summary()}")
    drop_jobs(admin)
    mem_run = used_memory(admin) - base

    peaks = []
    k = minutes
    for _ in range(3):
        k += 1
        tracemalloc.start()
        engine.run(now=t0 + timedelta(minutes=k, seconds=1))
        peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
        tracemalloc.stop()
    print(f"  peak Python memory of an invocation (tracemalloc peak, 3 more invocations): "
          f"{', '.join(f'{p:.1f}' for p in peaks)} MB")
    if profile:
        k += 1
        profiled(f"one invocation, {n:,} schedules, ~1 % due", True,
                 lambda: engine.run(now=t0 + timedelta(minutes=k, seconds=1)))
    idle_runs = idle(engine, slowlog, t0 + timedelta(minutes=k, seconds=30))
    drop_jobs(admin)
    print(f"  Redis used_memory over the empty server: {mem_imported / n:.0f} bytes/schedule "
          f"after the import (definitions + due index), {mem_registered / n:.0f} after the "
          f"first invocation (+ watermarks, first-seen), {mem_run / n:.0f} after {minutes} "
          f"minutes (pushed jobs deleted before each reading)")

    everything = Slow()
    for s in (import_slow, first.slow, slow):
        everything.add(s)
    everything_longest, everything_kind = everything.longest()
    row(f"{n:,}: registering all after the import",
        f"{first.seconds:.1f} s in {first.invocations} invocations")
    row(f"{n:,}, ~{statistics.mean(due):,.0f} due/min: per invocation median over {minutes} min",
        f"{statistics.median(times):.3f} s", "<= 1 s", statistics.median(times) <= 1.0)
    row(f"{n:,}: per invocation max over {minutes} min", f"{max(times):.3f} s", "<= 2 s",
        max(times) <= 2.0)
    row(f"{n:,}: longest Redis command or script, {minutes} min of invocations",
        f"{longest:.2f} ms ({kind})", "<= 5 ms", longest <= 5.0)
    row(f"{n:,}: longest Redis command, whole run (import, first, {minutes} min)",
        f"{everything_longest:.2f} ms ({everything_kind})", "<= 5 ms", everything_longest <= 5.0)
    row(f"{n:,}: Redis memory per schedule (used_memory delta / N)",
        f"{mem_run / n:.0f} bytes ({mem_imported / n:.0f} after import alone)", "<= 500",
        mem_run / n <= 500)
    row(f"{n:,}: peak Python memory of an invocation (tracemalloc)",
        f"{max(peaks):.1f} MB", "<= 200 MB", max(peaks) <= 200)
    idle_rows(n, idle_runs)
    client.close()


# ---------------------------------------------------------------------------- table


def print_table(rows: list[Row]) -> None:
    width = [max(len(r.what) for r in rows), max(len(r.measured) for r in rows),
             max(len(r.target) for r in rows)]
    print("\n== Targets (issue 11)")
    print(f"{'figure':<{width[0]}}  {'measured':<{width[1]}}  {'target':<{width[2]}}  verdict")
    for r in rows:
        print(f"{r.what:<{width[0]}}  {r.measured:<{width[1]}}  {r.target:<{width[2]}}  "
              f"{r.verdict()}")
    judged = [r for r in rows if r.met is not None]
    print(f"{sum(1 for r in judged if r.met)} of {len(judged)} targets met")


def code_version() -> str:
    """The commit measured, and whether lib/ had uncommitted changes then."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False,
                              cwd=Path(__file__).resolve().parent.parent)
        return done.stdout.strip() if done.returncode == 0 else ""
    commit = git("log", "-1", "--format=%h", "--") + ", lib/ last changed by " + git(
        "log", "-1", "--format=%h %s", "--", "lib")[:90] if git("log", "-1") else "unknown"
    dirty = git("status", "--porcelain", "--", "lib")
    return commit + (" + uncommitted changes in lib/" if dirty else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000,
                        help="schedules in the store section (default 1,000,000)")
    parser.add_argument("--minutes", type=int, default=30,
                        help="simulated minutes of invocations (default 30)")
    parser.add_argument("--document-size", type=int, default=100_000)
    parser.add_argument("--all-due-size", type=int, default=10_000)
    parser.add_argument("--profile", action="store_true",
                        help="also print cProfile's top functions of a few extra steps")
    args = parser.parse_args(argv)
    redis_version = subprocess.run([redis_server_path(), "--version"], capture_output=True,
                                   text=True, check=True).stdout.split()[2]
    started = time.perf_counter()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"{platform.python_implementation()} {platform.python_version()}, "
          f"Redis {redis_version.removeprefix('v=')}, redis-py {redis.__version__}; "
          f"{datetime.now(tz=UTC):%Y-%m-%d %H:%M} UTC; load average {os.getloadavg()[0]:.1f} "
          "(other work on the machine skews every figure)")
    print(f"code: {code_version()}")
    print(f"command: bench/store.py --size {args.size} --minutes {args.minutes} "
          f"--document-size {args.document_size} --all-due-size {args.all_due_size}"
          f"{' --profile' if args.profile else ''}")
    with RedisServer() as server:
        admin = redis.Redis.from_url(server.url)
        slowlog = SlowLog(admin)
        bench_all_due(server, admin, slowlog, args.all_due_size, args.profile)
        bench_document(server, admin, slowlog, args.document_size, args.minutes, args.profile)
        bench_store(server, admin, slowlog, args.size, args.minutes, args.profile)
        admin.close()
    print_table(ROWS)
    print(f"(whole run {time.perf_counter() - started:.0f} s; load average at the end "
          f"{os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()

