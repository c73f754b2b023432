"""`overlap: buffer_one` with a real Sidekiq 6.4 worker (three threads) and Kiqbeat::
Middleware, paced by the `kiqbeat run` loop on the Redis clock: a job that runs longer than
its schedule's period never runs twice at once, and the tick held meanwhile starts right
after it ends (within about a second, not at the next tick). The worker's own ledger
(tests/compat/ruby/outcome_worker.rb: each job's start and end) is the independent fact."""

from __future__ import annotations

import json
import textwrap
import threading
from collections.abc import Iterator
from itertools import pairwise

import pytest

from kiqbeat.core.payload import jid_ms
from kiqbeat.document import load_config_text
from kiqbeat.engine import Engine
from kiqbeat.entrypoints.loop import run_loop
from kiqbeat.store import Store

from .harness import on_own_redis, wait_for
from .outcome_worker import LEDGER, QUEUE, Worker

PERIOD_S = 10  # the schedule's period
# Each job sleeps this long: longer than the period, so a tick comes due while it runs (held)
# and, once a held job runs, two more (the first held, the second skipped for overlap).
JOB_S = 16
# The loop runs until this many jobs have started (the first tick's and two held ones: by then
# a tick came while one was held, skipped for overlap), about a period and two jobs.
JOBS = 3
RUN_S = 75  # ... at most
# The held tick starts this soon after the job before it ends: the loop's second, Sidekiq's
# fetch and a loaded 2-core machine's slack. Released only at the next tick instead, the
# second job would start 4 s after the first ended, the third 7.5 s after the second.
HELD_START_S = 3.5


@pytest.fixture
def worker() -> Iterator[Worker]:
    with on_own_redis(Worker) as started:
        yield started


def test_a_long_job_never_runs_twice_at_once_and_the_held_tick_starts_when_it_ends(
        worker: Worker) -> None:
    cfg = load_config_text(textwrap.dedent(f"""
        schedules:
          long: {{cron: '*/{PERIOD_S} * * * * *', class: LedgerWorker, args: [{JOB_S}],
                  queue: {QUEUE}, overlap: buffer_one, retry: false}}
    """))
    engine = Engine(client=worker.client)
    stop_loop = threading.Event()
    loop = threading.Thread(target=run_loop, args=(lambda: engine.run(cfg), stop_loop))
    loop.start()
    try:
        wait_for(f"{JOBS} jobs to start", lambda: len(_runs(worker)) >= JOBS or None, RUN_S)
    finally:
        stop_loop.set()
        loop.join(timeout=60)
    # Let the job running now end (nothing more is pushed: the loop has stopped).
    def all_ended() -> bool | None:
        return (not worker.client.llen(f"queue:{QUEUE}") and all(
            len(events) == 2 for events in _runs(worker).values())) or None
    wait_for("the last job to end", all_ended, JOB_S * 3)

    runs = _runs(worker)
    jobs = sorted((events["start"], events["end"], job_id) for job_id, events in runs.items())
    assert len(jobs) >= JOBS, jobs
    assert len({job_id for _, _, job_id in jobs}) == len(jobs)  # each once
    # Never two at once, though the worker has three threads.
    for (_, end, _), (start, _, _) in pairwise(jobs):
        assert start >= end, jobs
    # Each job is a tick's: the tick its jid names (its own jid, not a copy of another's).
    ticks = {job_id: _tick_of(worker, job_id) for _, _, job_id in jobs}
    assert all(jid_ms("long", tick) == job_id for job_id, tick in ticks.items())
    # Every job after the first was held (its tick came while the one before ran) and
    # started right after that one ended.
    for (_, end, _), (start, _, job_id) in pairwise(jobs):
        assert ticks[job_id] < end, (job_id, ticks[job_id], end)
        assert start - end <= HELD_START_S * 1000, (job_id, start - end, jobs)
    # The ticks due while one was held are recorded as skipped for overlap.
    missed = Store(worker.client).missed()
    assert missed and all(r.reason == "overlap" for r in missed), (missed, jobs)


def _runs(worker: Worker) -> dict[str, dict[str, int]]:
    """Each jid's ledger: event -> epoch ms."""
    found: dict[str, dict[str, int]] = {}
    for entry in map(json.loads, worker.client.lrange(LEDGER, 0, -1)):
        found.setdefault(entry["jid"], {})[entry["event"]] = entry["at"]
    return found


def _tick_of(worker: Worker, job_id: str) -> int:
    """The tick of `job_id` as the middleware reported it (kiqbeat_tick, epoch ms)."""
    for entry in map(json.loads, worker.client.lrange("kiqbeat:outcomes:inbox", 0, -1)):
        if entry["j"] == job_id:
            return int(entry["t"])
    record = Store(worker.client).report("long")
    return next(t.tick_ms for t in record.ticks if t.jid == job_id)
