"""`overlap: skip` with a real Sidekiq: the middleware kiqbeat ships (clients/ruby,
Kiqbeat::RunningMiddleware) marks a schedule's job in Redis while it runs, and only then."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime

from kiqbeat.core.payload import job_json
from kiqbeat.core.schedule import Schedule
from kiqbeat.document import load_config_text
from kiqbeat.redis import keys

from .harness import Sidekiq, wait_for


def schedule(name: str, worker: str, args: str, overlap: str) -> Schedule:
    (found,) = load_config_text(textwrap.dedent(f"""
        schedules:
          {name}: {{cron: '* * * * *', class: {worker}, args: {args}, overlap: {overlap},
                    retry: false}}
    """)).schedules
    return found


def push(sidekiq: Sidekiq, job: Schedule) -> str:
    """Push one tick's job exactly as kiqbeat builds it; its jid."""
    now = sidekiq.redis_now()
    tick = now.replace(second=0, microsecond=0)
    payload = job_json(job, tick, pushed_at=now)
    sidekiq.client.sadd("queues", "default")
    sidekiq.client.lpush("queue:default", payload)
    jid: str = json.loads(payload)["jid"]
    return jid




def test_a_skip_schedules_job_is_marked_running_while_it_runs_and_unmarked_after(
        sidekiq: Sidekiq) -> None:
    job = schedule("overlap:sleepy", "SleepingWorker", "[2]", "skip")
    jid = push(sidekiq, job)
    marker = keys.running("", "overlap:sleepy")
    wait_for("the job to start", lambda: sidekiq.started(jid) or None)
    seen = wait_for("the running marker", lambda: sidekiq.client.get(marker))
    assert seen.decode() == jid
    assert not sidekiq.finished(jid)  # still running while marked
    assert 0 < sidekiq.client.pttl(marker) <= 120_000  # the middleware's ttl: 120
    wait_for("the job to end", lambda: sidekiq.finished(jid) or None)
    wait_for("the marker to go", lambda: sidekiq.client.exists(marker) == 0 or None)


def test_a_failed_job_clears_its_marker_too(sidekiq: Sidekiq) -> None:
    job = schedule("overlap:failing", "FailingWorker", "[]", "skip")
    jid = push(sidekiq, job)
    wait_for("the job to run", lambda: sidekiq.finished(jid) or None)
    marker = keys.running("", "overlap:failing")
    wait_for("the marker to go", lambda: sidekiq.client.exists(marker) == 0 or None)
    # retry: false, so not run again (the retry set is shared with other tests' workers)
    assert not [m for m in sidekiq.client.zrange("retry", 0, -1) if jid.encode() in m]


def test_the_old_middleware_marks_any_kiqbeat_job_while_it_runs(sidekiq: Sidekiq) -> None:
    # Every job names its schedule now (the outcome protocol, docs/store.md), so
    # RunningMiddleware marks an `overlap: allow` job's run too: harmless (the push step
    # reads the marker only for `skip`), expiring, and cleared at the end.
    job = schedule("overlap:plain", "SleepingWorker", "[1]", "allow")
    jid = push(sidekiq, job)
    wait_for("the job to start", lambda: sidekiq.started(jid) or None)
    (record,) = [r for r in sidekiq.runs({jid}) if r["kind"] == "middleware"]
    assert record["job"]["kiqbeat_schedule"] == "overlap:plain"
    wait_for("the job to end", lambda: sidekiq.finished(jid) or None)
    marker = keys.running("", "overlap:plain")
    wait_for("the marker to go", lambda: sidekiq.client.exists(marker) == 0 or None)


def test_every_job_names_its_schedule_whatever_its_overlap() -> None:
    tick = datetime(2026, 3, 1, tzinfo=UTC)
    for overlap in ("skip", "allow"):
        assert '"kiqbeat_schedule":"a"' in job_json(schedule("a", "A", "[]", overlap), tick,
                                                    pushed_at=tick)
