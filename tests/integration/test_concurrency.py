"""Many real processes invoking at once, and processes killed mid-invocation: once, no loss."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from multiprocessing import get_context
from pathlib import Path

import redis

from kiqbeat.core.cron import fire_times
from kiqbeat.core.payload import jid
from kiqbeat.engine import run
from kiqbeat.redis import scripts
from kiqbeat.redis.connection import connect
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import config, pushed_jobs

SCHEDULES = """
missed_jobs_window: 2h
schedules:
  minutely:
    cron: "* * * * *"
    class: MinuteWorker
  every_ten_seconds:
    cron: "*/10 * * * * *"
    class: TenWorker
    queue: fast
  quarter:
    cron: "*/15 * * * *"
    class: QuarterWorker
    catch_up: latest
"""

# The push script's call (the read script is an EVALSHA too).
PUSH_CALL = scripts.PUSH.sha.encode()


def _invoker(url: str, start_s: float, steps: int, seed: int) -> int:
    """One process: invoke at simulated instants start + k minutes, each with its own jitter."""
    rng = random.Random(seed)
    client = connect(url)
    cfg = config(SCHEDULES)
    from datetime import UTC, datetime

    start = datetime.fromtimestamp(start_s, tz=UTC)
    pushed = 0
    for step in range(steps):
        jitter = timedelta(seconds=rng.uniform(0, 59)) if seed % 2 else timedelta(0)
        pushed += run(client, cfg, now=start + timedelta(minutes=step) + jitter).pushed
    return pushed


def test_twenty_concurrent_processes_push_every_tick_exactly_once(redis_url: str) -> None:
    client = connect(redis_url)
    cfg = config(SCHEDULES)
    t0 = minute_floor(redis_now(client)) - timedelta(hours=1)
    run(client, cfg, now=t0)  # first seen by everyone at t0
    steps = 30
    # Half the processes invoke exactly on the minute, half at random offsets within it.
    with get_context("fork").Pool(20) as pool:
        jobs = [(redis_url, t0.timestamp(), steps, seed) for seed in range(20)]
        results = pool.starmap(_invoker, jobs)
    end = t0 + timedelta(minutes=steps)
    final = run(client, cfg, now=end)
    jobs = pushed_jobs(client)
    jids = [j["jid"] for j in jobs]
    assert len(jids) == len(set(jids)), "a tick was pushed twice"
    assert sum(results) + final.pushed == len(jids)
    for schedule in ("minutely", "every_ten_seconds"):
        cron = next(s for s in cfg.schedules if s.name == schedule).timing.split(" (")[0]
        expected = {jid(schedule, t) for t in fire_times(cron, after=t0, until=end)}
        got = {j["jid"] for j in jobs if j["jid"] in expected}
        assert got == expected, f"{schedule}: {len(expected - got)} ticks lost"
    # `latest` may skip, but never repeats and never pushes outside (t0, end].
    quarter = {jid("quarter", t) for t in fire_times("*/15 * * * *", after=t0, until=end)}
    other = [j for j in jobs if j["class"] == "QuarterWorker"]
    assert {j["jid"] for j in other} <= quarter and other


KILLABLE = textwrap.dedent("""
    import sys
    from datetime import UTC, datetime
    from kiqbeat.document import load_config_text
    from kiqbeat.redis.connection import connect
    from kiqbeat.engine import run
    cfg = load_config_text(open(sys.argv[2]).read())
    now = datetime.fromtimestamp(float(sys.argv[3]), tz=UTC)
    print("ready", flush=True)
    run(connect(sys.argv[1]), cfg, now=now)
    print("done", flush=True)
""")

CATCH_UP = """
missed_jobs_window: 3h
schedules:
  secondly:
    cron: "* * * * * *"
    class: SecondWorker
  secondly_b:
    cron: "* * * * * *"
    class: SecondWorker
  secondly_c:
    cron: "* * * * * *"
    class: SecondWorker
  minutely:
    cron: "* * * * *"
    class: MinuteWorker
"""


def test_processes_killed_mid_invocation_lose_and_repeat_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    client = connect(redis_url)
    cfg_path = tmp_path / "schedule.yaml"
    cfg_path.write_text(CATCH_UP)
    cfg = config(CATCH_UP)
    t0 = minute_floor(redis_now(client)) - timedelta(hours=2, minutes=30)
    run(client, cfg, now=t0)
    rng = random.Random(7)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    killed_mid_way = 0
    for round_ in range(6):
        now = t0 + timedelta(minutes=20 * (round_ + 1))
        argv = [sys.executable, "-c", KILLABLE, redis_url, str(cfg_path), str(now.timestamp())]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, env=env) as proc:
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"ready\n"
            time.sleep(rng.uniform(0.0, 0.15))
            proc.send_signal(signal.SIGKILL)
            killed_mid_way += proc.wait() == -signal.SIGKILL
    end = t0 + timedelta(hours=2, minutes=10)
    run(client, cfg, now=end)
    jobs = pushed_jobs(client)
    jids = [j["jid"] for j in jobs]
    assert len(jids) == len(set(jids))
    every_second = fire_times("* * * * * *", after=t0, until=end)
    expected = [jid(name, t) for name in ("secondly", "secondly_b", "secondly_c")
                for t in every_second]
    expected += [jid("minutely", t) for t in fire_times("* * * * *", after=t0, until=end)]
    assert sorted(jids) == sorted(expected)
    assert killed_mid_way >= 3, "the kills should land during invocations"


def test_a_lost_reply_after_the_script_ran_is_retried_without_a_duplicate(
    redis_url: str, redis_server: object
) -> None:
    from kiqbeat.demo.server import RedisServer

    from ..support.proxy import FaultProxy

    assert isinstance(redis_server, RedisServer)
    proxy = FaultProxy(redis_server.port)
    try:
        client = connect(proxy.url)
        cfg = config(SCHEDULES)
        t0 = minute_floor(redis_now(client)) - timedelta(minutes=30)
        run(client, cfg, now=t0)
        proxy.drop_reply_after(PUSH_CALL)
        report = run(client, cfg, now=t0 + timedelta(minutes=10))
        assert proxy.dropped == 1
        # The first call pushed the ticks; the retry found them all already pushed.
        assert report.pushed == 0 and report.already_pushed > 0
        jids = [j["jid"] for j in pushed_jobs(redis.Redis(port=redis_server.port))]
        assert len(jids) == len(set(jids)) == report.already_pushed
    finally:
        proxy.close()
