"""The alert settings through the CLI (`run-once` with KIQBEAT_ALERT_WEBHOOK and its secret),
and `kiqbeat status` showing the open incidents and each sink's backlog (DESIGN §10)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.entrypoints.conftest import Kiqbeat
from tests.support.receiver import receiving

DOC = """
schedules:
  unread: {every: 1s, class: U, queue: nobody_reads, expect_success_within: 2s}
"""


def test_run_once_sends_the_silent_event_and_status_shows_the_incident(
        kiqbeat: Kiqbeat, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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
            time.sleep(0.25)
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
