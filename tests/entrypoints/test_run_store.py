"""`kiqbeat run` serves the store: its cadence follows the sub-minute schedules stored by any
writer (not only the document's), and its banner counts the stored schedules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from kiqbeat.entrypoints.loop import seconds_to_wake
from kiqbeat.store import Store

# Every 2 seconds: under the old cadence (each minute without a sub-minute schedule in the
# document) its ticks were pushed up to 60 s late, or not at all within the test.
EVERY_2S = {"cron": "*/2 * * * * *", "class": "PulseWorker", "queue": "pulse",
            "include_metadata": True}
MINUTELY = "schedules:\n  report: {cron: '* * * * *', class: ReportWorker}\n"
RUN_S = 9.0
# Generous scheduling slack on a loaded 2-core machine: the point is about a second against
# the 30-60 s of a once-a-minute loop, not timing precision.
SLACK_S = 1.5


def _run(redis_url: str, tmp_path: Path, document: str | None) -> tuple[str, str]:
    """`kiqbeat run` as a process for RUN_S seconds, then SIGTERM; its stdout and stderr."""
    argv = [sys.executable, "-m", "kiqbeat", "run", "--redis-url", redis_url]
    env = {k: v for k, v in os.environ.items() if "REDIS" not in k and "KIQBEAT" not in k}
    if document is not None:
        path = tmp_path / "schedule.yaml"
        path.write_text(document)
        argv += ["--config", str(path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        time.sleep(RUN_S)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return out, err


@pytest.mark.parametrize("document", [None, MINUTELY], ids=["store only", "minutely document"])
def test_run_pushes_each_sub_minute_tick_of_the_store_within_about_a_second(
    document: str | None, redis_url: str, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    """A `*/2 * * * * *` schedule written through the API, no sub-minute schedule in any
    document: each tick reaches its queue about when it falls due, once."""
    store = Store(redis.Redis.from_url(redis_url))
    store.put("pulse", EVERY_2S)
    store.put("hourly", {"cron": "0 * * * *", "class": "HourlyWorker"})
    out, _ = _run(redis_url, tmp_path, document)
    jobs = [json.loads(raw) for raw in redis_client.lrange("queue:pulse", 0, -1)]
    # The first invocation only registers it (no tick before first seen); then a tick
    # every 2 s: at least 3 in the rest of the run whatever the phase, were each on time.
    assert len(jobs) >= 3, out
    assert len({job["jid"] for job in jobs}) == len(jobs)
    lags = [job["enqueued_at"] - job["args"][-1]["scheduled_at"] for job in jobs]
    assert all(0 <= lag < SLACK_S for lag in lags), lags
    # Counted as it starts: the document is applied by the first invocation, after it.
    if document is None:
        assert "running the 2 schedules stored in kiqbeat:schedules (no document)" in out
    else:
        assert "running 1 schedule of the document" in out
        assert "and the 2 stored in kiqbeat:schedules" in out


def test_the_loop_wakes_at_the_earlier_of_the_next_due_entry_and_the_minute() -> None:
    now_s = 60 * 28_333_333 + 10.25  # 10.25 s into a minute
    assert seconds_to_wake(now_s, None) == pytest.approx(49.76)  # nothing more indexed
    assert seconds_to_wake(now_s, now_s + 4.75) == pytest.approx(4.76)  # a sub-minute tick
    assert seconds_to_wake(now_s, now_s + 3600) == pytest.approx(49.76)  # an hourly one
    # Already due (left for the next invocation): the next second, no hot loop.
    assert seconds_to_wake(now_s, now_s - 5) == pytest.approx(0.76)
