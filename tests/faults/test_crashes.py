"""kiqbeat processes SIGKILLed at random points, mid catch-up too: a later run completes, once."""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.core.payload import jid
from kiqbeat.core.plan import MAX_JOBS_PER_CALL, to_ms
from kiqbeat.core.schedule import Config
from kiqbeat.redis import keys
from kiqbeat.store import Store
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import load_config_file
from tests.support.invariants import (
    LONG,
    WatermarkSampler,
    assert_bounded_state,
    assert_clean,
    check,
    record,
    recorded_ticks,
    shard_of,
    stored_schedules,
)
from tests.support.marks import stored_mark

from .drive import KIQBEAT, backfilled, run_cli, start_backfills

# Six hours of two every-second schedules is 43,200 ticks: 44 push calls of at most 1,000.
CATCH_UP = """
missed_jobs_window: 7h
schedules:
  every_second: {cron: "* * * * * *", class: SecondJob, queue: busy}
  also_every_second: {cron: "* * * * * *", class: OtherSecondJob}
  minutely: {cron: "* * * * *", class: MinuteJob}
"""
# The same in a store of 3 shards written through the API, without a document: one
# every-second schedule per shard (21,600 ticks, 22 push calls a round), each schedule in
# its shard's queue, so that what one shard's invocations did to the others is plain.
SHARDS = 3
SHARDED_CATCH_UP = {
    name: {"cron": cron, "class": job, "queue": f"shard{shard_of(name, SHARDS)}"}
    for name, cron, job in [("per_second", "* * * * * *", "SecondJob"),
                            ("every_second", "* * * * * *", "OtherSecondJob"),
                            ("also_every_second", "* * * * * *", "ThirdSecondJob"),
                            ("minutely", "* * * * *", "MinuteJob")]}
WINDOW = timedelta(hours=7)
ROUND = timedelta(hours=6)


def _kill_after(procs: list[subprocess.Popen[bytes]], delays: list[float]) -> int:
    """SIGKILL each process still running `delays[k]` s from now (ascending); how many."""
    began = time.monotonic()
    kills = 0
    for proc, delay in zip(procs, delays, strict=True):
        time.sleep(max(0.0, began + delay - time.monotonic()))
        if proc.poll() is None:
            proc.kill()
            kills += 1
    return kills


def _mark(client: redis.Redis, name: str) -> int:
    mark = stored_mark(client, name)
    return mark.mark_ms if mark is not None else 0


def _wait_part_way(client: redis.Redis, name: str, until: datetime,
                   procs: list[subprocess.Popen[bytes]], timeout_s: float = 10.0) -> None:
    """Return once the catch-up of `name` to `until` has begun but not finished, or all
    procs exited."""
    lower, upper = to_ms(until - ROUND), to_ms(until)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        if lower < _mark(client, name) < upper:
            return
        time.sleep(0.001)


def _others(client: redis.Redis, shard: int, shards: int) -> dict[str, object]:
    """What the other shards own: their queues' lengths, their schedules' watermarks and
    first-seen marks, their due indexes (empty when unsharded: there are no others)."""
    others = [i for i in range(shards) if i != shard]
    names = [name for name in SHARDED_CATCH_UP if shard_of(name, shards) in others]
    return {"queues": [client.llen(keys.queue("", f"shard{i}")) for i in others],
            "marks": [stored_mark(client, name) for name in names],
            "due": [client.zrange(keys.due("", (i, shards)), 0, -1, withscores=True)
                    for i in others]}


@pytest.mark.timeout(480 if LONG else 240)
@pytest.mark.parametrize("shards", [pytest.param(1, id="unsharded"),
                                    pytest.param(SHARDS, id=f"{SHARDS}-shards")])
def test_sigkill_mid_catch_up_then_a_later_run_completes_without_duplicate_or_miss(
    redis_url: str, client: redis.Redis, config_file: Callable[[str], Path], shards: int
) -> None:
    """Three racing processes of a shard per attempt, each SIGKILLed at a random instant,
    then a later run of that shard: every tick once, and (sharded, the store written without
    a document) nothing of another shard's touched."""
    assert ROUND.total_seconds() > 20 * MAX_JOBS_PER_CALL  # really several script calls
    # Sharded, each round has a series of attempts per shard: fewer attempts per series.
    rounds, attempts = (6, 6 if shards == 1 else 4) if LONG else (2, 4 if shards == 1 else 1)
    rng = random.Random(3)
    start = minute_floor(redis_now(client)) - ROUND * rounds
    base = ["run-once", "--redis-url", redis_url]
    if shards == 1:
        path = config_file(CATCH_UP)
        base += ["--config", str(path)]
        victims = {0: "every_second"}  # the schedule whose catch-up is watched, per shard
    else:
        written = Store(client, shards=shards, window_s=WINDOW.total_seconds()
                        ).import_definitions(SHARDED_CATCH_UP.items())
        assert written.written == len(SHARDED_CATCH_UP)
        base += ["--missed-jobs-window", "7h"]
        victims = {shard_of(name, shards): name for name, d in SHARDED_CATCH_UP.items()
                   if d["cron"] == "* * * * * *"}
        assert sorted(victims) == list(range(shards))  # an every-second schedule per shard

    def argv(shard: int, now: datetime) -> list[str]:
        return [*base, "--now", now.isoformat(),
                *(["--shard", f"{shard}/{shards}"] if shards > 1 else [])]

    for shard in range(shards):
        rc, _, err, _ = run_cli(*argv(shard, start))
        assert rc == 0, err
    kills = partial = tried = 0
    seconds: list[float] = []
    runs = shards
    strays: list[str] = []
    with WatermarkSampler(redis_url) as sampler:
        for r in range(1, rounds + 1):
            until = start + ROUND * r
            for shard, victim in victims.items():
                before = _others(client, shard, shards)
                for _ in range(attempts):
                    procs = [subprocess.Popen([KIQBEAT, *argv(shard, until)],
                                              stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL) for _ in range(3)]
                    runs += len(procs)
                    # Attempts alternate, counted across shards so that series of one
                    # attempt see both kinds: one watches the watermark and kills as soon as
                    # the catch-up is part-way, i.e. between two script calls; the next kills
                    # at random instants.
                    tried += 1
                    if tried % 2 == 0:
                        delays = sorted(rng.uniform(0.3, 1.5) for _ in procs)
                    else:
                        _wait_part_way(client, victim, until, procs)
                        delays = sorted(rng.uniform(0, 0.03) for _ in procs)
                    kills += _kill_after(procs, delays)
                    for proc in procs:
                        proc.wait()
                    partial += to_ms(until - ROUND) < _mark(client, victim) < to_ms(until)
                rc, _, err, took = run_cli(*argv(shard, until))
                assert rc == 0, err
                seconds.append(took)
                runs += 1
                if _others(client, shard, shards) != before:
                    strays.append(f"round {r}: shard {shard}'s invocations changed another "
                                  "shard's queue, watermarks, first-seen marks or index")
    if shards == 1:
        scenario = "SIGKILL mid catch-up (3 racing processes per attempt)"
        schedules: Config = load_config_file(path)
        detail = "two every-second schedules (43,200 ticks, 44 script calls each)"
    else:
        scenario = (f"SIGKILL mid catch-up, {shards} shards in turn (3 racing processes "
                    "of a shard per attempt)")
        schedules = stored_schedules(client, window_s=WINDOW.total_seconds())
        detail = (f"{len(victims)} every-second schedules in a store of {shards} shards "
                  "written without a document (21,600 ticks, 22 script calls each, per shard)")
    outcome = check(client, schedules, after=start, until=start + ROUND * rounds,
                    scenario=scenario, runs=runs, invocation_s=seconds,
                    watermark_regressions=sampler.regressions, cross_shard=len(strays),
                    notes=f"{rounds} catch-ups of 6 h of {detail}; {kills} processes killed; "
                          f"{partial} of {tried} attempts left a "
                          "catch-up part-done; invocation times are the completing runs"
                          + (f"; {'; '.join(strays[:5])}" if strays else ""))
    record(outcome)
    assert_clean(outcome)
    every_second = 2 if shards == 1 else len(victims)
    assert outcome.expected >= rounds * every_second * ROUND.total_seconds()
    assert_bounded_state(client, len(schedules.schedules), shards=shards)


# Two every-second schedules and a `catch_up: latest` one, whose record after an outage
# holds two ranges (older than the window; skipped by the policy).
MISSED = """
missed_jobs_window: 1h
schedules:
  every_second: {cron: "* * * * * *", class: SecondJob, queue: busy}
  also_every_second: {every: 1s, class: OtherSecondJob}
  latest: {every: 1m, class: LatestJob, catch_up: latest}
  minutely: {cron: "* * * * *", class: MinuteJob}
"""


@pytest.mark.timeout(600 if LONG else 240)
def test_backfills_sigkilled_part_way_then_run_again_push_each_missed_tick_once(
    redis_url: str, client: redis.Redis, config_file: Callable[[str], Path]
) -> None:
    """After an outage longer than the window, three racing `kiqbeat backfill --all`
    processes per attempt, SIGKILLed (as soon as the record first shrinks, or at random
    instants), then one run to completion: every tick since first-seen once, those
    recorded pushed by the backfills, nothing left recorded."""
    path = config_file(MISSED)
    cfg = load_config_file(path)
    outage = timedelta(hours=24 if LONG else 6)
    attempts = 6 if LONG else 3
    rng = random.Random(12)
    start = minute_floor(redis_now(client)) - outage - timedelta(minutes=30)
    base = ["run-once", "--config", str(path), "--redis-url", redis_url]
    for now in (start, start + outage):
        rc, _, err, _ = run_cli(*base, "--now", now.isoformat())
        assert rc == 0, err
    owed = recorded_ticks(client, cfg)
    assert len(owed) > 2 * (outage.total_seconds() - 3600)
    kills = partial = 0
    with WatermarkSampler(redis_url) as sampler:
        for attempt in range(attempts):
            recorded = client.hgetall(keys.missed(""))
            owed_now = len(recorded_ticks(client, cfg))
            procs = start_backfills(path, redis_url, 3)
            if attempt % 2 == 0:  # as soon as the first script call took ticks out
                deadline = time.monotonic() + 60
                while (client.hgetall(keys.missed("")) == recorded
                       and time.monotonic() < deadline
                       and any(p.poll() is None for p in procs)):
                    time.sleep(0.001)
                delays = [0.0, 0.0, 0.0]
            else:
                delays = sorted(rng.uniform(0.2, 2.0) for _ in procs)
            kills += _kill_after(procs, delays)
            backfilled(procs)
            partial += 0 < len(recorded_ticks(client, cfg)) < owed_now
        rc, out, err, took = run_cli("backfill", "--all", "--yes", "--json", "--config",
                                     str(path), "--redis-url", redis_url)
        assert rc == 0, err
    outcome = check(client, cfg, after=start, until=start + outage,
                    scenario="backfills SIGKILLed part-way (3 racing per attempt), then run "
                             "again", runs=3 + 3 * attempts, invocation_s=[took],
                    watermark_regressions=sampler.regressions, backfilled=owed,
                    notes=f"{outage.total_seconds() / 3600:.0f} h outage (window 1 h) of two "
                          f"every-second schedules and a catch_up: latest one; {len(owed):,} "
                          f"ticks recorded; {kills} backfill processes killed; {partial} of "
                          f"{attempts} attempts left the backfill part-done; the last run "
                          f"pushed {json.loads(out)['pushed']:,}; its time is the one shown")
    record(outcome)
    assert_clean(outcome)
    assert outcome.backfilled == len(owed)
    assert partial >= 1, "no attempt was killed part-way"
    assert_bounded_state(client, len(cfg.schedules))


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


# A run limit and an overlap rule met by a catch-up spread over many push calls.
LIMITED = """
missed_jobs_window: 2h
schedules:
  limited: {cron: "* * * * * *", class: LimitedJob, queue: limited, max_runs: 2500}
  single: {every: 1s, class: SingleJob, queue: single, overlap: skip}
"""


@pytest.mark.timeout(240)
def test_sigkilled_racing_processes_never_push_beyond_max_runs_nor_past_an_overlap_or_twice(
    redis_url: str, client: redis.Redis, config_file: Callable[[str], Path]
) -> None:
    rng = random.Random(20)
    path = config_file(LIMITED)
    start = minute_floor(redis_now(client)) - timedelta(hours=1)
    base = ["run-once", "--redis-url", redis_url, "--config", str(path)]
    rc, _, err, _ = run_cli(*base, "--now", start.isoformat())
    assert rc == 0, err
    for k in range(1, 5):  # 15 minutes (900 ticks) a round: several push calls each
        now = (start + timedelta(minutes=15 * k)).isoformat()
        procs = [subprocess.Popen([KIQBEAT, *base, "--now", now], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for _ in range(3)]
        _kill_after(procs, sorted(rng.uniform(0.2, 1.2) for _ in procs))
        for proc in procs:
            proc.wait()
        rc, _, err, _ = run_cli(*base, "--now", now)
        assert rc == 0, err
    limited = [json.loads(raw)["jid"] for raw in client.lrange(keys.queue("", "limited"), 0, -1)]
    assert len(limited) == len(set(limited)) == 2500
    assert set(limited) == {jid("limited", start + timedelta(seconds=k)) for k in range(1, 2501)}
    assert client.hget(keys.runs(""), "limited") == b"2500"
    single = client.lrange(keys.queue("", "single"), 0, -1)
    assert len(single) == 1  # no worker took it: every later tick passed over
    assert_bounded_state(client, 2)
