"""What the confinement fuzzer found in the JSON API, and the instants of issue 26: an instant
in range as written but out of range once converted is a 422 naming it; a stored value
written by hand (a definition with NaN, a reason that is not UTF-8) never makes a 500."""

from __future__ import annotations

import pytest
import redis

from tests.support.console import Served

OVERFLOWING = ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+14:00"]


@pytest.mark.parametrize("value", OVERFLOWING)
def test_an_overflowing_instant_is_a_422_at_every_api_field(console: Served, value: str) -> None:
    with console.api() as api:
        assert api.put("/api/v1/schedules/c", json={"class": "W", "cron": "* * * * *"}
                       ).status_code in (200, 201)
        answers = [
            api.put("/api/v1/schedules/d", json={"class": "W", "cron": "* * * * *",
                                                 "start_at": value}),
            api.put("/api/v1/schedules/e", json={"class": "W", "at": value}),
            api.post("/api/v1/schedules/c/pause", json={"until": value}),
            api.post("/api/v1/schedules/c/backfill", json={"since": value, "yes": True}),
            api.post("/api/v1/validate", json={"name": "v", "now": value,
                                               "definition": {"class": "W", "cron": "* * * * *"}}),
        ]
    for answer in answers:
        assert answer.status_code == 422, (answer.request.url, answer.text)
        assert value in answer.text and "Traceback" not in answer.text


def test_values_written_by_hand_never_make_the_api_answer_500(console: Served) -> None:
    client = redis.Redis.from_url(console.redis_url)
    client.hset("kiqbeat:schedules", "nan", b'{"class": "W", "cron": "* * * * *", "retry": NaN}')
    client.hset("kiqbeat:schedules", "big", b'{"class": "W", "cron": "* * * * *", "n": 1e999}')
    client.hset("kiqbeat:schedules", "bytes", b'{"class": "W", "cron": "* * * * *"}')
    client.hset("kiqbeat:rejected", "bytes", b"why \xff\xfe")
    client.hset("kiqbeat:schedules", "lone", b'{"class": "W", "cron": "* * * * *", '
                                             b'"description": "\\ud800"}')
    client.hset("kiqbeat:paused", "lone", b'{"note": "\\udcff", "until": null}')
    with console.api() as api:
        for path in ("/api/v1/status", "/api/v1/schedules", "/api/v1/schedules/nan",
                     "/api/v1/schedules/big", "/api/v1/schedules/bytes",
                     "/api/v1/schedules/lone"):
            answer = api.get(path)
            assert answer.status_code == 200, (path, answer.text)
        status = api.get("/api/v1/status").json()
        assert {"name": "bytes", "why": r"why \xff\xfe"} in status["set_aside"]
    client.close()
