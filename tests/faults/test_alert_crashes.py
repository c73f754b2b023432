"""Racing invoker processes SIGKILLed at random instants while a schedule fails, recovers and
another goes silent (DESIGN §12): each incident's event is decided once, none is lost.

A process killed between its fold and its decision leaves the health it folded unjudged
until the schedule's next outcome (the next failure or success decides it then): the events
come at most one tick late, never twice. Outcomes are written as the worker protocol says
(docs/store.md); the invocations replay the minutes just past."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import redis

from tests.support.alerts import report_outcome
from tests.support.clock import minute_floor, redis_now

ROOT = Path(__file__).resolve().parents[2]
DOC = """
schedules:
  flaky: {cron: "* * * * *", class: F, alert_after_failures: 3}
  unread: {cron: "* * * * *", class: U, queue: nobody_reads, expect_success_within: 3m}
"""


def invokers(config: Path, url: str, now: datetime, count: int) -> list[subprocess.Popen[str]]:
    spec = {"config": str(config), "url": url, "nows": [now.isoformat()],
            "start_at": time.time() + 0.3}
    return [subprocess.Popen([sys.executable, "-m", "tests.faults.invoker", json.dumps(spec)],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(count)]


def test_sigkilled_racing_invokers_send_each_incident_once(tmp_path: Path,
                                                           redis_url: str) -> None:
    rng = random.Random(27)
    client = redis.Redis.from_url(redis_url)
    config = tmp_path / "schedule.yaml"
    config.write_text(DOC)
    m0 = minute_floor(redis_now(client)) - timedelta(minutes=16)
    kills = 0
    for k in range(0, 13):
        minute = m0 + timedelta(minutes=k)
        if k >= 2:
            previous = minute - timedelta(minutes=1)
            report_outcome(client, "flaky", previous, "failed" if k <= 6 else "succeeded")
        procs = invokers(config, redis_url, minute + timedelta(seconds=5), 3)
        time.sleep(0.3 + rng.uniform(0.2, 0.9))  # past the shared start, into the work
        for proc in procs[:rng.randint(0, 2)]:
            if proc.poll() is None:
                proc.kill()
                kills += 1
        for proc in procs:
            _out, err = proc.communicate(timeout=60)
            assert proc.returncode in (0, -9), err[-2000:]
    last = m0 + timedelta(minutes=13)
    report_outcome(client, "flaky", last - timedelta(minutes=1), "succeeded")
    for proc in invokers(config, redis_url, last + timedelta(seconds=5), 1):
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-2000:]
    events = [{k.decode(): v.decode() for k, v in f.items()}
              for _i, f in client.xrange("kiqbeat:alerts:outbox")]
    assert sorted((e["s"], e["e"]) for e in events) == [
        ("flaky", "failing"), ("flaky", "recovered"), ("unread", "silent")], (kills, events)
    assert kills > 0
