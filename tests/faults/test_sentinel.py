"""Sentinel failovers during invocations: kiqbeat follows the new master, and what async
replication does to ticks pushed just before a failover, with and without `wait_replicas`.

Two invoker processes (library `run`, one sentinel client each, as a warm Lambda keeps)
replay one minute of schedule time per 50 ms while the test fails the master over. Per
invocation they record the jids their Report says were pushed. The push script pushes a
tick at most once per master history, so a jid reported twice was pushed on a master that
then lost it ("rolled back") and pushed again after the watermark rolled back with it
("re-pushed"). A re-pushed tick is a duplicate for a worker only if that worker had already
taken the job from the old master; Redis itself ends with one copy. "Lost": reported
pushed, absent at the end.
"""

from __future__ import annotations

import random
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pytest
import redis

from kiqbeat.engine import run
from kiqbeat.errors import KiqbeatError
from kiqbeat.redis.connection import connect
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import config
from tests.support.invariants import LONG, Outcome, assert_clean, check, jobs_in_redis, record

from .sentinel_support import SentinelGroup

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/redis-sentinel").exists(),
    reason="redis-sentinel is not installed (scripts/setup installs Debian's redis-sentinel)")

SCHEDULES = """
missed_jobs_window: 2d
schedules:
  a: {cron: "* * * * *", class: AWorker}
  b: {cron: "* * * * *", class: BWorker, queue: other}
  c: {cron: "*/2 * * * *", class: CWorker}
"""
WAIT = "wait_replicas: 1\nwait_timeout: 1s\n"
PERIOD_S = 0.05  # one replayed minute per 50 ms of real time
INVOKERS = 2
LAGGING_S = 0.3  # how long replication is blackholed before the master is killed


def _invoker(url: str, text: str, t0_s: float, start_s: float, stop: str) -> list[dict[str, Any]]:
    """Invoke once per period at the replayed instant t0 + k minutes until `stop` exists."""
    cfg = config(text)
    t0 = datetime.fromtimestamp(t0_s, tz=UTC)
    records: list[dict[str, Any]] = []
    last_period = -1
    # One client for the whole run, as a warm Lambda or a `kiqbeat run` loop keeps: after a
    # failover the same client must reach the new master.
    client = connect(url)
    try:
        while not Path(stop).exists():
            period = int((time.monotonic() - start_s) / PERIOD_S)
            if period == last_period:
                time.sleep(PERIOD_S / 5)
                continue
            last_period = period
            # Replayed minutes run from a day ago and stop short of the real clock; past
            # that the invoker keeps invoking at the last minute (nothing left to push, but
            # each call still reaches the master). Invokers that fell silent there once
            # made a run of 10 kills look unrecovered: its last error was a mid-failover
            # "No master found", and no invocation followed.
            k = min(period, 24 * 60 - 1)
            began = time.perf_counter()
            entry: dict[str, Any] = {"k": k, "at": time.monotonic()}
            try:
                report = run(client, cfg, now=t0 + timedelta(minutes=k))
            except KiqbeatError as exc:
                entry |= {"error": f"{type(exc).__name__}: {exc}"}
            except redis.RedisError as exc:  # would be a bug: kiqbeat should wrap these
                entry |= {"error": f"raw {type(exc).__name__}: {exc}", "raw": True}
            else:
                entry |= {"jids": [j.jid for j in report.jobs],
                          "unreplicated": getattr(report, "unreplicated", 0)}
            entry["seconds"] = time.perf_counter() - began
            records.append(entry)
    finally:
        client.close()
    return records


@pytest.fixture(scope="module")
def group() -> Iterator[SentinelGroup]:
    """One Sentinel group for the module (it takes ~8 s to converge); tests flush its data."""
    with SentinelGroup() as sentinels:
        yield sentinels


def _master(group: SentinelGroup) -> redis.Redis:
    return redis.Redis(port=group.master_port(), decode_responses=True)


def _scenario(group: SentinelGroup, tmp_path: Path, text: str, faults: list[str],
              seed: int) -> tuple[Outcome, dict[str, Any]]:
    """Run the invokers while injecting `faults` ("failover" or "kill"); judge the result."""
    group.wait_settled()
    with _master(group) as master:
        master.flushall()
        master.execute_command("WAIT", 1, 2000)
        t0 = minute_floor(redis_now(master)) - timedelta(days=1)
    cfg = config(text)
    with connect(group.url) as client:
        run(client, cfg, now=t0)  # first seen at t0 by every invoker
    stop = tmp_path / "stop"
    rng = random.Random(seed)
    fault_s: list[float] = []
    start_s = time.monotonic()
    with get_context("fork").Pool(INVOKERS) as pool:
        pending = pool.starmap_async(
            _invoker, [(group.url, text, t0.timestamp(), start_s, str(stop))] * INVOKERS)
        for fault in faults:
            time.sleep(rng.uniform(0.5, 1.5))
            if fault == "failover":
                fault_s.append(group.failover())
            else:
                fault_s.append(group.kill_master(LAGGING_S if fault == "kill-lagging" else 0))
            group.wait_settled()
        settled = time.monotonic()
        # Invocations on the settled group; an invoker may still be inside an invocation
        # that began before the fault and fails slowly (reconnects, Sentinel discovery).
        time.sleep(20.0 if LONG else 3.0)
        stop.touch()
        per_process = pending.get(timeout=60)
    entries = sorted((e for records in per_process for e in records), key=lambda e: e["at"])
    last_k = max(e["k"] for e in entries)
    end = t0 + timedelta(minutes=last_k)
    with connect(group.url) as client:
        final = run(client, cfg, now=end)  # the dust has settled: catches up anything left
    reported = Counter(j for e in entries for j in e.get("jids", []))
    reported.update(j.jid for j in final.jobs)
    acked_jids = {j for e in entries if not e.get("unreplicated") for j in e.get("jids", [])}
    with _master(group) as master:
        present = {job["jid"] for job in jobs_in_redis(master)}
        re_pushed = {j for j, n in reported.items() if n > 1}
        lost = {j for j in reported if j not in present}
        errors = [e["error"] for e in entries if "error" in e]
        figures = {
            "rolled_back": len(re_pushed | lost), "re_pushed": len(re_pushed), "lost": len(lost),
            "acknowledged_rolled_back": len((re_pushed | lost) & acked_jids),
            "failed_invocations": len(errors), "raw_redis_errors": sum("raw" in e for e in entries),
            "readonly_errors": sum("READONLY" in e or "now a slave" in e or "replica" in e
                                   for e in errors),
            "unreplicated_warnings": sum(1 for e in entries if e.get("unreplicated")),
            "fault_to_new_master_s": [round(s, 2) for s in fault_s],
            "last_error": errors[-1] if errors else None,
            # Each invoker's own client reached a master again once the last fault settled;
            # None: one never did.
            "settled_to_success_s": _settled_to_success_s(per_process, settled),
        }
        outcome = check(master, cfg, after=t0, until=end, scenario="", runs=len(entries) + 2,
                        invocation_s=[e["seconds"] for e in entries])
    return outcome, figures


def _settled_to_success_s(per_process: list[list[dict[str, Any]]], settled: float) -> float | None:
    """Seconds from `settled` until the slowest invoker's first successful invocation begun
    after it, or None if an invoker has none."""
    firsts = []
    for records in per_process:
        first = min((e["at"] for e in records if e["at"] > settled and "error" not in e),
                    default=None)
        if first is None:
            return None
        firsts.append(first)
    return round(max(firsts) - settled, 2)


def _judge(outcome: Outcome, figures: dict[str, Any], scenario: str) -> None:
    """Record the scenario's figures, then assert what holds after any failover: no raw
    redis-py error escaped, invocations recovered, and each tick is in Redis once."""
    outcome.scenario = scenario
    outcome.notes = _notes(figures)
    print(figures)
    record(outcome)
    assert figures["raw_redis_errors"] == 0, figures["last_error"]
    assert figures["settled_to_success_s"] is not None, figures["last_error"]
    assert_clean(outcome)


def _notes(figures: dict[str, Any]) -> str:
    return (f"rolled back {figures['rolled_back']} (re-pushed {figures['re_pushed']}, "
            f"lost {figures['lost']}); acknowledged then rolled back "
            f"{figures['acknowledged_rolled_back']}; {figures['failed_invocations']} invocations "
            f"failed during failover ({figures['readonly_errors']} on a stale master), "
            f"{figures['unreplicated_warnings']} warned of unacknowledged replicas; new master "
            f"named after {figures['fault_to_new_master_s']} s. A re-pushed tick is a duplicate "
            "only if a worker took it from the old master before the failover. Pushes of an "
            "invocation that then failed (e.g. while waiting for replicas) are not reported, "
            "so not counted here; Redis still ends with each tick once.")


def test_sentinel_failover_is_followed_and_each_tick_ends_once(
    group: SentinelGroup, tmp_path: Path
) -> None:
    """After SENTINEL FAILOVER, invocations reach the new master (stale-master errors are
    kiqbeat errors, the next invocation succeeds), and Redis ends with each tick once."""
    outcome, figures = _scenario(group, tmp_path, SCHEDULES, ["failover"], seed=1)
    _judge(outcome, figures, "Sentinel: SENTINEL FAILOVER during invocations (2 invokers)")
    assert figures["lost"] == 0
    done_by_cli = _cli_run_once(group, tmp_path)
    assert done_by_cli.returncode == 0, done_by_cli.stderr


def _cli_run_once(group: SentinelGroup, tmp_path: Path) -> Any:
    import subprocess
    import sys

    schedule = tmp_path / "schedule.yaml"
    schedule.write_text(SCHEDULES)
    return subprocess.run([sys.executable, "-m", "kiqbeat", "run-once", "--config",
                           str(schedule), "--redis-url", group.url],
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.slow
@pytest.mark.timeout(900 if LONG else 150)
@pytest.mark.parametrize("wait", [False, True], ids=["async", "wait_replicas=1"])
@pytest.mark.parametrize("lagging", [
    True, pytest.param(False, marks=pytest.mark.skipif(not LONG, reason="KIQBEAT_LONG=1 only"))],
    ids=["replication cut 0.3 s before", "replica in step"])
@pytest.mark.skipif(shutil.which("nft") is None, reason="nft is needed to cut replication")
def test_master_killed_repeatedly_with_and_without_wait_replicas(
    group: SentinelGroup, tmp_path: Path, wait: bool, lagging: bool
) -> None:
    """SIGKILL of the master, K times: kiqbeat follows each new master and Redis ends with
    each tick once; with wait_replicas every push a replica did not acknowledge is reported
    as unreplicated, so no push reported as replicated is rolled back."""
    kills = 5 if LONG else 1
    text = (WAIT if wait else "") + SCHEDULES
    fault = "kill-lagging" if lagging else "kill"
    outcome, figures = _scenario(group, tmp_path, text, [fault] * kills, seed=2 + wait)
    mode = "wait_replicas: 1" if wait else "no WAIT (async replication)"
    lag = f", replication cut {LAGGING_S:g} s before" if lagging else ""
    _judge(outcome, figures, f"Sentinel: master SIGKILLed {kills}x during invocations{lag}, {mode}")
    if wait:
        assert figures["acknowledged_rolled_back"] == 0
