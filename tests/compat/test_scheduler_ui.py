"""sidekiq-scheduler's Recurring Jobs tab reads what `scheduler_ui` writes; its toggle works.

Debian has no sidekiq-scheduler package, so tests/compat/ruby/scheduler_tab.rb reads the
keys the way the tab's code does (JSON.parse of each `schedules` value, Time.parse of the
times, `job_enabled?`) and flips a job the way its button does.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis

from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text
from kiqbeat.engine import run
from kiqbeat.redis import keys
from kiqbeat.redis import scheduler_ui as ui

from .harness import RUBY_DIR, Sidekiq

TAB_CONFIG = """
sidekiq_scheduler_ui: true
schedules:
  tab_paris_report:
    cron: "0 9 * * 1-5 Europe/Paris"
    class: ReportWorker
    queue: reports
    args: [{"format": "pdf"}, 3]
    description: "Weekday report at 09:00 Paris time"
  tab_quarter_hour:
    every: 15m
    class: PingWorker
  tab_paused:
    cron: "30 2 * * *"
    class: CleanupWorker
    enabled: false
"""


def tab(sidekiq: Sidekiq, *args: str) -> dict[str, Any]:
    done = subprocess.run(["ruby", str(RUBY_DIR / "scheduler_tab.rb"), *args],
                          env=sidekiq.env(), capture_output=True, text=True, timeout=30,
                          check=False)
    if done.returncode != 0:
        pytest.fail(f"scheduler_tab.rb {' '.join(args)} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout) if done.stdout.strip() else {}


def write(client: redis.Redis, config: Config, fields: ui.UiFields) -> None:
    """What the engine's push step will do with the fields (HSET, one pipeline)."""
    ns = config.namespace
    pipe = client.pipeline()
    for key, values in ((keys.schedules_key(ns), fields.schedules),
                        (keys.last_times_key(ns), fields.last_times),
                        (keys.next_times_key(ns), fields.next_times)):
        if values:
            pipe.hset(key, mapping=values)
    pipe.execute()


def toggles(client: redis.Redis, config: Config) -> dict[str, bool]:
    names = [s.name for s in config.schedules]
    raw = client.hmget(keys.states_key(config.namespace), names)
    found, warnings = ui.read_toggles(dict(zip(names, raw, strict=True)))
    assert warnings == []
    return found


def test_tab_parses_kiqbeats_schedules_and_times(sidekiq: Sidekiq) -> None:
    config = load_config_text(TAB_CONFIG)
    now = datetime.fromisoformat("2026-03-27T08:15:42+00:00")
    last = {"tab_paris_report": datetime.fromisoformat("2026-03-26T08:00:00+00:00")}
    nxt = {s.name: s.timetable.next_after(now) for s in config.schedules}
    write(sidekiq.client, config, ui.ui_fields(config.schedules, last, nxt))

    shown = tab(sidekiq, "read")
    report = shown["tab_paris_report"]
    assert report["class"] == "ReportWorker"
    assert report["queue"] == "reports"
    assert report["args"] == [{"format": "pdf"}, 3]
    assert report["description"] == "Weekday report at 09:00 Paris time"
    assert report["interval"] == "0 9 * * 1-5 Europe/Paris"
    assert report["enabled"] is True
    # Time.parse reads both times back to the same instants (09:00 Paris is 08:00 UTC).
    assert report["last_time"] == last["tab_paris_report"].timestamp()
    assert report["next_time"] == nxt["tab_paris_report"].timestamp()
    assert report["next_time_iso"] == "2026-03-30T07:00:00Z"  # Paris is on summer time now

    quarter = shown["tab_quarter_hour"]
    assert (quarter["class"], quarter["queue"], quarter["args"]) == ("PingWorker", "default", [])
    assert quarter["interval"] == "15m"
    assert quarter["next_time"] == datetime.fromisoformat("2026-03-27T08:30:00+00:00").timestamp()
    assert quarter["last_time"] is None
    assert shown["tab_paused"]["enabled"] is False


def test_tab_toggle_pauses_and_resumes_a_schedule_without_backfill(sidekiq: Sidekiq) -> None:
    config = load_config_text("""
sidekiq_scheduler_ui: true
schedules:
  tab_toggled: {cron: "* * * * *", class: RecordingWorker, queue: tab_parked}
  tab_untouched: {cron: "* * * * *", class: RecordingWorker, queue: tab_parked}
""")
    client = sidekiq.client
    minute = sidekiq.redis_now().replace(second=0, microsecond=0)
    assert run(client, config, now=minute - timedelta(seconds=90)).new_schedules == 2
    # The engine wrote the specs: the tab lists both, with their next run.
    listed = tab(sidekiq, "read")
    assert listed["tab_toggled"]["next_time"] == (minute - timedelta(seconds=60)).timestamp()

    tab(sidekiq, "toggle", "tab_toggled")  # the Disable button
    assert tab(sidekiq, "read")["tab_toggled"]["enabled"] is False
    assert toggles(client, config) == {"tab_toggled": False}
    during = run(client, config, now=minute - timedelta(seconds=60))
    assert [j.schedule for j in during.jobs] == ["tab_untouched"]

    tab(sidekiq, "toggle", "tab_toggled")  # the Enable button
    assert tab(sidekiq, "read")["tab_toggled"]["enabled"] is True
    after = run(client, config, now=minute)
    # Only the minute after re-enabling: the paused minute (minute - 60 s) is not backfilled.
    assert sorted((j.schedule, j.tick) for j in after.jobs) == [
        ("tab_toggled", minute), ("tab_untouched", minute)]
    shown = tab(sidekiq, "read")["tab_toggled"]
    assert shown["last_time"] == minute.timestamp()
    assert shown["next_time"] == (minute + timedelta(seconds=60)).timestamp()


def test_tab_toggle_can_enable_a_schedule_the_file_disables() -> None:
    config = load_config_text(TAB_CONFIG)
    toggled, warnings = ui.read_toggles({"tab_paused": '{"enabled":true}',
                                         "tab_quarter_hour": None})
    assert (toggled, warnings) == ({"tab_paused": True}, [])
    enabled = {s.name: s.enabled for s in ui.with_toggles(config, toggled).schedules}
    assert enabled == {"tab_paris_report": True, "tab_quarter_hour": True, "tab_paused": True}


def test_toggle_values_the_tab_never_writes_are_ignored_with_a_warning() -> None:
    toggled, warnings = ui.read_toggles({"a": "not json", "b": '{"enabled":"no"}', "c": "{}",
                                         "d": b'{"enabled":false}'})
    assert toggled == {"d": False}
    assert len(warnings) == 2
    assert "'a'" in warnings[0] and "not json" in warnings[0]
    assert "'b'" in warnings[1] and "'no'" in warnings[1]


def test_time_text_is_what_sidekiq_scheduler_itself_stores() -> None:
    instant = datetime.fromisoformat("2026-07-01T09:30:05.750+02:00")
    # rufus' EoTime#to_s on a UTC host; sub-second parts dropped.
    assert ui.time_text(instant) == "2026-07-01 07:30:05 +0000"
    with pytest.raises(ValueError, match="naive"):
        ui.time_text(datetime(2026, 7, 1))  # noqa: DTZ001 - the point of the test


def test_stale_kiqbeat_entries_are_found_and_foreign_ones_left_alone() -> None:
    config = load_config_text(TAB_CONFIG)
    specs = {
        "tab_quarter_hour": json.dumps({"every": "15m", "class": "PingWorker", "kiqbeat": True}),
        "removed_from_file": json.dumps({"cron": "* * * * *", "class": "X", "kiqbeat": True}),
        "scheduler_own": json.dumps({"cron": "* * * * *", "class": "Y"}),
    }
    assert ui.stale_names(specs, config) == ["removed_from_file"]
