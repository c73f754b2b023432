"""Expectations and alerts against a real Redis and a real HTTP receiver (alerts/, DESIGN §12):
a schedule pushing into a queue no worker reads is `silent` once after its deadline; a failure
streak opens `failing` once and a success closes it with one `recovered`; `pause_after_failures`
pauses; racing invokers never decide an incident twice nor lose one; a webhook that hangs or fails
never stalls an invocation and gets the event later.

Outcomes are written as a worker writes them (docs/store.md, "The worker protocol"), and
folded by the invocations. The real
Sidekiq worker's runs are in tests/compat/test_alerts_sidekiq.py."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import redis

from kiqbeat.alerts import delivery
from kiqbeat.alerts.incidents import open_incidents
from kiqbeat.core.payload import jid
from kiqbeat.core.plan import to_ms
from kiqbeat.core.schedule import Config
from kiqbeat.engine import Engine
from kiqbeat.entrypoints.metrics import InvocationMetrics
from tests.support.alerts import FAILING, SILENT, T0, engine, events, report_outcome
from tests.support.engine import config
from tests.support.receiver import Receiver, receiving


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as got:
        yield got


def test_a_queue_no_worker_reads_is_silent_once_within_a_minute_after_its_deadline(
        client: redis.Redis, receiver: Receiver) -> None:
    cfg = config(SILENT)
    e = engine(client, receiver.url, secret="s3cret")
    for minute in range(1, 9):
        report = e.run(cfg, now=T0 + timedelta(minutes=minute, seconds=5))
        assert report.alert_events == (1 if minute == 5 else 0), minute
    bodies = receiver.wait_for(1)
    assert [(b["schedule"], b["event"]) for b in bodies] == [("nightly", "silent")]
    first_pushed = T0 + timedelta(minutes=2)  # registered at 00:01:05: 00:02 is its first tick
    assert bodies[0]["tick"] == first_pushed.isoformat()
    assert bodies[0]["jid"] == jid("nightly", first_pushed)
    assert bodies[0]["key"] == f"nightly|silent|{to_ms(first_pushed)}"
    assert "nightly" in bodies[0]["text"] and "silent" in bodies[0]["text"]
    headers, raw = receiver.taken[0]
    assert headers["x-kiqbeat-signature"] == "sha256=" + hmac.new(
        b"s3cret", raw, hashlib.sha256).hexdigest()
    assert client.llen("queue:nobody_reads") == 14  # both pushed every tick all along
    assert [(i.name, i.event) for i in open_incidents(client, "")] == [("nightly", "silent")]
    audit = [f for _i, f in client.xrange("kiqbeat:audit")]
    assert [(f[b"action"], f[b"name"]) for f in audit] == [(b"alert", b"nightly")]


def test_a_failure_streak_is_failing_once_then_recovered_once(client: redis.Redis) -> None:
    cfg = config(FAILING)
    e = engine(client)
    e.run(cfg, now=T0 + timedelta(seconds=5))
    for minute in range(1, 8):
        tick = T0 + timedelta(minutes=minute)
        e.run(cfg, now=tick + timedelta(seconds=5))
        report_outcome(client, "flaky", tick, "failed" if minute <= 4 else "succeeded")
    e.run(cfg, now=T0 + timedelta(minutes=7, seconds=30))
    third = to_ms(T0 + timedelta(minutes=3))
    assert [(v["e"], v["t"]) for v in events(client)] == [
        ("failing", str(third)), ("recovered", str(to_ms(T0 + timedelta(minutes=5))))]
    assert events(client)[1]["k"] == f"flaky|recovered|{third}"
    assert open_incidents(client, "") == []


def test_pause_after_failures_pauses_with_a_note_and_resume_clears_the_streak(
        client: redis.Redis) -> None:
    cfg = config(FAILING)
    e = engine(client)
    e.run(cfg, now=T0 + timedelta(seconds=5))
    e.run(cfg, now=T0 + timedelta(minutes=1, seconds=5))
    for minute in range(1, 6):
        report_outcome(client, "flaky", T0 + timedelta(minutes=minute), "failed")
    e.run(cfg, now=T0 + timedelta(minutes=5, seconds=30))
    record = client.hget("kiqbeat:paused", "flaky")
    assert record is not None and b"pause_after_failures" in record
    assert [v["e"] for v in events(client)] == ["paused"]  # reached at once: paused only
    e.store(cfg).resume("flaky")
    report_outcome(client, "flaky", T0 + timedelta(minutes=6), "failed")
    e.run(cfg, now=T0 + timedelta(minutes=6, seconds=30))
    assert client.hget("kiqbeat:paused", "flaky") is None  # one failure since: not paused
    assert [v["e"] for v in events(client)] == ["paused"]  # reached at once: paused only
    for minute in range(7, 11):  # five failures since the resume: paused again, once
        report_outcome(client, "flaky", T0 + timedelta(minutes=minute), "failed")
        e.run(cfg, now=T0 + timedelta(minutes=minute, seconds=30))
    assert client.hget("kiqbeat:paused", "flaky") is not None
    assert [v["e"] for v in events(client)] == ["paused", "paused"]


def test_racing_invokers_decide_each_incident_once(redis_url: str) -> None:
    setup = redis.Redis.from_url(redis_url)
    cfg = config(SILENT + "  flaky: {cron: '* * * * *', class: F, alert_after_failures: 2}\n")
    engine(setup).run(cfg, now=T0 + timedelta(seconds=5))
    failures: list[BaseException] = []
    copies = [engine(redis.Redis.from_url(redis_url)) for _ in range(6)]
    for minute in range(1, 9):
        tick = T0 + timedelta(minutes=minute)
        if minute > 1:
            previous = tick - timedelta(minutes=1)
            report_outcome(setup, "flaky", previous, "failed" if minute <= 5 else "succeeded")
        start = threading.Barrier(len(copies))

        def invoke(copy: Engine, at: datetime = tick,
                   start: threading.Barrier = start) -> None:
            try:
                start.wait()
                copy.run(cfg, now=at + timedelta(seconds=5))
            except BaseException as exc:  # reported below
                failures.append(exc)

        threads = [threading.Thread(target=invoke, args=(c,)) for c in copies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []
    assert sorted((v["s"], v["e"]) for v in events(setup)) == [
        ("flaky", "failing"), ("flaky", "recovered"), ("nightly", "silent")]
    assert len(set(v["k"] for v in events(setup))) == 3


def failed_three_times(client: redis.Redis, receiver: Receiver, cfg: Config) -> Engine:
    """An engine alerting `receiver` whose `flaky` schedule (FAILING) ran and failed at
    three minutes in a row: the next invocation judges it failing."""
    e = engine(client, receiver.url)
    e.run(cfg, now=T0 + timedelta(seconds=5))
    e.run(cfg, now=T0 + timedelta(minutes=1, seconds=5))
    for minute in (1, 2, 3):
        report_outcome(client, "flaky", T0 + timedelta(minutes=minute), "failed")
    return e


def test_a_hanging_webhook_never_stalls_an_invocation_and_gets_the_event_later(
        client: redis.Redis, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "RETRY_IDLE_MS", 500)
    cfg = config(FAILING)
    e = failed_three_times(client, receiver, cfg)
    receiver.hang_s = 30.0
    started = time.monotonic()
    report = e.run(cfg, now=T0 + timedelta(minutes=3, seconds=30))
    assert time.monotonic() - started < 10  # one short timeout, not the receiver's 30 s
    assert report.alert_events == 1 and report.alerts_delivered == 0
    assert any("alert delivery to the webhook failed" in w for w in report.warnings)
    [backlog] = delivery.backlogs(client, "")
    assert backlog.waiting == 1 and backlog.oldest_age_s is not None
    receiver.hang_s = 0.0
    time.sleep(0.6)
    report = e.run(cfg, now=T0 + timedelta(minutes=4, seconds=5))
    assert report.alerts_delivered == 1
    assert [(b["schedule"], b["event"]) for b in receiver.bodies] == [("flaky", "failing")]
    assert delivery.backlogs(client, "")[0].waiting == 0


def test_a_webhook_answering_500_is_retried_until_it_takes_the_event(
        client: redis.Redis, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "RETRY_IDLE_MS", 0)
    cfg = config(SILENT)
    e = engine(client, receiver.url)
    receiver.status = 500
    for minute in range(1, 7):
        e.run(cfg, now=T0 + timedelta(minutes=minute, seconds=5))
    assert receiver.bodies == []
    receiver.status = 204
    e.run(cfg, now=T0 + timedelta(minutes=7, seconds=5))
    assert [(b["schedule"], b["event"]) for b in receiver.bodies] == [("nightly", "silent")]


def test_an_event_left_waiting_is_delivered_by_an_invocation_with_nothing_else_to_decide(
        client: redis.Redis, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the sinks' backlog, read on the first pipeline, says there is work: no schedule
    # with expectations is due, no changed name, no deadline.
    monkeypatch.setattr(delivery, "RETRY_IDLE_MS", 0)
    cfg = config(FAILING)
    e = failed_three_times(client, receiver, cfg)
    receiver.status = 500
    report = e.run(cfg, now=T0 + timedelta(minutes=3, seconds=30))
    assert report.alert_events == 1 and report.alerts_delivered == 0
    receiver.status = 204
    report = e.run(cfg, now=T0 + timedelta(minutes=3, seconds=40))  # no tick due since
    assert report.pushed == 0 and report.alerts_delivered == 1
    assert [(b["schedule"], b["event"]) for b in receiver.bodies] == [("flaky", "failing")]
    assert delivery.backlogs(client, "")[0].waiting == 0


def test_the_metrics_show_gauges_for_schedules_with_expectations_only(
        client: redis.Redis) -> None:
    cfg = config(SILENT + FAILING.replace("schedules:\n", ""))
    e = engine(client)
    for minute in range(0, 7):
        tick = T0 + timedelta(minutes=minute)
        if minute >= 2:
            report_outcome(client, "flaky", tick - timedelta(minutes=1), "failed")
        e.run(cfg, now=tick + timedelta(seconds=5))
    served = InvocationMetrics(where=lambda: (client, ""))  # what `kiqbeat run` serves
    text = served.exposition()
    assert 'kiqbeat_schedule_incident{event="silent",schedule="nightly"} 1.0' in text
    assert 'kiqbeat_schedule_incident{event="paused",schedule="flaky"} 1.0' in text  # 5 failed
    assert 'kiqbeat_schedule_incident{event="failing",schedule="flaky"} 0.0' in text
    assert 'kiqbeat_schedule_consecutive_failures{schedule="flaky"} 5.0' in text
    assert 'schedule="plain"' not in text  # no expectations: no series
    # nightly's deadline went with its silent incident; flaky has none (no expect_success_within)
    assert "kiqbeat_schedule_success_deadline_timestamp_seconds{" not in text


def test_a_broken_alert_key_costs_a_warning_never_the_pushes(client: redis.Redis) -> None:
    cfg = config(SILENT)
    e = engine(client)
    e.run(cfg, now=T0 + timedelta(minutes=1, seconds=5))
    client.delete("kiqbeat:deadlines")
    client.set("kiqbeat:deadlines", "not a sorted set")  # written by hand
    report = e.run(cfg, now=T0 + timedelta(minutes=2, seconds=5))
    assert report.pushed == 2 and client.llen("queue:nobody_reads") == 2
    assert any("alert incidents were not decided" in w and "kiqbeat:deadlines" in w
               for w in report.warnings), report.warnings
