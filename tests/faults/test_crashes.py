"""kiqbeat processes SIGKILLed at random points, mid catch-up too: a later run completes, once."""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.core.plan import MAX_JOBS_PER_CALL, to_ms
from kiqbeat.document import load_config_file
from kiqbeat.redis import keys
from tests.integration.helpers import minute_floor, redis_now

from .drive import KIQBEAT, run_cli
from .harness import LONG, WatermarkSampler, assert_bounded_state, assert_clean, check, record

# Six hours of two every-second schedules is 43,200 ticks: 44 push calls of at most 1,000.
CATCH_UP = """
missed_jobs_window: 7h
schedules:
  every_second: {cron: "* * * * * *", class: SecondJob, queue: busy}
  also_every_second: {cron: "* * * * * *", class: OtherSecondJob}
  minutely: {cron: "* * * * *", class: MinuteJob}
"""
ROUND = timedelta(hours=6)


def _mark(client: redis.Redis, name: str) -> int:
    raw = client.hget(keys.watermarks(""), name)
    return int(raw) if raw is not None else 0


def _wait_part_way(client: redis.Redis, until: datetime, procs: list[subprocess.Popen[bytes]],
                   timeout_s: float = 10.0) -> None:
    """Return once the catch-up to `until` has begun but not finished, or all procs exited."""
    lower, upper = to_ms(until - ROUND), to_ms(until)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        if lower < _mark(client, "every_second") < upper:
            return
        time.sleep(0.001)


@pytest.mark.timeout(240)
def test_sigkill_mid_catch_up_then_a_later_run_completes_without_duplicate_or_miss(
    redis_url: str, client: redis.Redis, config_file: Callable[[str], Path]
) -> None:
    """Three racing processes per attempt, each SIGKILLed at a random instant: then once."""
    assert ROUND.total_seconds() > 20 * MAX_JOBS_PER_CALL  # really several script calls
    path = config_file(CATCH_UP)
    rounds, attempts = (6, 6) if LONG else (2, 4)
    rng = random.Random(3)
    start = minute_floor(redis_now(client)) - ROUND * rounds
    base = ["run-once", "--config", str(path), "--redis-url", redis_url]
    rc, _, err, _ = run_cli(*base, "--now", start.isoformat())
    assert rc == 0, err
    kills = partial = 0
    seconds: list[float] = []
    runs = 1
    with WatermarkSampler(redis_url) as sampler:
        for r in range(1, rounds + 1):
            until = start + ROUND * r
            argv = [KIQBEAT, *base, "--now", until.isoformat()]
            for attempt in range(attempts):
                procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL) for _ in range(3)]
                runs += len(procs)
                # Odd attempts: kill at random instants. Even ones: watch the watermark and
                # kill as soon as the catch-up is part-way, i.e. between two script calls.
                if attempt % 2:
                    delays = sorted(rng.uniform(0.3, 1.5) for _ in procs)
                else:
                    _wait_part_way(client, until, procs)
                    delays = sorted(rng.uniform(0, 0.03) for _ in procs)
                began = time.monotonic()
                for proc, delay in zip(procs, delays, strict=True):
                    time.sleep(max(0.0, began + delay - time.monotonic()))
                    if proc.poll() is None:
                        proc.kill()
                        kills += 1
                    proc.wait()
                partial += to_ms(until - ROUND) < _mark(client, "every_second") < to_ms(until)
            rc, _, err, took = run_cli(*base, "--now", until.isoformat())
            assert rc == 0, err
            seconds.append(took)
            runs += 1
    outcome = check(client, load_config_file(path), after=start, until=start + ROUND * rounds,
                    scenario="SIGKILL mid catch-up (3 racing processes per attempt)", runs=runs,
                    invocation_s=seconds, watermark_regressions=sampler.regressions,
                    notes=f"{rounds} catch-ups of 6 h of two every-second schedules "
                          f"(43,200 ticks, 44 script calls each); {kills} processes killed; "
                          f"{partial} of {rounds * attempts} attempts left a catch-up part-done; "
                          "invocation times are the completing runs")
    record(outcome)
    assert_clean(outcome)
    assert outcome.expected >= rounds * 43_200
    assert_bounded_state(client, 3)


def _loop(path: Path, url: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([KIQBEAT, "run", "--config", str(path), "--redis-url", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


LOOPS = """
missed_jobs_window: 1h
schedules:
  second: {cron: "* * * * * *", class: SecondJob, lookahead: 5s}
  minutely: {cron: "* * * * *", class: MinuteJob}
"""


@pytest.mark.timeout(120)
def test_sigkilled_run_loops_replaced_at_random_leave_every_tick_once(
    redis_url: str, client: redis.Redis, config_file: Callable[[str], Path]
) -> None:
    """Two `kiqbeat run` loops, one SIGKILLed and replaced every 0.3–3 s: once, never early."""
    path = config_file(LOOPS)
    rng = random.Random(5)
    seconds = 60.0 if LONG else 15.0
    began: datetime = redis_now(client)
    kills = 0
    with WatermarkSampler(redis_url) as sampler:
        loops = [_loop(path, redis_url), _loop(path, redis_url)]
        try:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                time.sleep(rng.uniform(0.3, 3.0))
                victim = rng.randrange(len(loops))
                loops[victim].kill()
                loops[victim].wait()
                kills += 1
                loops[victim] = _loop(path, redis_url)
        finally:
            for proc in loops:
                proc.kill()
                proc.wait()
    stopped = redis_now(client)
    # A killed loop may leave a second or two unpushed until the next invocation: look at
    # ticks older than 3 s only, which some surviving loop invocation has passed.
    outcome = check(client, load_config_file(path), after=began,
                    until=stopped - timedelta(seconds=3), slack=timedelta(seconds=6),
                    scenario="SIGKILLed `kiqbeat run` loops, replaced", runs=kills + 2,
                    watermark_regressions=sampler.regressions,
                    notes=f"{seconds:.0f} s, {kills} loops killed at random instants")
    record(outcome)
    assert_clean(outcome)
