"""kiqbeat schedule store benchmarks (issue 18's targets): prints figures, never asserts them.

Run: .venv/bin/python bench/store.py [--size 1000000] [--minutes 30] [--before REV] [--profile]

One run against one private redis-server (free loopback port, `save ""`, `appendonly no`,
no maxmemory) gives every figure, then a table saying which target is met. With `--before
REV` (e.g. the previous release's commit) every section first runs on the code of REV (its
`lib` and its own bench, from `git archive`, in a new process), and the table prints its
figures beside: the gain is a ratio measured in the same run, not a claim.

1. 10,000 schedules all due: jobs/s end to end, beside redis-benchmark's pipelined LPUSH
   of job-sized values and push.lua's own Redis-side time per job (SLOWLOG); nothing due.
2. 100,000 schedules from one document, ~1 % due each minute: per-invocation time with
   the document already applied, and the one-time costs of applying it and a 1 % change;
   then fresh `kiqbeat run-once` processes on the same document as a file, unchanged.
3. `--size` schedules (default 1,000,000; 5 zones; 60 % hourly `M * * * *`, 40 % daily
   `M H * * *`, M and H spread, so ~1.03 % fire each minute): bulk import through
   `kiqbeat schedules import --jsonl` (a new process, at most 200,000 schedules; then
   flushed) and through `Store.import_definitions`, registering them all (the invocations
   right after the import: every schedule is "plan me", and each invocation stops at its
   deadline and the next goes on), `--minutes` invocations a simulated minute apart, fresh
   run-once processes, Redis per-call latency over the whole section (INFO latencystats for
   the 99th percentile of script calls, SLOWLOG for the longest call), peak Python memory
   of an invocation, nothing due.
4. `--memory-size` schedules firing every minute, 12 replayed minutes: Redis memory per
   schedule once every history is full (the default 10), and with history off.

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

import kiqbeat
from kiqbeat import engine as engine_module
from kiqbeat.core.limits import DEFAULT_HISTORY, MAX_PARSED_DEFINITIONS
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.demo.server import RedisServer, redis_server_path
from kiqbeat.document import parse_config
from kiqbeat.engine import Document, Engine
from kiqbeat.errors import DeadlineError
from kiqbeat.redis import definitions, keys, pushes, scripts
from kiqbeat.redis.side import RedisSide
from kiqbeat.settings import Settings
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
        """Time `owner.attr` as `label`; a step this code does not have is left out (the
        code of `--before` may name its steps otherwise)."""
        original = getattr(owner, attr, None)
        if original is None:
            return
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
# Pushes overlap planning (redis/pushes.py Pusher): encoding a call, and waiting for the
# reply of the one in flight (what Redis did not finish while Python planned), apart.
SPLIT.wrap(pushes, "_push_args", "push: encode")
SPLIT.wrap(getattr(scripts, "Pending", None), "result", "push: wait")
SPLIT.wrap(RedisSide, "push", "push")  # the code of --before pushes a plan in one step
SPLIT.wrap(Engine, "_apply", "apply document")
SPLIT.wrap(Store, "check", "validate")
SPLIT.wrap(RedisSide, "write", "redis write")
# An import sends each write call and reads its reply after checking the next call's
# definitions: its Redis time is the packing and sending, and the waits not hidden.
SPLIT.wrap(RedisSide, "start_write", "redis write")
SPLIT.wrap(getattr(definitions, "StartedWrite", None), "finish", "redis write")
STEPS = ("read_due", "parse+validate", "plan", "push", "push: encode", "push: wait")


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
    key: str  # the same figure in another run (`--before`): labels carry measured numbers
    what: str
    measured: str
    target: str
    met: bool | None  # None: no target, for information

    def verdict(self) -> str:
        return "-" if self.met is None else ("met" if self.met else "NOT MET")


ROWS: list[Row] = []


def row(key: str, what: str, measured: str, target: str = "", met: bool | None = None) -> None:
    ROWS.append(Row(key, what, measured, target or "(information)", met))


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


# ---------------------------------------------------------------------------- fresh processes


def code_lib() -> Path:
    """The `lib` directory of the kiqbeat measured (this tree's, or `--before`'s copy)."""
    return Path(kiqbeat.__file__).resolve().parents[1]


def write_document(path: Path, n: int) -> None:
    """A YAML document of the n bench schedules, each a flow mapping on one line."""
    with path.open("w") as out:
        out.write("missed_jobs_window: 1h\nschedules:\n")
        for name, data in definitions(n):
            out.write(f"  {name}: {json.dumps(data)}\n")


def run_once(lib: Path, url: str, at: datetime, document: Path | None,
             *python_flags: str) -> tuple[float, dict[str, Any], str]:
    """One fresh `kiqbeat run-once` process replaying `at`: its wall time (interpreter
    start-up included), its JSON report and its stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIQBEAT_")}
    env.update(PYTHONPATH=str(lib), KIQBEAT_REDIS_URL=url, KIQBEAT_ALLOW_REPLAY="1")
    command = [sys.executable, *python_flags, "-m", "kiqbeat", "run-once", "--json",
               "--now", at.isoformat(), "--deadline", "600s"]
    if document is not None:
        command += ["--config", str(document)]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"run-once failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed, json.loads(done.stdout), done.stderr


def cold_runs(lib: Path, url: str, first: datetime, runs: int, document: Path | None = None
              ) -> list[tuple[float, dict[str, Any]]]:
    """`runs` fresh processes, a replayed minute apart from `first` on."""
    return [run_once(lib, url, first + timedelta(minutes=k), document)[:2]
            for k in range(runs)]


def script_p99_ms(admin: redis.Redis) -> float | None:
    """The 99th percentile of script calls (EVALSHA, EVAL, FCALL) since CONFIG RESETSTAT,
    from INFO latencystats (Redis 7+): the largest of the kinds', in ms."""
    try:
        info = admin.info("latencystats")
    except redis.ResponseError:
        return None
    found = []
    for kind in ("evalsha", "eval", "fcall"):
        stats = info.get(f"latency_percentiles_usec_{kind}")
        if isinstance(stats, dict) and "p99" in stats:
            found.append(float(stats["p99"]))
        elif isinstance(stats, str):
            parts = dict(p.split("=") for p in stats.split(","))
            found.append(float(parts["p99"]))
    return max(found) / 1000 if found else None


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
    row(f"idle {n}: round trips", f"nothing due, {n:,} schedules: round trips", f"{trips}",
        "<= 1", trips <= 1)
    row(f"idle {n}: time", f"nothing due, {n:,} schedules: time (median of {len(runs)})",
        f"{ms(statistics.median(times))} (max {ms(max(times))})")


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
    row("all due: rate", f"{n:,} all due, warm: jobs/s end to end (best of 3)",
        f"{best:,.0f} (median {statistics.median(rates):,.0f})", ">= 100,000",
        best >= 100_000)
    row("all due: ratio", f"{n:,} all due: ratio to redis-benchmark -P 64 LPUSH (same run)",
        f"{best / baseline:.3f} (LPUSH {baseline:,.0f}/s)", ">= 0.18", best / baseline >= 0.18)
    row("all due: push us/job", f"{n:,} all due: push.lua's own time in Redis per job",
        f"{push_us:.2f} us")
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
    row("document: warm", f"document of {n:,}, ~{due:,.0f} due: warm invocation (median of "
        f"{minutes})", f"{ms(statistics.median(times))} (max {ms(max(times))})", "<= 30 ms",
        statistics.median(times) <= 0.030)
    row("document: first apply", f"document of {n:,}: first apply (one-time)",
        f"{apply_s:.2f} s to apply; {first.seconds:.2f} s the whole first invocation")
    row("document: change", f"document of {n:,}: a 1 % change (diff)",
        f"{diff_apply_s:.2f} s to apply; {diff.seconds:.2f} s the whole invocation")
    print(f"  nothing due, document of {n:,}, {len(idle_runs)} invocations: round trips "
          f"{max(r.report.round_trips for r in idle_runs)}, time median "
          f"{ms(statistics.median(idle_times))}, max {ms(max(idle_times))}")
    idle_trips = max(r.report.round_trips for r in idle_runs)
    row("document: nothing due", f"document of {n:,}: nothing due (median of {len(idle_runs)})",
        f"{ms(statistics.median(idle_times))}, {idle_trips} round trip(s)", "1 round trip",
        idle_trips <= 1)
    client.close()


def bench_import_cli(server: RedisServer, admin: redis.Redis, n: int) -> None:
    """`kiqbeat schedules import FILE --jsonl`, timed as a user runs it (a new process)."""
    if importlib.util.find_spec("kiqbeat.entrypoints.schedules") is None:
        print("  `kiqbeat schedules import`: skipped (lib/kiqbeat/entrypoints/schedules.py "
              "does not exist yet)")
        row("import: cli", "`kiqbeat schedules import`",
            "skipped: no lib/kiqbeat/entrypoints/schedules.py")
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
        row("import: cli", "`kiqbeat schedules import --jsonl`", "failed", ">= 40,000/s",
            False)
        return
    print(f"  `kiqbeat schedules import FILE --jsonl` ({size_mb:.0f} MB, a new process): "
          f"{n / elapsed:,.0f} schedules/s ({elapsed:.1f} s)")
    row("import: cli", f"import {n:,} via `kiqbeat schedules import --jsonl` (a new process)",
        f"{n / elapsed:,.0f}/s", ">= 40,000/s", n / elapsed >= 40_000)


def bench_store(server: RedisServer, admin: redis.Redis, slowlog: SlowLog, n: int,
                minutes: int, profile: bool) -> None:
    print(f"\n== {n:,} schedules in the store (5 zones; 60 % hourly, 40 % daily)")
    bench_import_cli(server, admin, min(n, CLI_IMPORT_MAX))
    admin.flushall()
    base = used_memory(admin)
    client = redis.Redis.from_url(server.url)
    engine = Engine(client=client)
    store = engine.store()

    admin.config_resetstat()  # INFO latencystats from here: the whole run at this size
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
    row("import: api", f"import {n:,} via Store.import_definitions",
        f"{n / seconds:,.0f}/s (validation {validate_s / n * 1e6:.0f} us/def, "
        f"Redis {write_s / n * 1e6:.1f} us/def)", ">= 50,000/s", n / seconds >= 50_000)
    if profile:
        profiled("Store.check of 20,000 definitions", True,
                 lambda: [store.check(name, d) for name, d in definitions(20_000)])

    t0 = replay_start(admin, minutes + 5)
    rss_before = maxrss_mb()
    first = invoke_bulk(engine, slowlog, t0)
    rss_first = maxrss_mb() - rss_before
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
              f"{calls[-1] / 1000:.2f} ms over {len(calls)} calls; due.lua "
              f"{slow.total_us('due.lua') / sum(due):.1f} us per due entry")
    per_parse = statistics.median(r.split.get("parse+validate", 0.0) / max(1, r.report.schedules)
                                  for r in runs)
    print(f"  parse+validate per due definition: {per_parse * 1e6:.0f} us "
          f"(the engine keeps at most {MAX_PARSED_DEFINITIONS:,} parsed)")
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

    cold = cold_runs(code_lib(), server.url, t0 + timedelta(minutes=k + 1, seconds=1), 3)
    cold_times = [c[0] for c in cold]
    print(f"  a fresh `kiqbeat run-once` process (interpreter start-up included), 3 minutes: "
          f"{', '.join(f'{c:.2f} s' for c in cold_times)} "
          f"({', '.join(str(r['schedules']) for _, r in cold)} due)")

    everything = Slow()
    for s in (import_slow, first.slow, slow):
        everything.add(s)
    everything_longest, everything_kind = everything.longest()
    p99 = script_p99_ms(admin)
    row("store: register", f"{n:,}: registering all after the import",
        f"{first.seconds:.1f} s in {first.invocations} invocations")
    row("store: median", f"{n:,}, ~{statistics.mean(due):,.0f} due/min: warm invocation, "
        f"median of {minutes}", f"{statistics.median(times):.3f} s", "<= 0.3 s",
        statistics.median(times) <= 0.3)
    row("store: max", f"{n:,}: warm invocation, max of {minutes}", f"{max(times):.3f} s",
        "<= 0.6 s", max(times) <= 0.6)
    row("store: cold", f"{n:,} in the store, no document: a fresh run-once process (max of 3)",
        f"{max(cold_times):.2f} s", "<= 1 s", max(cold_times) <= 1.0)
    row("redis: p99", f"{n:,}: Redis script calls, 99th percentile, whole run (INFO "
        "latencystats)", f"{p99:.2f} ms" if p99 is not None else "not measured", "<= 2 ms",
        None if p99 is None else p99 <= 2.0)
    row("redis: max", f"{n:,}: longest Redis call, whole run (import, first, {minutes} min; "
        "SLOWLOG)", f"{everything_longest:.2f} ms ({everything_kind})", "<= 5 ms",
        everything_longest <= 5.0)
    row("store: memory", f"{n:,}: Redis memory per schedule after {minutes} min "
        "(used_memory delta / N)", f"{mem_run / n:.0f} bytes ({mem_imported / n:.0f} after "
        "the import alone)")
    row("store: python peak", f"{n:,}: peak Python memory of an invocation (tracemalloc)",
        f"{max(peaks):.1f} MB")
    idle_rows(n, idle_runs)
    client.close()


def bench_document_cold(server: RedisServer, admin: redis.Redis, n: int) -> None:
    """Fresh `kiqbeat run-once` processes on an unchanged document file of n schedules."""
    print(f"\n== a fresh run-once process, {n:,} schedules from one unchanged document")
    admin.flushall()
    with tempfile.TemporaryDirectory(prefix="kiqbeat-bench-") as directory:
        document = Path(directory) / "schedules.yaml"
        write_document(document, n)
        t0 = replay_start(admin, 6) + timedelta(seconds=1)
        first_s, first, _ = run_once(code_lib(), server.url, t0, document)
        runs = cold_runs(code_lib(), server.url, t0 + timedelta(minutes=1), 3, document)
    times = [t for t, _ in runs]
    print(f"  the first process (applies the document, registers every schedule): "
          f"{first_s:.2f} s, {first['round_trips']} round trips; then 3 processes, a minute "
          f"apart: {', '.join(f'{t:.2f} s' for t in times)} "
          f"({', '.join(str(r['schedules']) for _, r in runs)} due, round trips "
          f"{', '.join(str(r['round_trips']) for _, r in runs)})")
    row("document: cold", f"document of {n:,}, unchanged: a fresh run-once process (max of 3)",
        f"{max(times):.2f} s", "<= 1 s", max(times) <= 1.0)


def bench_memory(server: RedisServer, admin: redis.Redis, slowlog: SlowLog, n: int) -> None:
    """Redis memory per schedule in steady state: every schedule has pushed more ticks
    than its history keeps (`* * * * *`, 12 replayed minutes), with the default history and
    with none; pushed jobs are deleted before each reading."""
    print(f"\n== Redis memory, {n:,} schedules that each pushed 12 ticks")
    client = redis.Redis.from_url(server.url)
    for history in (DEFAULT_HISTORY, 0):
        admin.flushall()
        base = used_memory(admin)
        engine = Engine(Settings(history=history), client=client)
        import_all(engine.store(), n, every_minute=True)
        imported = used_memory(admin) - base
        t0 = replay_start(admin, 14)
        invoke_bulk(engine, slowlog, t0)
        for k in range(1, 13):
            invoke(engine, slowlog, t0 + timedelta(minutes=k, seconds=1))
            drop_jobs(admin)
        steady = used_memory(admin) - base
        print(f"  history {history}: {steady / n:.0f} bytes/schedule ({imported / n:.0f} of "
              "them the definition and its due index entry, the documented protocol)")
        if history:
            row("memory: history", f"Redis memory per schedule, history of {history} full "
                f"({n:,} schedules)", f"{steady / n:.0f} bytes", "<= 450",
                steady / n <= 450)
        else:
            row("memory: no history", f"Redis memory per schedule, history off ({n:,})",
                f"{steady / n:.0f} bytes")
    client.close()


# ---------------------------------------------------------------------------- table


def print_table(rows: list[Row], before: dict[str, str] | None = None,
                before_label: str = "") -> None:
    """The targets table; with `before`, the previous code's figure of each row beside."""
    columns = ["figure", *(["before: " + before_label] if before is not None else []),
               "measured", "target", "verdict"]
    table = [[r.what, *([before.get(r.key, "-")] if before is not None else []), r.measured,
              r.target, r.verdict()] for r in rows]
    width = [max(len(c), *(len(line[k]) for line in table)) for k, c in enumerate(columns)]
    print("\n== Targets (issue 18)")
    for line in [columns, *table]:
        print("  ".join(f"{cell:<{width[k]}}" for k, cell in enumerate(line)).rstrip())
    judged = [r for r in rows if r.met is not None]
    print(f"{sum(1 for r in judged if r.met)} of {len(judged)} targets met")


def measure_before(rev: str, argv: list[str]) -> dict[str, str]:
    """Run this benchmark on the code of git revision `rev` (its `lib` and its own `bench`,
    which knows that lib's names, unpacked apart), with the same sizes, in a new process:
    each figure by row key."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="kiqbeat-before-") as directory:
        archive = subprocess.run(["git", "-C", str(root), "archive", rev, "lib", "bench"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", directory], input=archive, check=True)
        out = Path(directory) / "rows.json"
        env = {**os.environ, "PYTHONPATH": f"{directory}/lib{os.pathsep}{directory}/bench"}
        print(f"\n######## the code of {rev} (git archive), same sizes ########", flush=True)
        subprocess.run([sys.executable, f"{directory}/bench/store.py", *argv, "--json",
                        str(out)], env=env, check=True)
        print(f"######## end of {rev} ########", flush=True)
        return {r["key"]: r["measured"] for r in json.loads(out.read_text())}


def code_version() -> str:
    """The commit measured, and whether lib/ had uncommitted changes then."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False,
                              cwd=Path(__file__).resolve().parent.parent)
        return done.stdout.strip() if done.returncode == 0 else ""
    commit = git("log", "-1", "--format=%h", "--") + ", lib/ last changed by " + git(
        "log", "-1", "--format=%h %s", "--", "lib")[:90] if git("log", "-1") else "unknown"
    dirty = git("status", "--porcelain", "--", "lib")
    own = Path(__file__).resolve().parents[1] / "lib"
    if code_lib() != own:  # --before's copy: the commit above is the benchmark's, not its
        return f"the lib at {code_lib()} (not this checkout's; the benchmark script: {commit})"
    return commit + (" + uncommitted changes in lib/" if dirty else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000,
                        help="schedules in the store section (default 1,000,000); a size of 0 "
                        "skips its section")
    parser.add_argument("--minutes", type=int, default=30,
                        help="simulated minutes of invocations (default 30)")
    parser.add_argument("--document-size", type=int, default=100_000)
    parser.add_argument("--all-due-size", type=int, default=10_000)
    parser.add_argument("--memory-size", type=int, default=100_000,
                        help="schedules in the steady-state memory section (default 100,000)")
    parser.add_argument("--profile", action="store_true",
                        help="also print cProfile's top functions of a few extra steps")
    parser.add_argument("--before", metavar="REV",
                        help="also run every section on the code of git REV first (e.g. the "
                        "previous release) and print its figures beside")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    sizes = ["--size", str(args.size), "--minutes", str(args.minutes), "--document-size",
             str(args.document_size), "--all-due-size", str(args.all_due_size),
             "--memory-size", str(args.memory_size)]
    before = measure_before(args.before, sizes) if args.before else None
    redis_version = subprocess.run([redis_server_path(), "--version"], capture_output=True,
                                   text=True, check=True).stdout.split()[2]
    started = time.perf_counter()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"{platform.python_implementation()} {platform.python_version()}, "
          f"Redis {redis_version.removeprefix('v=')}, redis-py {redis.__version__}; "
          f"{datetime.now(tz=UTC):%Y-%m-%d %H:%M} UTC; load average {os.getloadavg()[0]:.1f} "
          "(other work on the machine skews every figure)")
    print(f"code: {code_version()}")
    print(f"command: bench/store.py {' '.join(sizes)}"
          f"{' --before ' + args.before if args.before else ''}"
          f"{' --profile' if args.profile else ''}")
    with RedisServer() as server:
        admin = redis.Redis.from_url(server.url)
        slowlog = SlowLog(admin)
        if args.all_due_size:
            bench_all_due(server, admin, slowlog, args.all_due_size, args.profile)
        if args.document_size:
            bench_document(server, admin, slowlog, args.document_size, args.minutes,
                           args.profile)
            bench_document_cold(server, admin, args.document_size)
        if args.size:
            bench_store(server, admin, slowlog, args.size, args.minutes, args.profile)
        if args.memory_size:
            bench_memory(server, admin, slowlog, args.memory_size)
        admin.close()
    if args.json:
        Path(args.json).write_text(json.dumps([vars(r) for r in ROWS], indent=1))
    print_table(ROWS, before, args.before or "")
    print(f"(whole run {time.perf_counter() - started:.0f} s; load average at the end "
          f"{os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()

