"""`overlap: buffer_one` through the HTTP API and the console (issue 27): taken as every
other source takes it, refused with the values it takes when misspelt, described on the
schedule's page, and a held tick shown as such."""

from __future__ import annotations

import html

import redis

from kiqbeat.store import Store
from tests.support.console import DIGEST, Served, path


def test_the_api_takes_buffer_one_and_the_page_describes_it(
    console: Served, store: Store, redis_client: redis.Redis
) -> None:
    with console.api() as api:
        created = api.put(path("long"), json={**DIGEST, "overlap": "buffer_one"})
        misspelt = api.put(path("typo"), json={**DIGEST, "overlap": "buffer"})
        got = api.get(path("long"))
    assert created.status_code == 201, created.text
    assert got.json()["life"]["overlap"] == "buffer_one"
    assert misspelt.status_code == 422 and "buffer_one" in misspelt.text
    assert store.get("typo") is None
    with console.browser() as browser:
        page = html.unescape(browser.get("/schedule", params={"name": "long"}).text)
    assert "buffer_one: a tick due while its previous job waits or runs is held" in page
