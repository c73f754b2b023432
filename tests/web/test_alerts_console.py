"""The console's side of the alerts (DESIGN §12): the overview lists the open incidents, the
status API carries them with the sinks' backlog, and GET /metrics exports the gauges of the
schedules with expectations (and of no other)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import redis

from kiqbeat.document import load_config_text
from kiqbeat.engine import Engine
from tests.support.console import READER_TOKEN, Served

T0 = datetime(2025, 12, 24, 0, 0, tzinfo=UTC)
DOC = """
schedules:
  nightly: {cron: "* * * * *", class: N, queue: nobody_reads, expect_success_within: 2m}
  plain: {cron: "* * * * *", class: P}
"""


def test_the_overview_and_metrics_show_an_open_incident(console: Served) -> None:
    client = redis.Redis.from_url(console.redis_url)
    engine = Engine(client=client)
    cfg = load_config_text(DOC, source="test")
    for minute in range(1, 7):
        engine.run(cfg, now=T0 + timedelta(minutes=minute, seconds=5))
    client.close()
    with console.browser() as browser:
        page = browser.get("/").text
    assert "Open incidents" in page and "nightly" in page and ">silent<" in page
    with console.api(READER_TOKEN) as api:
        status = api.get("/api/v1/status").json()
        scraped = api.get("/metrics").text
    assert [(i["schedule"], i["event"]) for i in status["incidents"]] == [("nightly", "silent")]
    assert 'kiqbeat_schedule_incident{event="silent",schedule="nightly"} 1.0' in scraped
    assert 'schedule="plain"' not in scraped
