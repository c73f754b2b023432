"""The harness can fail: it counts duplicates, misses, early and invented jobs it is shown."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import redis

from kiqbeat.engine import run
from tests.integration.helpers import config, minute_floor, redis_now

from .harness import assert_clean, check

CFG = config("schedules:\n  m: {cron: '* * * * *', class: M}\n")


def test_check_counts_every_kind_of_violation(client: redis.Redis) -> None:
    """A copied job, a removed one, an early one and a foreign one are each counted."""
    start = minute_floor(redis_now(client)) - timedelta(minutes=10)
    for minute in range(0, 11):
        run(client, CFG, now=start + timedelta(minutes=minute))
    clean = check(client, CFG, after=start, until=start + timedelta(minutes=10), scenario="t",
                  runs=11)
    assert (clean.expected, clean.pushed) == (10, 10)
    assert_clean(clean)
    jobs = [json.loads(raw) for raw in client.lrange("queue:default", 0, -1)]
    early = jobs[2] | {"enqueued_at": jobs[2]["enqueued_at"] - 61}
    forged = [jobs[0], jobs[0], early, *jobs[3:]]  # a duplicate, jobs[1] missing, an early one
    client.delete("queue:default")
    client.rpush("queue:default", *(json.dumps(job) for job in forged))
    client.lpush("queue:other", json.dumps(jobs[3] | {"jid": "0" * 24}))  # an invented one
    dirty = check(client, CFG, after=start, until=start + timedelta(minutes=10), scenario="t",
                  runs=11)
    assert (dirty.duplicates, dirty.missed, dirty.early, dirty.unexpected) == (1, 1, 1, 1)
    with pytest.raises(AssertionError, match="duplicates=1, missed=1, early=1, unexpected=1"):
        assert_clean(dirty)
