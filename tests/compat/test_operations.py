"""A real Sidekiq (Debian's ruby-sidekiq) runs kiqbeat's manual runs and backfilled ticks.

A manual run's jid is "manual" and 18 hex digits, not the 24 hex digits of Sidekiq's own
(SecureRandom.hex(12)): Sidekiq must take it as it is. A backfilled tick is the tick's own
job, late: `include_metadata` hands `perform` the tick, not the backfill's instant.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from kiqbeat.core.payload import jid
from kiqbeat.document import load_config_text
from kiqbeat.engine import run
from kiqbeat.store import Store

from .harness import Sidekiq, by_kind

SOURCE = "compat-operations"


@pytest.fixture
def store(sidekiq: Sidekiq) -> Store:
    """The store on Sidekiq's Redis (conftest empties kiqbeat's keys there before each test)."""
    return Store(sidekiq.client)


def test_sidekiq_runs_a_manual_run_with_its_manual_jid_once(
    sidekiq: Sidekiq, store: Store,
) -> None:
    store.put("ops_manual", {"cron": "0 0 1 1 *", "class": "RecordingWorker", "args": [5],
                             "queue": "critical"})
    own = store.trigger("ops_manual")
    replaced = store.trigger("ops_manual", args=[7, {"eu": True}])
    assert all(re.fullmatch(r"manual[0-9a-f]{18}", t.jid) for t in (own, replaced))
    records = sidekiq.wait_runs({own.jid, replaced.jid})
    performed, seen = by_kind(records, "perform"), by_kind(records, "middleware")
    assert [r["args"] for r in performed[own.jid]] == [[5]]
    assert [r["args"] for r in performed[replaced.jid]] == [[7, {"eu": True}]]
    for job in (own, replaced):
        (middleware,) = seen[job.jid]  # ran once
        assert (middleware["queue"], middleware["job"]["jid"]) == ("critical", job.jid)
        assert middleware["api_enqueued_at"] == pytest.approx(job.at.timestamp(), abs=0.002)
    assert [p.kind for p in store.history("ops_manual")] == ["manual", "manual"]


def test_sidekiq_runs_backfilled_ticks_once_with_the_tick_as_scheduled_at(
    sidekiq: Sidekiq, store: Store,
) -> None:
    """Three hours without invocations (window one hour): the two hours passed over are
    recorded, backfilled, and each tick runs once with `scheduled_at` = the tick."""
    cfg = load_config_text("""
missed_jobs_window: 1h
schedules:
  ops_backfilled:
    cron: "*/20 * * * *"
    class: RecordingWorker
    args: [3]
    include_metadata: true
""", source=SOURCE)
    start = sidekiq.redis_now().replace(second=5, microsecond=0) - timedelta(hours=4)
    run(sidekiq.client, cfg, now=start)
    run(sidekiq.client, cfg, now=start + timedelta(hours=3))
    (missed,) = store.missed(["ops_backfilled"])
    assert (missed.reason, missed.ticks) == ("window", 6)
    done = store.backfill(["ops_backfilled"])
    ticks = [job.tick for job in done.jobs]
    assert done.pushed == 6 and ticks == sorted(ticks)
    assert all(start < t <= start + timedelta(hours=2) for t in ticks)
    assert [job.jid for job in done.jobs] == [jid("ops_backfilled", t) for t in ticks]
    records = sidekiq.wait_runs({job.jid for job in done.jobs})
    performed, seen = by_kind(records, "perform"), by_kind(records, "middleware")
    for tick in ticks:
        job_id = jid("ops_backfilled", tick)
        assert [r["args"] for r in performed[job_id]] == [[3, {"scheduled_at": tick.timestamp()}]]
        (middleware,) = seen[job_id]
        # Enqueued when backfilled: Sidekiq's API reads it as a recent push, not the tick.
        assert middleware["api_enqueued_at"] > (start + timedelta(hours=3)).timestamp()
    assert store.missed(["ops_backfilled"]) == []
    assert store.history("ops_backfilled")[0].kind == "backfill"
