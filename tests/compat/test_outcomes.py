"""What became of each job, told by a real Sidekiq 6.4 worker with Kiqbeat::Middleware
(clients/ruby/lib/kiqbeat/middleware.rb) and folded by kiqbeat: jobs that succeed, raise
(without retries, and with a retry that later succeeds), sleep, expire, and a job that is not
kiqbeat's; under redis-namespace too. The worker keeps its own ledger (tests/compat/ruby/
outcome_worker.rb) to check the reports against."""

from __future__ import annotations

import json
import signal
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from kiqbeat.core.payload import jid_ms, job_json
from kiqbeat.core.plan import to_ms
from kiqbeat.core.schedule import Config
from kiqbeat.demo.server import RedisServer
from kiqbeat.document import load_config_text
from kiqbeat.engine import run
from kiqbeat.entrypoints.cli import main
from kiqbeat.outcomes import fold_outcomes
from kiqbeat.outcomes.records import read_health, read_outcomes
from kiqbeat.redis import keys
from kiqbeat.store import Store

from .harness import on_own_redis, stop, wait_for
from .outcome_worker import QUEUE, Worker


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    with on_own_redis(Worker) as started:
        yield started


def config(text: str, namespace: str = "") -> Config:
    found = load_config_text(textwrap.dedent(text))
    return replace(found, namespace=namespace) if namespace else found


def test_each_job_reports_its_start_and_end_and_kiqbeat_folds_them(worker: Worker) -> None:
    cfg = config(f"""
        schedules:
          ok: {{cron: '* * * * *', class: LedgerWorker, args: [0], queue: {QUEUE}}}
          boom: {{cron: '* * * * *', class: RaisingWorker, queue: {QUEUE}, retry: false}}
          flaky: {{cron: '* * * * *', class: FlakyWorker, queue: {QUEUE}, retry: 3}}
          slow: {{cron: '* * * * *', class: LedgerWorker, args: [3], queue: {QUEUE}}}
    """)
    minute = worker.push_minute(cfg)
    tick = to_ms(minute)
    slow = worker.health("slow", lambda h: h.last_outcome == "running", "running")
    assert slow.last_jid == jid_ms("slow", tick)
    marker = worker.client.get(keys.running("", "slow"))
    assert marker is not None and marker.decode() == jid_ms("slow", tick)
    assert worker.ledger(jid_ms("slow", tick)) == ["start"]  # it really is still running

    ok = worker.health("ok", lambda h: h.last_outcome == "succeeded", "a success")
    assert (ok.last_tick_ms, ok.consecutive_failures) == (tick, 0)
    assert ok.last_duration_ms is not None and ok.last_duration_ms < 3000
    assert worker.ledger(jid_ms("ok", tick)) == ["start", "end"]

    boom = worker.health("boom", lambda h: h.last_outcome == "failed", "a failure")
    assert boom.consecutive_failures == 1
    assert boom.last_error == "ArgumentError: kiqbeat test: deliberate failure " + "x" * (
        200 - len("kiqbeat test: deliberate failure "))
    assert worker.ledger(jid_ms("boom", tick)) == ["start", "raise"]
    assert worker.client.zcard("retry") == 0 or not any(
        jid_ms("boom", tick).encode() in m for m in worker.client.zrange("retry", 0, -1))

    flaky = worker.health("flaky", lambda h: h.last_outcome == "succeeded",
                          "the retry's success", timeout_s=60)
    assert (flaky.consecutive_failures, flaky.last_error) == (0, None)
    assert worker.ledger(jid_ms("flaky", tick)) == ["start", "raise", "start", "end"]
    ((record, _),) = read_outcomes(worker.client, "", ["flaky"]).values()
    assert record is not None and record.ticks[0].attempt == 2

    slow = worker.health("slow", lambda h: h.last_outcome == "succeeded", "the end")
    assert slow.last_duration_ms is not None and slow.last_duration_ms >= 3000
    wait_for("the marker to go",
             lambda: worker.client.exists(keys.running("", "slow")) == 0 or None)


def test_a_job_that_is_not_kiqbeats_is_run_and_reported_nowhere(worker: Worker) -> None:
    inbox = keys.outcomes_inbox("")
    before = worker.client.llen(inbox)
    jid = "plainjob000000000000000a"
    worker.client.lpush(f"queue:{QUEUE}", json.dumps(
        {"class": "LedgerWorker", "args": [0], "queue": QUEUE, "jid": jid, "retry": False,
         "created_at": 1.0, "enqueued_at": 1.0}))
    wait_for("the plain job to run", lambda: worker.ledger(jid) == ["start", "end"] or None)
    entries = [json.loads(e) for e in worker.client.lrange(inbox, 0, -1)]
    assert worker.client.llen(inbox) >= before and not [e for e in entries if e["j"] == jid]


def test_a_job_started_after_its_expiry_is_not_run_and_is_recorded_expired(
        worker: Worker) -> None:
    cfg = config(f"""
        schedules:
          stale: {{cron: '* * * * *', class: LedgerWorker, args: [0], queue: {QUEUE},
                   expires_after: 30s}}
          fresh: {{cron: '* * * * *', class: LedgerWorker, args: [0], queue: {QUEUE},
                   expires_after: 1h}}
    """)
    run(worker.client, cfg)  # stored, so the fold knows the names
    now = worker.now()
    old_tick = now - timedelta(minutes=5)
    for schedule in cfg.schedules:
        worker.client.lpush(f"queue:{QUEUE}", job_json(schedule, old_tick, pushed_at=now))
    stale = worker.health("stale", lambda h: h.last_outcome == "expired", "expired")
    assert stale.last_tick_ms == to_ms(old_tick)
    fresh = worker.health("fresh", lambda h: h.last_outcome == "succeeded", "run")
    assert worker.ledger(jid_ms("stale", to_ms(old_tick))) == []  # never ran
    assert worker.ledger(jid_ms("fresh", to_ms(old_tick))) == ["start", "end"]
    assert fresh.last_tick_ms == to_ms(old_tick)


def test_under_redis_namespace_every_key_is_the_namespaces() -> None:
    with RedisServer() as server:
        ns = "app:"
        namespaced = Worker(server.url, ns)
        try:
            cfg = config(f"""
                schedules:
                  inside: {{cron: '* * * * *', class: LedgerWorker, args: [4], queue: {QUEUE}}}
            """, namespace=ns)
            minute = namespaced.push_minute(cfg)
            running = namespaced.health("inside", lambda h: h.last_outcome == "running",
                                        "running")
            assert running.last_tick_ms == to_ms(minute)
            assert namespaced.client.get(keys.running(ns, "inside")) is not None
            namespaced.health("inside", lambda h: h.last_outcome == "succeeded", "the end")
            stray = [k for k in namespaced.client.scan_iter(match="kiqbeat:*")]
            assert stray == []  # nothing outside the namespace
        finally:
            stop(namespaced.process)


def test_report_classifies_every_tick_of_ten_minutes_as_the_workers_ledger_says(
        worker: Worker, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config(f"""
        missed_jobs_window: 90s
        schedules:
          ledger: {{cron: '* * * * *', class: ByJidWorker, queue: {QUEUE}, retry: false}}
          parked: {{cron: '* * * * *', class: LedgerWorker, queue: nobody}}
    """)
    store = Store(worker.client, window_s=90)
    # The worker fails an odd jid (its last hex digit): the first minutes back from now whose
    # pushed ticks' jids are of both kinds, so that both outcomes are met (any six jids of
    # one kind: 1 run in 32).
    base = worker.now().replace(second=0, microsecond=0) - timedelta(minutes=12)
    while len({int(jid_ms("ledger", to_ms(base + timedelta(minutes=m)))[-1], 16) % 2
               for m in (1, 2, 5, 8, 9, 10)}) < 2:
        base -= timedelta(minutes=1)
    at = {m: base + timedelta(minutes=m) for m in range(13)}
    run(worker.client, cfg, now=base + timedelta(seconds=30))  # first seen
    expected: dict[int, str] = {}
    for m in range(1, 11):
        # Paused and resumed at the replayed instants, by the store protocol's commands
        # (docs/store.md: `Store.resume` would pass over everything up to the real now).
        if m == 3:
            worker.client.hset(keys.paused(""), "ledger", json.dumps(
                {"note": "test", "by": "test", "at": to_ms(at[3]) - 1000, "until": None}))
        if m == 5:
            worker.client.hdel(keys.paused(""), "ledger")
            worker.client.zadd(keys.due(""), {"ledger": 0}, xx=True)
        if m == 6:
            store.skip("ledger", 1)
        if m in (7, 8):
            continue  # no invocation: tick 7 falls out of the 90 s window by minute 9
        run(worker.client, cfg, now=at[m])
    expected.update({3: "skipped paused", 4: "skipped paused", 6: "skipped skip",
                     7: "missed window", 11: "pending", 12: "pending"})
    pushed = [m for m in range(1, 11) if m not in expected]
    assert pushed == [1, 2, 5, 8, 9, 10]
    for m in pushed:
        jid = jid_ms("ledger", to_ms(at[m]))
        events = wait_for(f"tick {m}'s job to end",
                          lambda jid=jid: (e := worker.ledger(jid))[-1:] in (["end"], ["raise"])
                          and e)
        expected[m] = {("start", "end"): "succeeded", ("start", "raise"): "failed"}[
            tuple(events)]
    assert {"succeeded", "failed"} <= set(expected.values())  # both kinds among the jids
    wait_for("the last report", lambda: run(worker.client, cfg, now=at[10]).outcomes_folded
             or worker.client.llen(keys.outcomes_inbox("")) == 0 or None)

    def report(name: str) -> dict[str, Any]:
        code = main(["report", name, "--since", base.isoformat(), "--until",
                     at[12].isoformat(), "--json", "--redis-url", worker.url])
        out = capsys.readouterr().out
        assert code == 0, out
        found: dict[str, Any] = json.loads(out)
        return found

    found = report("ledger")
    listed = {(datetime.fromisoformat(t["tick"]) - base) // timedelta(minutes=1):
              " ".join(filter(None, (t["outcome"], t.get("reason")))) for t in found["ticks"]}
    assert listed == expected
    assert [t["tick"] for t in found["ticks"]] == sorted(t["tick"] for t in found["ticks"])
    assert datetime.fromisoformat(found["known_after"]) == base + timedelta(seconds=30)
    for t in found["ticks"]:
        if t["outcome"] in ("succeeded", "failed"):
            assert t["jid"] == jid_ms("ledger", to_ms(datetime.fromisoformat(t["tick"])))
        if t["outcome"] == "failed":
            assert t["attempts"] == 1
    parked = report("parked")["ticks"]
    assert [(t["outcome"], t.get("reason")) for t in parked] == (
        [("waiting", None)] * 6 + [("missed", "window")] + [("waiting", None)] * 3
        + [("pending", None)] * 2)


def test_overlap_skip_passes_over_a_tick_while_the_middleware_says_the_job_runs(
        worker: Worker) -> None:
    cfg = config(f"""
        schedules:
          single: {{cron: '* * * * *', class: LedgerWorker, args: [4], queue: {QUEUE},
                    overlap: skip}}
    """)
    base = worker.now().replace(second=0, microsecond=0) - timedelta(minutes=5)
    at = {m: base + timedelta(minutes=m) for m in range(4)}
    run(worker.client, cfg, now=base + timedelta(seconds=30))
    assert run(worker.client, cfg, now=at[1]).pushed == 1
    first = jid_ms("single", to_ms(at[1]))
    wait_for("the first job to start", lambda: worker.ledger(first) == ["start"] or None)
    during = run(worker.client, cfg, now=at[2])  # it runs (4 s): tick 2 is passed over
    assert (during.pushed, during.skipped) == (0, 1)
    wait_for("the first job to end", lambda: worker.ledger(first)[-1:] == ["end"] or None)
    after = run(worker.client, cfg, now=at[3])
    assert after.pushed == 1
    ticks = Store(worker.client).report("single", since=base, until=at[3]).ticks
    assert [(t.outcome, t.reason) for t in ticks][:2] == [("succeeded", None),
                                                          ("skipped", "overlap")]


def test_a_sidekiq_shutdown_mid_job_is_no_failure_and_the_job_is_requeued() -> None:
    """A deploy: SIGTERM with a 1 s shutdown timeout, so Sidekiq raises Sidekiq::Shutdown in
    the sleeping job and pushes it back to Redis. Nothing is reported failed (a failure
    would fire `alert_after_failures: 1` on every deploy): the tick stays running."""
    cfg = config(f"""
        schedules:
          long: {{cron: '* * * * *', class: LedgerWorker, args: [60], queue: {QUEUE}}}
    """)
    with RedisServer() as server:
        worker = Worker(server.url, "", "-t", "1")
        try:
            tick = to_ms(worker.push_minute(cfg))
            worker.health("long", lambda h: h.last_outcome == "running", "running")
            wait_for("the job to start sleeping",
                     lambda: worker.ledger(jid_ms("long", tick)) == ["start"] or None)
            worker.process.send_signal(signal.SIGTERM)
            worker.process.wait(timeout=60)
        finally:
            stop(worker.process)
        log = worker.log.read_text(errors="replace")
        # Sidekiq really did raise Sidekiq::Shutdown in the job (its `fail` line) and push it back
        assert "Terminating 3 busy worker threads" in log and "Pushed 1 jobs back" in log, log
        assert f"jid={jid_ms('long', tick)} elapsed=" in log, log
        entries = [json.loads(e) for e in worker.client.lrange(keys.outcomes_inbox(""), 0, -1)]
        assert [e["e"] for e in entries if e["j"] == jid_ms("long", tick)] in (
            [], ["started"]), entries  # folded already, or waiting: never "failed"
        fold_outcomes(worker.client, "")
        health = read_health(worker.client, "", ["long"])["long"]
        assert (health.last_outcome, health.consecutive_failures) == ("running", 0)


def test_the_worker_folds_its_own_reports_and_after_a_script_flush_uses_the_inbox() -> None:
    """Once an invocation published the fold call, the middleware folds its reports itself:
    the record is current without kiqbeat folding anything, and the inbox never sees them.
    After SCRIPT FLUSH (a restart) its call fails with NOSCRIPT: the report goes to the
    inbox instead, the job runs as ever, and the next invocation folds it."""
    cfg = config(f"""
        schedules:
          own: {{cron: '* * * * *', class: LedgerWorker, args: [0], queue: {QUEUE}}}
    """)
    with RedisServer() as server:
        worker = Worker(server.url)
        try:
            base = worker.now().replace(second=0, microsecond=0) - timedelta(minutes=5)
            at = {m: base + timedelta(minutes=m) for m in range(4)}
            # A report in the inbox (as a worker's first, before any call is published; garbled
            # here: dropped) makes the invocation publish the call.
            worker.client.lpush(keys.outcomes_inbox(""), "{}")
            run(worker.client, cfg, now=base + timedelta(seconds=30))
            published = worker.client.get(keys.outcomes_script(""))
            assert published is not None and published.startswith(b"1 EVALSHA ")

            def ended(m: int) -> str:
                jid = jid_ms("own", to_ms(at[m]))
                wait_for(f"tick {m}'s job to end",
                         lambda: worker.ledger(jid) == ["start", "end"] or None)
                return jid

            def inbox_jids() -> list[str]:
                return [e["j"] for e in map(json.loads, worker.client.lrange(
                    keys.outcomes_inbox(""), 0, -1))]

            for m in (1, 2):  # the first report reads the call (and goes to the inbox)
                run(worker.client, cfg, now=at[m])
                second = ended(m)
            # No fold by kiqbeat: the worker's own fold made the record.
            def current() -> bool | None:
                h = read_health(worker.client, "", ["own"])["own"]
                return (h.last_outcome, h.last_tick_ms) == ("succeeded", to_ms(at[2])) or None
            wait_for("tick 2's success in the record", current)
            assert second not in inbox_jids()

            fold_outcomes(worker.client, "")  # what the first reports left in the inbox
            worker.client.script_flush()
            # Nothing waits in the inbox: this invocation folds nothing, so loads nothing.
            run(worker.client, cfg, now=at[3])
            third = ended(3)

            def reported() -> list[str] | None:
                found = [e["e"] for e in map(json.loads, worker.client.lrange(
                    keys.outcomes_inbox(""), 0, -1)) if e["j"] == third]
                return found if len(found) == 2 else None
            entries = wait_for("tick 3's reports in the inbox", reported)
            assert sorted(entries) == ["started", "succeeded"]
            assert "folding a report failed" in worker.log.read_text(errors="replace")
            fold_outcomes(worker.client, "")
            health = read_health(worker.client, "", ["own"])["own"]
            assert (health.last_outcome, health.last_tick_ms) == ("succeeded", to_ms(at[3]))
        finally:
            stop(worker.process)
