"""A real Sidekiq (Debian's ruby-sidekiq) runs what kiqbeat's engine pushed, and reads it sanely.

Every job here is pushed by `kiqbeat.engine.run` from a schedule document; the worker
(tests/compat/ruby/worker.rb) records the job hash it was handed, what Sidekiq's API reads
from it, and the arguments `perform` received.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from kiqbeat.document import load_config_text
from kiqbeat.engine import run

from .harness import Sidekiq, by_kind, wait_for


def test_each_pushed_job_runs_once_with_its_class_args_and_queue(sidekiq: Sidekiq) -> None:
    report, minute = sidekiq.push_one_minute("""
schedules:
  e2e_plain:
    cron: "* * * * *"
    class: RecordingWorker
    args: [1, "two", {"three": 3}]
  e2e_critical:
    cron: "* * * * *"
    class: CriticalWorker
    queue: critical
    args: [{"account": 42}]
    retry: 3
    tags: [billing]
  e2e_low_metadata:
    cron: "* * * * *"
    class: RecordingWorker
    queue: low
    include_metadata: true
""")
    assert report.pushed == 3
    jobs = {j.schedule: j for j in report.jobs}
    records = sidekiq.wait_runs({j.jid for j in jobs.values()})
    performed, seen = by_kind(records, "perform"), by_kind(records, "middleware")
    tick_s = minute.timestamp()

    plain = jobs["e2e_plain"]
    assert [r["args"] for r in performed[plain.jid]] == [[1, "two", {"three": 3}]]
    assert performed[plain.jid][0]["class"] == "RecordingWorker"
    assert [r["queue"] for r in seen[plain.jid]] == ["default"]

    critical = jobs["e2e_critical"]
    assert [r["class"] for r in performed[critical.jid]] == ["CriticalWorker"]
    assert performed[critical.jid][0]["args"] == [{"account": 42}]
    job = seen[critical.jid][0]["job"]
    assert seen[critical.jid][0]["queue"] == "critical"
    assert (job["retry"], job["tags"]) == (3, ["billing"])

    low = jobs["e2e_low_metadata"]
    assert [r["queue"] for r in seen[low.jid]] == ["low"]
    # include_metadata: one more argument, the tick (not the push time) as float seconds.
    assert performed[low.jid][0]["args"] == [{"scheduled_at": tick_s}]

    for record in seen.values():
        assert len(record) == 1, "a job ran more than once"
        assert not record[0]["has_retry_count"]
    # The same minute replayed by a late or duplicate trigger pushes nothing more.
    again = run(sidekiq.client, load_config_text("""
schedules:
  e2e_plain: {cron: "* * * * *", class: RecordingWorker, args: [1, "two", {"three": 3}]}
"""), now=minute)
    assert again.pushed == 0


def test_sidekiq_api_reads_float_second_stamps_as_the_push_instant(sidekiq: Sidekiq) -> None:
    report, minute = sidekiq.push_one_minute("""
schedules:
  api_seconds: {cron: "* * * * *", class: RecordingWorker, queue: parked_s, args: [7]}
""")
    (job,) = report.jobs
    seen = sidekiq.probe("parked_s")
    queue = seen["queues"]["parked_s"]
    (listed,) = queue["jobs"]
    assert listed["jid"] == job.jid
    # kiqbeat's push instant is the invocation's `now`: the minute boundary here.
    assert listed["enqueued_at"] == listed["created_at"] == minute.timestamp()
    assert listed["enqueued_year"] == minute.year
    expected_latency = seen["now"] - minute.timestamp()
    assert 0 <= queue["latency"] < 120
    assert queue["latency"] == pytest.approx(expected_latency, abs=1.0)
    assert listed["retry_count"] is None


def test_millisecond_stamps_are_for_sidekiq_8_and_misread_by_older_sidekiq(
    sidekiq: Sidekiq,
) -> None:
    report, minute = sidekiq.push_one_minute("""
timestamp_format: ms
schedules:
  api_ms_parked: {cron: "* * * * *", class: RecordingWorker, queue: parked_ms}
  api_ms_runs: {cron: "* * * * *", class: RecordingWorker}
""")
    jobs = {j.schedule: j for j in report.jobs}
    seen = sidekiq.probe("parked_ms")
    (listed,) = seen["queues"]["parked_ms"]["jobs"]
    assert listed["item"]["enqueued_at"] == int(minute.timestamp() * 1000)
    ran = jobs["api_ms_runs"].jid
    records = by_kind(sidekiq.wait_runs({ran}), "middleware")[ran]
    major = int(seen["sidekiq"].split(".")[0])
    if major < 8:
        # Sidekiq 6/7 read the stamp as seconds: the year 58000-something and a hugely
        # negative latency. The job still runs. This is why `s` is the default.
        assert listed["enqueued_year"] > 50000
        assert seen["queues"]["parked_ms"]["latency"] < -1e9
        assert records[0]["api_enqueued_year"] > 50000
    else:  # pragma: no cover - only Sidekiq 6.4 is packaged by Debian 12
        assert listed["enqueued_year"] == minute.year
        assert 0 <= seen["queues"]["parked_ms"]["latency"] < 120
    assert len(records) == 1


def test_a_failing_job_gets_sidekiqs_normal_first_retry(sidekiq: Sidekiq) -> None:
    report, _ = sidekiq.push_one_minute("""
schedules:
  fails_retried: {cron: "* * * * *", class: FailingWorker, args: [1]}
  fails_no_retry: {cron: "* * * * *", class: FailingWorker, queue: critical, retry: false}
""")
    jobs = {j.schedule: j.jid for j in report.jobs}
    sidekiq.wait_runs(set(jobs.values()))

    def settled() -> dict | None:
        seen = sidekiq.probe()
        return seen if any(r["jid"] == jobs["fails_retried"] for r in seen["retries"]) else None
    seen = wait_for("the failed job in the retry set", settled)
    (retry,) = [r for r in seen["retries"] if r["jid"] == jobs["fails_retried"]]
    # Sidekiq's own first failure: retry_count 0 (kiqbeat never pre-sets it), error kept.
    assert retry["retry_count"] == 0
    assert retry["error_class"] == "RuntimeError"
    assert retry["item"]["queue"] == "default"
    assert retry["item"]["error_message"] == "kiqbeat compat: deliberate failure"
    # retry: false is honoured: neither retried nor kept as dead.
    assert all(r["jid"] != jobs["fails_no_retry"] for r in seen["retries"] + seen["dead"])
    # Each ran exactly once so far (Sidekiq's first retry is at least 15 s away).
    performed = by_kind(sidekiq.runs(set(jobs.values())), "perform")
    assert {j: len(performed[j]) for j in jobs.values()} == {j: 1 for j in jobs.values()}


def test_activejob_envelope_runs_a_real_activejob_job(
    sidekiq: Sidekiq, active_job_version: str,
) -> None:
    report, minute = sidekiq.push_one_minute("""
schedules:
  aj_report:
    cron: "* * * * *"
    class: ReportJob
    active_job: legacy
    queue: critical
    args: [5, {"scope": "daily"}]
    include_metadata: true
""")
    (job,) = report.jobs
    records = sidekiq.wait_runs({job.jid})
    (performed,) = by_kind(records, "perform")[job.jid]
    (seen,) = by_kind(records, "middleware")[job.jid]
    assert performed["class"] == "ReportJob"
    assert performed["args"] == [5, {"scope": "daily"}, {"scheduled_at": minute.timestamp()}]
    assert performed["queue"] == "critical"
    assert performed["executions"] == 1
    assert performed["job_id"] == seen["job"]["args"][0]["job_id"]
    assert performed["active_job"] == active_job_version
    # The API and web UI show the wrapped class, not the wrapper.
    assert seen["api_display_class"] == "ReportJob"
    assert seen["job"]["class"] == "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"


def test_lookahead_jobs_wait_in_the_schedule_set_until_their_instant(sidekiq: Sidekiq) -> None:
    config = load_config_text("""
lookahead: 6s
schedules:
  ahead_3s: {every: 3s, class: RecordingWorker, args: [ahead]}
""")
    report = run(sidekiq.client, config)
    assert report.new_schedules == 1  # its first invocation already pushes ahead
    ahead = [j for j in report.jobs if j.queue is None]
    assert ahead, f"nothing was pushed ahead: {report.summary()}"
    records = sidekiq.wait_runs({j.jid for j in report.jobs}, timeout_s=20)
    seen = by_kind(records, "middleware")
    for job in ahead:
        (record,) = seen[job.jid]
        tick_s = job.tick.timestamp()
        # Never early: Sidekiq's poller released it at or after its tick, and it ran soon.
        assert record["ran_at"] >= tick_s
        assert record["job"]["enqueued_at"] >= tick_s
        assert record["ran_at"] - tick_s < 5
        assert record["job"]["created_at"] < tick_s
        assert record["api_enqueued_year"] == job.tick.year
    assert timedelta(0) < max(j.tick for j in ahead) - report.now <= timedelta(seconds=6)
