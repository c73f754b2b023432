"""Alerts from what a real Sidekiq 6.4 worker with Kiqbeat::Middleware reports (DESIGN §10),
to a real HTTP receiver on loopback: a schedule whose job always raises yields exactly one
`failing` webhook after N failed ticks, then exactly one `recovered` once it succeeds;
`pause_after_failures` pauses it; a schedule pushing into a queue no worker reads is `silent`
once, within a minute after its deadline, while its neighbour the worker reads is not.

Invocations replay the minutes just past (the Redis clock is ahead of each); the worker runs
each pushed job at once and keeps its own ledger (tests/compat/ruby/outcome_worker.rb)."""

from __future__ import annotations

import json
import tempfile
import textwrap
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.core.payload import jid
from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text
from kiqbeat.engine import Engine
from kiqbeat.outcomes.records import read_outcomes
from kiqbeat.settings import Settings
from tests.support.receiver import Receiver, receiving
from tests.support.sidekiq import start_sidekiq

from .harness import RUBY_DIR, on_own_redis, wait_for

LEDGER = "kiqbeat-test:ledger"
SWITCH = "kiqbeat-test:switch"
QUEUE = "outcomes"


class Worker:
    """A Sidekiq process running alert_worker.rb on its own Redis."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=10)
        self.log = Path(tempfile.mkdtemp(prefix="kiqbeat-alerts-")) / "sidekiq.log"
        self.process = start_sidekiq(url, RUBY_DIR / "alert_worker.rb", self.log,
                                     "-q", QUEUE, "-c", "2")

    def ledger(self, job_id: str) -> list[str]:
        return [e["event"] for e in map(json.loads, self.client.lrange(LEDGER, 0, -1))
                if e["jid"] == job_id]

    def ran(self, name: str, tick: datetime, events: list[str]) -> None:
        """Wait until the worker's ledger shows the tick's job ran so."""
        job_id = jid(name, tick)
        wait_for(f"{name}'s job of {tick} to {events} (log: {self.log})",
                 lambda: self.ledger(job_id) == events or None, 30)

        def reported() -> bool:
            """The middleware's end entry, written after the job's end: still in the inbox,
            or already folded into the schedule's record (the invocation that pushed the
            job folds what the worker reported before the invocation ended)."""
            if any(e["j"] == job_id and e["e"] != "started" for e in map(
                    json.loads, self.client.lrange("kiqbeat:outcomes:inbox", 0, -1))):
                return True
            record, _error = read_outcomes(self.client, "", [name])[name]
            return record is not None and any(
                t.tick_ms == int(tick.timestamp() * 1000) and t.state != "running"
                for t in record.ticks)
        wait_for(f"the middleware to report {name}'s job of {tick}", reported, 30)


@pytest.fixture
def worker() -> Iterator[Worker]:
    with on_own_redis(Worker) as started:
        yield started


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as got:
        yield got


def config(text: str) -> Config:
    return load_config_text(textwrap.dedent(text))


def start_minute(worker: Worker, minutes: int) -> datetime:
    """A minute boundary far enough back that `minutes` replayed minutes stay before now."""
    seconds, _ = worker.client.time()
    now = datetime.fromtimestamp(seconds).astimezone()
    return now.replace(second=0, microsecond=0) - timedelta(minutes=minutes + 1)


def test_a_job_that_always_raises_is_failing_once_then_recovered_once(
        worker: Worker, receiver: Receiver) -> None:
    cfg = config(f"""
        schedules:
          switch: {{cron: '* * * * *', class: SwitchWorker, queue: {QUEUE}, retry: false,
                    alert_after_failures: 3}}
    """)
    engine = Engine(Settings(alert_webhook=receiver.url), client=worker.client)
    m0 = start_minute(worker, 8)
    engine.run(cfg, now=m0 + timedelta(seconds=30))  # registered
    worker.client.set(SWITCH, "fail")
    for k in range(1, 8):
        tick = m0 + timedelta(minutes=k)
        if k == 5:
            worker.client.set(SWITCH, "ok")
        engine.run(cfg, now=tick + timedelta(seconds=5))  # pushes tick k, folds tick k - 1
        worker.ran("switch", tick, ["start", "raise"] if k < 5 else ["start", "end"])
    engine.run(cfg, now=m0 + timedelta(minutes=7, seconds=30))  # folds the last one
    bodies = receiver.wait_for(2)
    assert [(b["schedule"], b["event"]) for b in bodies] == [
        ("switch", "failing"), ("switch", "recovered")]
    failing, recovered = bodies
    # Each event names the newest tick the deciding invocation knew: the third failure, or
    # the fourth when the worker reported the third only after its own invocation's fold
    # (then both are folded together); likewise the first success or a later one. What the
    # worker's own ledger says of that jid is the independent fact.
    failed = {jid("switch", m0 + timedelta(minutes=k)) for k in (3, 4)}
    succeeded = {jid("switch", m0 + timedelta(minutes=k)) for k in (5, 6, 7)}
    assert failing["jid"] in failed and worker.ledger(failing["jid"]) == ["start", "raise"]
    assert failing["error"].startswith("RuntimeError: kiqbeat test: switched to fail")
    assert recovered["jid"] in succeeded
    assert worker.ledger(recovered["jid"]) == ["start", "end"]
    assert recovered["key"] == failing["key"].replace("failing", "recovered")


def test_pause_after_failures_pauses_the_schedule_with_a_note(
        worker: Worker, receiver: Receiver) -> None:
    cfg = config(f"""
        schedules:
          switch: {{cron: '* * * * *', class: SwitchWorker, queue: {QUEUE}, retry: false,
                    pause_after_failures: 2}}
    """)
    engine = Engine(Settings(alert_webhook=receiver.url), client=worker.client)
    m0 = start_minute(worker, 6)
    engine.run(cfg, now=m0 + timedelta(seconds=30))
    worker.client.set(SWITCH, "fail")
    for k in (1, 2):
        tick = m0 + timedelta(minutes=k)
        engine.run(cfg, now=tick + timedelta(seconds=5))
        worker.ran("switch", tick, ["start", "raise"])
    # Tick 2's failure is folded by the next invocation (after it pushed tick 3), or already
    # by tick 2's own when the worker reported before that invocation's fold: tick 3 goes
    # out only if the schedule was not paused yet.
    paused_early = bool(worker.client.hexists("kiqbeat:paused", "switch"))
    report = engine.run(cfg, now=m0 + timedelta(minutes=3, seconds=5))
    record = worker.client.hget("kiqbeat:paused", "switch")
    assert record is not None and "pause_after_failures" in json.loads(record)["note"]
    later = engine.run(cfg, now=m0 + timedelta(minutes=5, seconds=5))
    assert report.pushed == (0 if paused_early else 1)
    assert later.pushed == 0  # nothing pushed once paused
    assert worker.ledger(jid("switch", m0 + timedelta(minutes=4))) == []
    assert [(b["schedule"], b["event"]) for b in receiver.wait_for(1)] == [
        ("switch", "paused")]


def test_a_queue_no_worker_reads_is_silent_once_its_neighbour_is_not(
        worker: Worker, receiver: Receiver) -> None:
    cfg = config(f"""
        schedules:
          read: {{cron: '* * * * *', class: SwitchWorker, queue: {QUEUE},
                  expect_success_within: 2m}}
          unread: {{cron: '* * * * *', class: SwitchWorker, queue: nobody_reads,
                    expect_success_within: 2m}}
    """)
    engine = Engine(Settings(alert_webhook=receiver.url), client=worker.client)
    m0 = start_minute(worker, 8)
    engine.run(cfg, now=m0 + timedelta(seconds=30))
    for k in range(1, 8):
        tick = m0 + timedelta(minutes=k)
        engine.run(cfg, now=tick + timedelta(seconds=5))
        worker.ran("read", tick, ["start", "end"])
    bodies = receiver.wait_for(1)
    assert [(b["schedule"], b["event"]) for b in bodies] == [("unread", "silent")]
    assert bodies[0]["jid"] == jid("unread", m0 + timedelta(minutes=1))
    assert worker.client.llen("queue:nobody_reads") == 7
