"""A schedule's life through today's engine and push script, racing invokers on a real Redis:
start_at, end_at, except and at are applied by the timetable, so no tick outside them is
ever pushed, and none twice."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import redis

from kiqbeat.core.payload import jid
from kiqbeat.engine import run

from .helpers import config, pushed_jobs

T0 = datetime(2025, 12, 24, 0, 0, tzinfo=UTC)
LIFE = """
schedules:
  bounded:
    cron: "0 * * * *"
    class: A
    start_at: "2025-12-24T05:00:00Z"
    end_at: "2025-12-26T20:00:00Z"
    except: ['2025-12-25']
  once:
    at: "2025-12-24T17:00:00Z"
    class: B
"""


def test_racing_invokers_push_only_the_ticks_within_the_bounds_and_off_the_excluded_dates(
        redis_url: str) -> None:
    cfg = config(LIFE)
    instants = [T0 + timedelta(minutes=20 * k) for k in range(3 * 72 + 1)]  # three days

    def invoker() -> None:
        client = redis.Redis.from_url(redis_url)
        try:
            for now in instants:
                run(client, cfg, now=now)
        finally:
            client.close()

    threads = [threading.Thread(target=invoker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client = redis.Redis.from_url(redis_url)
    jobs = pushed_jobs(client)
    # Written out by hand: 05:00-23:00 on the 24th, nothing on the 25th, 00:00-20:00 on the 26th.
    hours = ([T0 + timedelta(hours=h) for h in range(5, 24)]
             + [T0 + timedelta(days=2, hours=h) for h in range(21)])
    expected = {jid("bounded", t) for t in hours} | {jid("once", T0 + timedelta(hours=17))}
    assert len(jobs) == len({j["jid"] for j in jobs})  # none twice
    assert {j["jid"] for j in jobs} == expected
    assert client.hget("kiqbeat:missed", "bounded") is None  # excluded is not missed
    # Both ended: their index entries are scored where nothing is ever due.
    assert {n.decode(): s for n, s in client.zrange("kiqbeat:due", 0, -1, withscores=True)
            } == {"bounded": 253_402_300_799_999, "once": 253_402_300_799_999}
    client.close()
