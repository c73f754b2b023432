"""The alert settings through the CLI (`run-once` with KIQBEAT_ALERT_WEBHOOK and its secret),
and `kiqbeat status` showing the open incidents and each sink's backlog (DESIGN §10)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from tests.support.cli import Kiqbeat
from tests.support.clock import advance_clock
from tests.support.receiver import receiving

DOC = """
schedules:
  unread: {every: 1s, class: U, queue: nobody_reads, expect_success_within: 2s}
"""


def test_run_once_sends_the_silent_event_and_status_shows_the_incident(
        kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text(DOC)
    with receiving() as receiver:
        monkeypatch.setenv("KIQBEAT_ALERT_WEBHOOK", receiver.url)
        monkeypatch.setenv("KIQBEAT_ALERT_SECRET", "hush")
        first = kiqbeat("run-once", "--config", str(schedule), "--json")
        assert first.code == 0, first.err
        receiver.status = 503  # the first delivery fails: the event waits
        for _ in range(40):
            ran = kiqbeat("run-once", "--config", str(schedule), "--json")
            assert ran.code == 0, ran.err
            if json.loads(ran.out)["alert_events"]:
                break
            advance_clock(redis_client, 0.25)
        assert "hush" not in ran.out + ran.err and receiver.url not in ran.out + ran.err
        status = kiqbeat("status", "--config", str(schedule), "--json")
        alerts = json.loads(status.out)["alerts"]
        assert [(i["schedule"], i["event"]) for i in alerts["incidents"]] == [
            ("unread", "silent")]
        assert alerts["backlog"][0]["sink"] == "webhook"
        assert alerts["backlog"][0]["waiting"] == 1
        text = kiqbeat("status", "--config", str(schedule)).out
        assert "incident: unread is silent since tick" in text
        assert "1 event(s) wait for the webhook sink" in text
    assert receiver.bodies == []


def test_an_unreadable_outbox_entry_is_acknowledged_with_a_warning_and_the_rest_delivered(
        kiqbeat: Kiqbeat, redis_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries written by hand (a tick that is no number, a tick past year 9999) ahead of a
    decided event: each run exits 0, the good event reaches the receiver, the bad ones are
    acknowledged and named in a warning (issue 27, review item 1)."""
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text(DOC)
    client = redis.Redis.from_url(redis_url)
    outbox = "kiqbeat:alerts:outbox"
    with receiving() as receiver:
        monkeypatch.setenv("KIQBEAT_ALERT_WEBHOOK", receiver.url)
        assert kiqbeat("run-once", "--config", str(schedule), "--json").code == 0
        # the webhook's consumer group as the first decision creates it (incidents.lua)
        client.xgroup_create(outbox, "webhook", id="$", mkstream=True)
        bad = [client.xadd(outbox, {"k": "x", "s": "victim", "e": "failing", "t": "abc",
                                    "at": "1"}).decode(),
               client.xadd(outbox, {"k": "y", "s": "victim", "e": "failing",
                                    "t": "281474976710655", "at": "1"}).decode()]
        warned = ""
        for _ in range(40):
            ran = kiqbeat("run-once", "--config", str(schedule), "--json")
            assert ran.code == 0, ran.err
            assert "Traceback" not in ran.err
            warned += " ".join(json.loads(ran.out)["warnings"]) + ran.err
            if receiver.bodies:
                break
            advance_clock(client, 0.25)
        assert [(b["schedule"], b["event"]) for b in receiver.bodies] == [("unread", "silent")]
    assert all(entry in warned for entry in bad), warned
    assert "is not an alert event (ValueError" in warned
    assert "victim" not in json.dumps(receiver.bodies)
    assert client.xpending(outbox, "webhook")["pending"] == 0  # the bad ones acknowledged
    assert client.xinfo_groups(outbox)[0]["lag"] == 0  # and every entry was read
