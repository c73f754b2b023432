"""Missed and skipped ticks split by reason, in the report, its log line and both metrics
endpoints (core/report.py SKIP_REASONS): only ticks older than the window are missed (lost);
every other tick not pushed was skipped on purpose, and says why. Checked against the jobs in
Redis (distinct jids per schedule), not the report's own totals."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import redis

from kiqbeat.engine import Engine
from kiqbeat.entrypoints.metrics import InvocationMetrics
from tests.support.engine import config, pushed_jobs

T0 = datetime(2025, 12, 24, 23, 55, tzinfo=UTC)
DOC = """
schedules:
  latest: {cron: "* * * * *", class: A, catch_up: latest}
  paused: {cron: "* * * * *", class: B}
  holiday: {cron: "* * * * *", class: C, except: ["2025-12-24"]}
  skipping: {cron: "* * * * *", class: D}
  limited: {cron: "* * * * *", class: E, max_runs: 4}
  overlapping: {cron: "* * * * *", class: F, overlap: skip}
  plain: {cron: "* * * * *", class: G}
"""


def test_every_tick_not_pushed_is_counted_under_its_reason(client: redis.Redis) -> None:
    cfg = config(DOC)
    engine = Engine(client=client)
    engine.run(cfg, now=T0 + timedelta(seconds=5))  # all registered at 23:55:05
    client.hset("kiqbeat:paused", "paused", json.dumps(
        {"note": "INC-1", "by": "ops", "at": 0, "until": None}))
    engine.store(cfg).skip("skipping", 3)
    report = engine.run(cfg, now=T0 + timedelta(minutes=10, seconds=5))  # ticks 23:56..00:05
    jobs: dict[str, set[str]] = {}
    for job in pushed_jobs(client):
        jobs.setdefault(job["class"], set()).add(job["jid"])
    assert {k: len(v) for k, v in jobs.items()} == {
        "A": 1, "C": 6, "D": 7, "E": 4, "F": 1, "G": 10}
    assert report.skipped_by_reason == {"catch_up": 9, "paused": 10, "except": 4, "skip": 3,
                                        "max_runs": 6, "overlap": 9}
    assert report.skipped == 41 and report.missed == 0
    assert report.missed_recorded == 0  # nothing lost: the alarm on it stays quiet
    assert report.skipped_recorded == 9 + 9  # catch_up and overlap ranges, for a backfill
    assert "41 skipped (catch_up 9, paused 10, except 4, skip 3, max_runs 6, overlap 9)" in (
        report.summary())
    metrics = InvocationMetrics()
    metrics.observe(report)
    text = metrics.exposition()
    assert 'kiqbeat_ticks_skipped_total{reason="overlap"} 9.0' in text
    assert 'kiqbeat_ticks_skipped_total{reason="except"} 4.0' in text
    assert "kiqbeat_ticks_missed_total 0.0" in text


def test_ticks_older_than_the_window_are_the_only_missed_ones(client: redis.Redis) -> None:
    cfg = config("missed_jobs_window: 5m\n" + DOC)
    engine = Engine(client=client)
    engine.run(cfg, now=T0 + timedelta(seconds=5))
    report = engine.run(cfg, now=T0 + timedelta(minutes=10, seconds=5))
    # plain: 23:56..00:00 are older than the window (5 lost), 00:01..00:05 pushed.
    assert sum(1 for j in pushed_jobs(client) if j["class"] == "G") == 5
    assert report.missed == 6 * 5 + 1  # holiday: 23:56..23:59 were no ticks; 00:00 was
    assert report.missed_recorded == report.missed
    assert report.skipped_by_reason["catch_up"] == 4  # latest: 00:01..00:04 passed over
