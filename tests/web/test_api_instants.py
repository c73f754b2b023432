"""The JSON API's instants go through the one reader (core.instants, issue 26): one in range
as written but out of range once converted is a 422 naming it, never a 500."""

from __future__ import annotations

import pytest

from tests.web.conftest import Served

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
