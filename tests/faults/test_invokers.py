"""Many racing invokers, real-time loops and skewed host clocks: each tick pushed exactly once."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.store import Store
from tests.support.clock import redis_now
from tests.support.engine import load_config_file
from tests.support.invariants import (
    LONG,
    WatermarkSampler,
    assert_bounded_state,
    assert_clean,
    check,
    cross_shard,
    record,
    recorded_ticks,
    shard_of,
)
from tests.support.processes import catches, wait_for

from .drive import KIQBEAT, ROOT, backfilled, run_cli, run_invokers, start_backfills, stop

# Every minute, every five, a fixed-time and a wildcard zoned cron around New York's
# fall-back night (05:xx UTC is 01:xx EDT, 06:xx UTC is 01:xx EST), and seconds with lookahead.
MIXED_SCHEDULES = {
    "minutely": '{cron: "* * * * *", class: MinuteJob}',
    "five": '{cron: "*/5 * * * *", class: FiveJob, queue: reports}',
    "ny_fixed": '{cron: "30 1 * * *", tz: America/New_York, class: NightlyJob}',
    "ny_wild": '{cron: "*/20 1 * * * America/New_York", class: NightOwlJob}',
    "seconds": '{cron: "*/20 * * * * *", class: FastJob, queue: fast, lookahead: 30s}',
}


def _mixed(suffixes: tuple[str, ...]) -> str:
    """The document of MIXED_SCHEDULES, each once per name suffix."""
    return "missed_jobs_window: 24h\nschedules:\n" + "".join(
        f"  {name}{suffix}: {spec}\n" for suffix in suffixes
        for name, spec in MIXED_SCHEDULES.items())


MIXED = _mixed(("",))
# Three copies of each: with 3 shards (CRC-32 of the name) 6, 6 and 3 schedules, a
# lookahead one in every shard.
SHARDED_MIXED = _mixed(("_p", "_q", "_r"))
FALL_BACK_START = datetime(2025, 11, 2, 4, 0, tzinfo=UTC)


def _walks(
    start: datetime, end: datetime, processes: int, steps: int, rng: random.Random
) -> list[list[datetime]]:
    """Per process, `steps` instants walking (start, end] in order, each jittered ±1 step."""
    span = (end - start) / steps
    walks = []
    for _ in range(processes):
        nows = [min(end, max(start + timedelta(seconds=1),
                             start + span * (k + rng.uniform(0, 2)))) for k in range(steps)]
        walks.append(sorted(nows))
    return walks


def _run_once(path: Path, url: str, shard: tuple[int, int], now: datetime) -> float:
    """One `kiqbeat run-once` of `shard` (no --shard when unsharded); its wall time."""
    argv = ["run-once", "--config", str(path), "--redis-url", url, "--now", now.isoformat()]
    if shard[1] > 1:
        argv += ["--shard", f"{shard[0]}/{shard[1]}"]
    rc, _, err, took = run_cli(*argv)
    assert rc == 0, err
    return took


@pytest.mark.timeout(360 if LONG else 180)
@pytest.mark.parametrize(("per_shard", "shards"), [
    pytest.param(50, 1, id="unsharded"),
    pytest.param(10 if LONG else 4, 3, id="3-shards"),
])
def test_concurrent_invokers_push_each_tick_exactly_once(
    redis_url: str, client: redis.Redis, config_file: Callable[[str], Path],
    per_shard: int, shards: int,
) -> None:
    """Processes replaying a DST night at random offsets, racing (with 3 shards, several per
    shard and every shard at once): every tick once, each by its own shard's invocations."""
    path = config_file(MIXED if shards == 1 else SHARDED_MIXED)
    cfg = load_config_file(path)
    names = [s.name for s in cfg.schedules]
    assert {shard_of(name, shards) for name in names} == set(range(shards))  # none idle
    minutes = 24 * 60 if LONG else 240
    start, end = FALL_BACK_START, FALL_BACK_START + timedelta(minutes=minutes)
    steps = 200 if LONG else 40
    own = [(index, shards) for index in range(shards)]
    if shards > 1:  # a sharded deployment's one-time step (invocations never record N)
        Store(client, shards=shards).reindex()
    seed_s = [_run_once(path, redis_url, shard, start) for shard in own]
    processes = [shard for shard in own for _ in range(per_shard)]
    random.Random(7).shuffle(processes)  # shards' processes start interleaved
    with WatermarkSampler(redis_url) as sampler:
        done = run_invokers(path, redis_url,
                            _walks(start, end, len(processes), steps, random.Random(6)),
                            shards=processes if shards > 1 else None,
                            timeout_s=300 if LONG else 110)
    # Walks stop anywhere in the last step; one more invocation at the end closes the period.
    last_s = [_run_once(path, redis_url, shard, end) for shard in own]
    assert set(done.rcs) == {0}
    strays = cross_shard(done.pushed)
    scenario = ("50 concurrent invokers" if shards == 1 else
                f"{len(processes)} concurrent invokers, {shards} shards ({per_shard} per shard)")
    outcome = check(client, cfg, after=start, until=end, scenario=scenario,
                    runs=len(done.rcs) + 2 * shards,
                    invocation_s=[*seed_s, *done.seconds, *last_s],
                    watermark_regressions=sampler.regressions, cross_shard=len(strays),
                    notes=f"{minutes} simulated minutes over New York's fall-back night, "
                          f"{len(names)} schedules, {steps} invocations per process, "
                          f"{sampler.samples} watermark samples"
                          + (f"; {'; '.join(strays[:5])}" if strays else ""))
    record(outcome)
    assert_clean(outcome)
    assert outcome.expected > minutes  # the period really had ticks
    assert_bounded_state(client, len(names), shards=shards)
    # The racing processes pushed something in every shard (the race was not left to the
    # seeding and closing runs).
    assert {shard for shard, pushed in done.pushed.items() if pushed} == set(own)


# MIXED with a one-hour window and an every-second schedule: an outage of hours leaves
# tens of thousands of ticks recorded as missed.
OUTAGE = "missed_jobs_window: 1h\nschedules:\n" + "".join(
    f"  {name}: {spec}\n" for name, spec in MIXED_SCHEDULES.items()
) + "  every_second: {every: 1s, class: SecondJob, queue: busy}\n"


@pytest.mark.timeout(600 if LONG else 240)
def test_invokers_stopped_past_the_window_then_backfills_racing_invokers_push_each_tick_once(
    redis_url: str, client: redis.Redis, config_file: Callable[[str], Path],
) -> None:
    """Racing invokers for an hour; none for longer than the window (New York's fall-back
    night among it); the first invocation back records what it passed over; then racing
    `kiqbeat backfill --all` processes while racing invokers go on. Ticks pushed by
    invocations plus ticks backfilled are every tick since first-seen, each once, and
    nothing stays recorded."""
    path = config_file(OUTAGE)
    cfg = load_config_file(path)
    window = timedelta(seconds=cfg.missed_jobs_window_s)
    outage = timedelta(hours=24 if LONG else 4)
    processes, steps, racing = (20, 60, 4) if LONG else (6, 15, 2)
    start = FALL_BACK_START - timedelta(hours=1)
    stopped, back = start + timedelta(hours=1), start + timedelta(hours=1) + outage
    end = back + timedelta(hours=1)
    unsharded = (0, 1)
    rng = random.Random(12)
    seconds = [_run_once(path, redis_url, unsharded, start)]
    with WatermarkSampler(redis_url) as sampler:
        before = run_invokers(path, redis_url, _walks(start, stopped, processes, steps, rng))
        seconds.append(_run_once(path, redis_url, unsharded, stopped))
        seconds.append(_run_once(path, redis_url, unsharded, back))  # records the outage
        owed = recorded_ticks(client, cfg)
        assert owed and all(tick <= back - window for _, tick in owed.values())
        procs = start_backfills(path, redis_url, racing)
        try:
            after = run_invokers(path, redis_url, _walks(back, end, processes, steps, rng))
        finally:
            pushed = backfilled(procs)
        seconds.append(_run_once(path, redis_url, unsharded, end))
    rcs = before.rcs + after.rcs
    assert set(rcs) == {0}
    outcome = check(client, cfg, after=start, until=end,
                    scenario=f"invokers stopped {outage.total_seconds() / 3600:.0f} h "
                             f"(window 1 h), then {racing} racing backfills",
                    runs=len(rcs) + 4 + racing,
                    invocation_s=[*seconds, *before.seconds, *after.seconds],
                    watermark_regressions=sampler.regressions, backfilled=owed,
                    notes=f"{len(cfg.schedules)} schedules; {processes} racing invokers an hour "
                          "before and an hour after the outage, the backfills racing those "
                          f"after; backfills pushed {sorted(pushed)} ticks")
    record(outcome)
    assert_clean(outcome)
    assert outcome.backfilled == len(owed) == sum(pushed)
    assert outcome.expected > outage.total_seconds()
    assert_bounded_state(client, len(cfg.schedules))


REALTIME = """
missed_jobs_window: 1h
schedules:
  two_seconds: {cron: "*/2 * * * * *", class: TwoSecondJob, lookahead: 10s}
  minutely: {cron: "* * * * *", class: MinuteJob}
"""


def _loops(path: Path, url: str, copies: int, seconds: float, sampler_url: str,
           skew_s: list[float] | None = None) -> tuple[datetime, datetime, int, int]:
    """Run `copies` `kiqbeat run` loops for `seconds`, SIGTERM them; (start, stop, regress, n)."""
    with redis.Redis.from_url(url) as probe:
        started = redis_now(probe)
    procs: list[subprocess.Popen[str]] = []
    with WatermarkSampler(sampler_url) as sampler:
        try:
            for i in range(copies):
                argv = [KIQBEAT, "run", "--config", str(path), "--redis-url", url]
                if skew_s:
                    argv = [sys.executable, "-c", _SKEWED_RUN,
                            str(skew_s[i]), *argv[1:]]
                procs.append(subprocess.Popen(argv, cwd=ROOT, text=True,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE))
            for proc in procs:  # a loaded machine may take seconds to start one: its SIGTERM
                wait_for("the loop to catch SIGTERM",  # would kill it, not stop it (exit 0)
                         lambda pid=proc.pid: catches(pid, signal.SIGTERM), timeout_s=60)
            time.sleep(seconds)
        finally:
            for proc in procs:
                stop(proc)
        for proc in procs:
            _, err = proc.communicate()
            assert proc.returncode == 0, err[-2000:]
            assert "invocation failed" not in err, err[-2000:]
    with redis.Redis.from_url(url) as probe:
        stopped = redis_now(probe)
    return started, stopped, sampler.regressions, sampler.samples


# A child with its host clock shifted by argv[1] seconds, then the real CLI's `main`.
_SKEWED_RUN = (
    "import sys, datetime, time_machine\n"
    "from kiqbeat.entrypoints.cli import main\n"
    "skew = datetime.timedelta(seconds=float(sys.argv[1]))\n"
    "with time_machine.travel(skew, tick=True):\n"
    "    sys.exit(main(sys.argv[2:]))\n"
)


@pytest.mark.timeout(90)
def test_realtime_loops_push_each_seconds_tick_once_and_never_early(
    redis_url: str, client: redis.Redis, config_file: Callable[[str], Path]
) -> None:
    """Four `kiqbeat run` loops on the wall clock, stopped by SIGTERM: once, never early."""
    path = config_file(REALTIME)
    seconds = 60.0 if LONG else 16.0
    started, stopped, regressions, samples = _loops(path, redis_url, 4, seconds, redis_url)
    # The last loop invocation ran within ~1 s of the stop and pushed 10 s ahead; ticks up to
    # 2 s before the stop (plus the lookahead) must all be there.
    outcome = check(client, load_config_file(path), after=started,
                    until=stopped - timedelta(seconds=2), slack=timedelta(seconds=4),
                    scenario="4 real-time `kiqbeat run` loops", runs=4,
                    watermark_regressions=regressions,
                    notes=f"{seconds:.0f} s of wall clock, */2 s schedule with 10 s lookahead "
                          f"and a minutely one; {samples} watermark samples")
    record(outcome)
    assert_clean(outcome)
    assert outcome.expected >= seconds / 2 - 3


@pytest.mark.timeout(90)
@pytest.mark.parametrize("skew_min", [-10, 10])
def test_skewed_host_clocks_never_push_early(
    redis_url: str, client: redis.Redis, config_file: Callable[[str], Path], skew_min: int
) -> None:
    """Loops whose host clock is 10 minutes off: Redis TIME decides, nothing early or twice."""
    path = config_file(REALTIME)
    seconds = 30.0 if LONG else 8.0
    started, stopped, regressions, _ = _loops(
        path, redis_url, 2, seconds, redis_url, skew_s=[skew_min * 60.0, 0.0])
    cfg = load_config_file(path)
    outcome = check(client, cfg, after=started, until=stopped - timedelta(seconds=2),
                    slack=timedelta(seconds=4),
                    scenario=f"host clock {skew_min:+d} min (one of two loops)", runs=2,
                    watermark_regressions=regressions,
                    notes=f"{seconds:.0f} s; time-machine shifts the kiqbeat process's clock only")
    record(outcome)
    assert_clean(outcome)
