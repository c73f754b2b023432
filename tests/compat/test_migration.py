"""sidekiq-scheduler and sidekiq-cron files load in kiqbeat, warning where meaning changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiqbeat.core.cron import Cron, Every
from kiqbeat.document.fields import LEGACY_ACTIVE_JOB_WRAPPER
from kiqbeat.entrypoints.cli import main
from tests.support.engine import load_config_file

FIXTURES = Path(__file__).parent / "fixtures"


def validate(name: str, capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["validate", str(FIXTURES / name)])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out + out.err


def test_sidekiq_scheduler_file_validates_with_its_meaning_changes_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = validate("sidekiq_scheduler.yml", capsys)
    assert "5 schedules" in text
    assert "cache_warmup" in text and "one-shot" in text            # `in:` has no kiqbeat meaning
    assert "first_in" in text                                       # rufus options dropped
    assert "rails_env" in text
    assert "listened_queues_only" in text
    assert "'nightly_cleanup'" in text and "UTC" in text            # zone-less cron
    assert "metrics_flush" in text and "lookahead" in text          # sub-minute needs lookahead

    schedules = {s.name: s for s in load_config_file(FIXTURES / "sidekiq_scheduler.yml").schedules}
    digest = schedules["hourly_digest"]
    assert isinstance(digest.timetable, Cron) and digest.timetable.zone_name == "Europe/Berlin"
    assert (digest.queue, digest.description) == ("mailers", "Hourly digest of new comments")
    inventory = schedules["sync_inventory"]
    assert isinstance(inventory.timetable, Every) and inventory.timetable.seconds == 900
    assert inventory.args == ({"warehouse": "north", "full": False},)  # a hash is one argument
    assert schedules["nightly_cleanup"].enabled is False
    assert schedules["metrics_flush"].include_metadata is True
    billing = schedules["monthly_billing"]
    assert billing.extra["retry"] == 3 and billing.args == ("invoices", 2)


def test_sidekiq_cron_file_validates_with_its_meaning_changes_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = validate("sidekiq_cron.yml", capsys)
    assert "4 schedules" in text
    assert "date_as_argument" in text and "scheduled_at" in text   # tick, not push time
    assert "without a zone" in text

    schedules = {s.name: s for s in load_config_file(FIXTURES / "sidekiq_cron.yml").schedules}
    report = schedules["daily_report"]
    assert report.args == ("summary", {"include_charts": True})     # JSON string args decoded
    assert isinstance(report.timetable, Cron) and report.timetable.zone_name == "Europe/London"
    assert schedules["paused_export"].enabled is False               # status: disabled
    invoice = schedules["invoice_run"]
    # sidekiq-cron pushes ActiveJob jobs with Rails' adapter wrapper, behind the queue prefix.
    assert invoice.active_job_wrapper == LEGACY_ACTIVE_JOB_WRAPPER
    assert invoice.queue == "billing_invoices"
    stamp = schedules["usage_stamp"]
    assert stamp.job_class == "UsageStampWorker"                     # klass
    assert stamp.include_metadata is True
    assert stamp.args == ({"tenant": "acme"},)


def test_sidekiq_cron_list_form_validates(capsys: pytest.CaptureFixture[str]) -> None:
    text = validate("sidekiq_cron_list.yml", capsys)
    assert "2 schedules" in text
    schedules = {s.name: s for s in load_config_file(FIXTURES / "sidekiq_cron_list.yml").schedules}
    assert schedules["heartbeat"].queue == "critical"
    digest = schedules["weekly_digest"]
    assert isinstance(digest.timetable, Cron) and digest.timetable.zone_name == "America/Chicago"
    assert digest.enabled is True
