"""The console answers whatever one schedule's alert or outcome values hold (issue 27): an
incident's tick of 1e400 or past 9999, a record whose newest tick is year 10889, a deadline
score of inf. The overview, the status API and /metrics all answer 200."""

from __future__ import annotations

import pytest
import redis

from kiqbeat.redis import keys
from kiqbeat.redis.progress import bucket
from kiqbeat.store import Store
from tests.support.console import READER_TOKEN, Served

CRON = {"class": "W", "cron": "* * * * *"}


def _hostile(client: redis.Redis, case: str) -> None:
    if case == "incident 1e400":
        client.hset(keys.incidents(""), "victim", '{"e":"failing","t":1e400}')
    elif case == "incident past 9999":
        client.hset(keys.incidents(""), "victim", '{"e":"failing","t":99999999999999999}')
    elif case == "record year 10889":
        client.hset(keys.outcomes_bucket("", bucket("victim")), "victim",
                    b"\xff" * 6 + bytes([5, 0, 1, 1, 1, 0]))
    else:  # a deadline of inf, the schedule watched
        client.hset(keys.expectations(""), "victim", "00 180000 0 0")
        client.zadd(keys.deadlines(""), {"victim": float("inf")})


@pytest.mark.parametrize("case", ["incident 1e400", "incident past 9999", "record year 10889",
                                  "deadline inf"])
def test_the_console_answers_with_one_unusable_value(console: Served, case: str) -> None:
    client = redis.Redis.from_url(console.redis_url)
    for name in ("victim", "healthy"):
        Store(client).put(name, CRON)
    _hostile(client, case)
    client.close()
    with console.browser() as browser:
        assert browser.get("/").status_code == 200
    with console.api(READER_TOKEN) as api:
        status = api.get("/api/v1/status")
        assert status.status_code == 200 and "incidents" in status.json()
        scraped = api.get("/metrics")
        assert scraped.status_code == 200 and "kiqbeat_" in scraped.text
