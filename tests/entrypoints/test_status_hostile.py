"""`kiqbeat status` (text and --json) answers whatever one schedule's alert or outcome values
hold (issue 27): an incident's tick of 1e400 or past 9999, a record whose newest tick is
0xFFFFFFFFFFFF (year 10889), written with plain commands as another program would. The bad
schedule is garbled alone; the other is shown as ever."""

from __future__ import annotations

import json

import pytest
import redis

from kiqbeat.redis import keys
from kiqbeat.redis.progress import bucket
from kiqbeat.store import Store
from tests.support.cli import Kiqbeat

CRON = {"class": "W", "cron": "* * * * *"}
T0 = 1_790_000_000_000 - 1_790_000_000_000 % 60_000
GOOD_RECORD = T0.to_bytes(6, "big") + bytes([5, 0, 1, 1, 1, 0])  # one success at T0
HOSTILE = {
    "incident 1e400": ("incident", '{"e":"failing","t":1e400}'),
    "incident past 9999": ("incident", '{"e":"failing","t":99999999999999999}'),
    "incident 2^48-1": ("incident", '{"e":"failing","t":281474976710655}'),
    "record year 10889": ("record", b"\xff" * 6 + bytes([5, 0, 1, 1, 1, 0])),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_status_answers_with_one_unusable_alert_or_outcome_value(
        redis_url: str, kiqbeat: Kiqbeat, case: str) -> None:
    client = redis.Redis.from_url(redis_url)
    store = Store(client)
    store.put("victim", CRON)
    store.put("healthy", CRON)
    client.hset(keys.outcomes_bucket("", bucket("healthy")), "healthy", GOOD_RECORD)
    where, value = HOSTILE[case]
    if where == "incident":
        client.hset(keys.incidents(""), "victim", value)
    else:
        client.hset(keys.outcomes_bucket("", bucket("victim")), "victim", value)
    text = kiqbeat("status")
    assert text.code == 0, text.err
    assert "Traceback" not in text.err and "victim" in text.out and "healthy" in text.out
    ran = kiqbeat("status", "--json")
    assert ran.code == 0, ran.err
    json.loads(ran.out)
    assert "2026-09-21" in ran.out  # the healthy schedule's success (T0) still shown
    client.close()
