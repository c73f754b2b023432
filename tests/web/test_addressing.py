"""Every schedule is reachable through the API by exactly one path, and hostile input gets a
4xx with a message, never a 500 (issue 26, item 7).

The rule (docs/api.md): `/api/v1/schedules/NAME[/ACTION]`, NAME percent-encoded with every
`/` in it as `%2F`; the raw path is split at its first `/` after `schedules/` before it is
decoded."""

from __future__ import annotations

import html
import json

import redis

from kiqbeat.redis import keys
from kiqbeat.store import Store
from tests.support.console import Served, form_of

DIGEST = {"cron": "0 9 * * *", "class": "DigestWorker", "args": [1]}


def test_a_name_holding_a_newline_or_bytes_not_utf8_is_addressable(
    console: Served, redis_client: redis.Redis, store: Store
) -> None:
    # Written by another language: kiqbeat's writers refuse such names, plain HSET does not.
    raw = redis.Redis.from_url(console.redis_url)
    raw.hset(keys.definitions(""), "a\nb", json.dumps(DIGEST))
    raw.hset(keys.definitions(""), b"bad\xff", json.dumps(DIGEST))
    raw.close()
    with console.api() as api:
        newline = api.get("/api/v1/schedules/a%0Ab")
        paused = api.post("/api/v1/schedules/a%0Ab/pause", json={"note": "INC-1"})
        not_utf8 = api.get("/api/v1/schedules/bad%FF")
        gone = api.get("/api/v1/schedules/a%0Ac")
    assert newline.status_code == 200 and newline.json()["name"] == "a\nb"
    assert paused.status_code == 200 and paused.json()["changed"] is True
    assert store.pauses(["a\nb"])  # the record is the schedule's, by its exact name
    assert not_utf8.status_code == 200 and not_utf8.json()["name_hex"] == "626164ff"
    assert gone.status_code == 404


def test_a_schedule_named_x_slash_pause_and_pausing_x_are_told_apart(
    console: Served, store: Store
) -> None:
    with console.api() as api:
        assert api.put("/api/v1/schedules/x", json=DIGEST).status_code == 201
        created = api.put("/api/v1/schedules/x%2Fpause", json=DIGEST)
        assert created.status_code == 201 and created.json()["name"] == "x/pause"
        # PUT on an action is not a write of a schedule named "x/pause" ...
        wrong = api.put("/api/v1/schedules/x/pause", json=DIGEST)
        assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
        # ... the action pauses x, and the encoded name pauses the other one.
        assert api.post("/api/v1/schedules/x/pause").json()["name"] == "x"
        x, other = store.get("x"), store.get("x/pause")
        assert x is not None and other is not None and not x.enabled and other.enabled
        assert api.post("/api/v1/schedules/x%2Fpause/pause").json()["name"] == "x/pause"
        assert api.get("/api/v1/schedules/x%2Fpause").json()["name"] == "x/pause"
        unknown = api.post("/api/v1/schedules/x/explode")
        nameless = api.get("/api/v1/schedules/")
    assert unknown.status_code == 404 and "%2F" in unknown.json()["error"]
    assert nameless.status_code == 404
    assert sorted(n for n, _ in store.export()) == ["x", "x/pause"]


def test_a_limit_of_5000_digits_is_a_422_with_a_message(console: Served) -> None:
    with console.api() as api:
        answers = [api.get(path, params={"limit": value})
                   for path in ("/api/v1/schedules", "/api/v1/audit")
                   for value in ("9" * 5000, "\u00b2", "1e3", "-1", "0", "201")]
    for answer in answers:
        assert answer.status_code == 422, answer.text
        assert "limit" in answer.json()["error"] and "1 to 200" in answer.json()["error"]


def test_a_form_skip_count_of_superscript_two_and_args_nested_5000_deep_are_refused(
    console: Served, store: Store
) -> None:
    """The form's text is read as the command line's (the request model's own reading and
    messages): no digit but ASCII's, no nesting deeper than Sidekiq reads."""
    store.put("a", DIGEST)
    with console.browser() as browser:
        page = browser.get("/schedule", params={"name": "a"}).text
        skip = form_of(page, "/act", 'value="skip"')
        trigger = form_of(page, "/act", 'value="trigger"')
        counts = [browser.post("/act", data={**skip, "count": count})
                  for count in ("\u00b2", "9" * 5000, "\u0663")]  # ², 5,000 nines, Arabic 3
        args = [browser.post("/act", data={**trigger, "args": "[" * 5000 + "]" * 5000}),
                browser.post("/act", data={**trigger, "args": "[" * 5000})]
    for answer in counts:
        assert answer.status_code == 422, answer.text[:300]
        assert "count: expected a whole number of ticks, 1 to 10,000" in answer.text
    for answer in args:
        assert answer.status_code == 422, answer.text[:300]
        assert "args nests deeper than the 100 levels Sidekiq" in html.unescape(answer.text)
    row = store.get("a")
    assert row is not None and row.life.get("skips", 0) in (0, None)


def test_an_api_body_nested_5000_deep_is_a_422(console: Served, store: Store) -> None:
    store.put("a", DIGEST)
    deep = "[" * 5000 + "]" * 5000
    with console.api() as api:
        answers = [api.post("/api/v1/schedules/a/trigger", content='{"args": ' + deep + "}",
                            headers={"content-type": "application/json"}),
                   api.put("/api/v1/schedules/b", content='{"args": ' + deep + "}",
                           headers={"content-type": "application/json"}),
                   api.post("/api/v1/validate", content='{"definition": {"args": ' + deep
                            + "}}", headers={"content-type": "application/json"})]
    assert [a.status_code for a in answers] == [422, 422, 422]
