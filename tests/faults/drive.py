"""Driving real processes for the fault scenarios: kiqbeat invokers, loops, backfills and
redis-servers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KIQBEAT = str(Path(sys.executable).parent / "kiqbeat")


def iso(instant: datetime) -> str:
    """ISO 8601 with offset, as `--now` wants it."""
    return instant.isoformat()


@dataclass
class Invocations:
    """Exit codes and wall times of many invocations, across processes, and the jobs they
    reported pushing: shard (index, count; (0, 1) unsharded) -> schedule name -> jobs."""

    rcs: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    pushed: dict[tuple[int, int], Counter[str]] = field(default_factory=dict)


def run_invokers(
    config: Path | None, url: str, nows_per_process: Sequence[Sequence[datetime | None]],
    *, skew_s: Sequence[float] | None = None,
    shards: Sequence[tuple[int, int] | None] | None = None, timeout_s: float = 110,
) -> Invocations:
    """Start one `tests.faults.invoker` process per list of instants, all racing; collect.

    `config` None runs the store alone (no document); `shards[i]`, when given, is the shard
    (index, count) process i runs as (`--shard`)."""
    start_at = time.time() + 1.0 + 0.03 * len(nows_per_process)  # after the last one starts
    procs = []
    result = Invocations()
    try:
        for i, nows in enumerate(nows_per_process):
            shard = shards[i] if shards else None
            spec = {"config": config and str(config), "url": url, "start_at": start_at,
                    "nows": [iso(n) if n else None for n in nows],
                    "skew_s": skew_s[i] if skew_s else 0,
                    "shard": shard and f"{shard[0]}/{shard[1]}"}
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "tests.faults.invoker", json.dumps(spec)], cwd=ROOT,
                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        deadline = time.monotonic() + timeout_s
        for i, proc in enumerate(procs):
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert proc.returncode == 0, f"invoker failed ({proc.returncode}): {err[-2000:]}"
            got = json.loads(out.strip().splitlines()[-1])
            result.rcs += got["rcs"]
            result.seconds += got["seconds"]
            shard = (shards[i] if shards else None) or (0, 1)
            result.pushed.setdefault(shard, Counter()).update(got["pushed"])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    return result


def run_cli(*args: str, timeout_s: float = 60) -> tuple[int, str, str, float]:
    """Run the `kiqbeat` command; its exit code, stdout, stderr and wall time."""
    started = time.perf_counter()
    done = subprocess.run([KIQBEAT, *args], capture_output=True, text=True, timeout=timeout_s,
                          check=False)
    return done.returncode, done.stdout, done.stderr, time.perf_counter() - started


def start_backfills(config: Path | None, url: str, count: int) -> list[subprocess.Popen[str]]:
    """`count` `kiqbeat backfill --all --json` processes, started together (racing)."""
    # --yes: the scenarios' backfills push tens of thousands of ticks on purpose.
    argv = [KIQBEAT, "backfill", "--all", "--yes", "--json", "--redis-url", url]
    if config is not None:
        argv += ["--config", str(config)]
    return [subprocess.Popen(argv, cwd=ROOT, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE) for _ in range(count)]


def backfilled(procs: Sequence[subprocess.Popen[str]], timeout_s: float = 300) -> list[int]:
    """Wait for backfill processes; the ticks each says it pushed. A process that was
    SIGKILLed says nothing (0); any other failure fails the test."""
    deadline = time.monotonic() + timeout_s
    pushed = []
    for proc in procs:
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        if proc.returncode == -signal.SIGKILL:
            pushed.append(0)
            continue
        assert proc.returncode == 0, f"backfill failed ({proc.returncode}): {err[-2000:]}"
        pushed.append(int(json.loads(out)["pushed"]))
    return pushed


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout_s: float = 10) -> None:
    """Send `sig` and wait; SIGKILL if it does not exit in time."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def env_without_redis() -> dict[str, str]:
    """The environment minus Redis URL variables, so only --redis-url decides."""
    return {k: v for k, v in os.environ.items()
            if k not in ("KIQBEAT_REDIS_URL", "REDIS_URL")}
