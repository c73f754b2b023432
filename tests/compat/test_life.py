"""Issue 20's push-step rules with a real Sidekiq (Debian's ruby-sidekiq) running the jobs.

- `jitter`: a tick's job is released by Sidekiq's own poller at tick + `jitter_offset_ms`,
  never before it, and runs once with the nominal tick's jid and `scheduled_at`.
- `overlap: skip`: while the schedule's previous job waits in its queue, and (with
  `Kiqbeat::RunningMiddleware` in the worker, tests/compat/ruby/worker.rb) while it runs, a
  tick is passed over and recorded as missed with reason `overlap`; once the job finished,
  the next tick is pushed.

Every job is pushed by `kiqbeat.engine.run`; invocations replay `now` (a past instant the
test chooses) so each decision happens at a known tick, at the moment the test picks.
"""

from __future__ import annotations

import json
import os
import textwrap
from datetime import datetime, timedelta

import pytest

from kiqbeat.core.instants import to_ms
from kiqbeat.core.lifecycle import jitter_offset_ms
from kiqbeat.core.payload import jid_ms, job_json
from kiqbeat.document import load_config_text
from kiqbeat.engine import run
from kiqbeat.entrypoints.cli import main
from kiqbeat.redis import keys

from .harness import Sidekiq, by_kind, wait_for

JITTER_S = 6
SPREAD = 12  # schedules sharing one timetable and one jitter window



def test_jittered_jobs_run_at_their_offset_instant_never_before_and_each_once(
        sidekiq: Sidekiq) -> None:
    lines = "\n".join(
        f"  jitter_{i}: {{every: 20s, jitter: {JITTER_S}s, class: RecordingWorker, "
        "include_metadata: true}" for i in range(SPREAD))
    config = load_config_text(f"schedules:\n{lines}\n")
    def boundary_after(instant: datetime) -> datetime:
        return datetime.fromtimestamp((int(instant.timestamp()) // 20 + 1) * 20,
                                      tz=instant.tzinfo)

    now = sidekiq.redis_now()
    # The next 20 s boundary at least a second away: registered before it, pushed at it,
    # one tick each (a boundary closer than that is let pass first, never jumped: the
    # registration would then owe two).
    tick = boundary_after(now)
    if tick - now < timedelta(seconds=1):
        wait_for("a 20 s boundary", lambda: sidekiq.redis_now() >= tick or None, timeout_s=5)
        now = sidekiq.redis_now()
        tick = boundary_after(now)
    first = run(sidekiq.client, config, now=now)
    assert first.pushed == 0 and first.new_schedules == SPREAD
    wait_for("the tick", lambda: sidekiq.redis_now() >= tick or None, timeout_s=25)
    report = run(sidekiq.client, config, now=tick)
    assert report.pushed == SPREAD
    tick_ms = to_ms(tick)
    release_ms = {jid_ms(f"jitter_{i}", tick_ms):
                  tick_ms + jitter_offset_ms(f"jitter_{i}", tick_ms, JITTER_S * 1000)
                  for i in range(SPREAD)}
    assert {j.jid for j in report.jobs} == set(release_ms)
    # Spread over the window, not all at its start: a job with a positive offset waits in
    # Sidekiq's schedule set, scored at its release instant.
    offsets = sorted(r - tick_ms for r in release_ms.values())
    assert offsets[-1] - offsets[0] >= 1000, f"offsets not spread: {offsets}"
    scheduled = {json.loads(m)["jid"]: s for m, s in
                 sidekiq.client.zrange("schedule", 0, -1, withscores=True)}
    for jid, release in release_ms.items():
        if release > tick_ms:
            assert scheduled[jid] == pytest.approx(release / 1000, abs=0.0005)

    records = sidekiq.wait_runs(set(release_ms), timeout_s=JITTER_S + 15)
    seen = by_kind(records, "middleware")
    performed = by_kind(records, "perform")
    for jid, release in release_ms.items():
        (record,) = seen[jid]  # once
        # Never early: Sidekiq ran it at or after its offset instant, and soon after.
        assert record["ran_at"] >= release / 1000, (jid, record["ran_at"], release)
        assert record["ran_at"] < release / 1000 + 10
        # The jid and scheduled_at stay the nominal tick's.
        assert [r["args"] for r in performed[jid]] == [[{"scheduled_at": tick_ms / 1000}]]


def sleeping(sidekiq: Sidekiq, name: str, seconds: float) -> str:
    """Occupy one of the worker's threads: a job (of no overlap schedule) that sleeps."""
    (job,) = load_config_text(textwrap.dedent(f"""
        schedules:
          {name}: {{cron: '* * * * *', class: SleepingWorker, args: [{seconds}]}}
    """)).schedules
    now = sidekiq.redis_now()
    payload = job_json(job, now.replace(second=0, microsecond=0), pushed_at=now)
    sidekiq.client.lpush("queue:default", payload)
    jid: str = json.loads(payload)["jid"]
    return jid




def queued_jids(sidekiq: Sidekiq) -> list[str]:
    return [json.loads(p)["jid"] for p in sidekiq.client.lrange("queue:default", 0, -1)]


def test_overlap_skip_passes_over_ticks_while_the_job_waits_and_while_it_runs(
        sidekiq: Sidekiq, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    config = load_config_text(textwrap.dedent("""
        schedules:
          overlap_slow: {every: 2s, class: SleepingWorker, args: [3], overlap: skip}
    """))
    (schedule,) = config.schedules
    now = sidekiq.redis_now()
    base = datetime.fromtimestamp(int(now.timestamp()) // 2 * 2 - 60, tz=now.tzinfo)

    def at(step: int) -> datetime:
        return base + timedelta(seconds=2 * step)

    assert run(sidekiq.client, config, now=at(0)).new_schedules == 1
    # Both worker threads (-c 2) busy, so the schedule's first job has to wait in its queue.
    blockers = [sleeping(sidekiq, f"overlap_blocker_{i}", 4) for i in range(2)]
    for jid in blockers:
        wait_for("a blocker to start", lambda jid=jid: sidekiq.started(jid) or None)

    first = run(sidekiq.client, config, now=at(1))
    assert first.pushed == 1
    (job,) = first.jobs
    assert queued_jids(sidekiq) == [job.jid]

    waiting = run(sidekiq.client, config, now=at(2))  # the job waits in queue:default
    assert waiting.pushed == 0
    assert queued_jids(sidekiq) == [job.jid]

    wait_for("the schedule's job to start", lambda: sidekiq.started(job.jid) or None,
             timeout_s=15)
    marker = keys.running("", schedule.name)
    wait_for("the running marker", lambda: sidekiq.client.get(marker))
    running = run(sidekiq.client, config, now=at(3))  # it runs: only the marker says so
    assert running.pushed == 0
    assert queued_jids(sidekiq) == [] and not sidekiq.finished(job.jid)

    wait_for("the job to end", lambda: sidekiq.finished(job.jid) or None, timeout_s=15)
    wait_for("the marker to go", lambda: sidekiq.client.exists(marker) == 0 or None)
    after = run(sidekiq.client, config, now=at(4))
    assert after.pushed == 1
    (next_job,) = after.jobs
    assert next_job.tick == at(4)
    assert next_job.jid == jid_ms(schedule.name, to_ms(at(4)))
    sidekiq.wait_runs({next_job.jid}, timeout_s=15)  # and the worker runs it
    # Each job ran once; the ticks passed over never ran.
    ran = by_kind(sidekiq.runs({job.jid, next_job.jid}), "middleware")
    assert {j: len(r) for j, r in ran.items()} == {job.jid: 1, next_job.jid: 1}
    passed = {jid_ms(schedule.name, to_ms(at(s))) for s in (2, 3)}
    assert sidekiq.runs(passed) == []

    # `kiqbeat missed` shows the two passed-over ticks with reason overlap.
    for name in list(os.environ):
        if (name.startswith("KIQBEAT_") and name != "KIQBEAT_TEST_CLOCK") or name == "REDIS_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("KIQBEAT_REDIS_URL", sidekiq.url)
    capsys.readouterr()
    assert main(["missed", "--json", schedule.name]) == 0
    (missed,) = json.loads(capsys.readouterr().out)["missed"]
    # A range (after, through]: the ticks at(2) and at(3), and no other.
    assert (missed["reason"], missed["ticks"]) == ("overlap", 2)
    assert datetime.fromisoformat(missed["after"]) == at(1)
    assert datetime.fromisoformat(missed["through"]) == at(3)
