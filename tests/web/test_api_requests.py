"""The HTTP API's requests on a schedule run through the request model of the CLI and the
Lambda (issue 28): each is read by `kiqbeat.entrypoints.requests.from_fields`, so a bad value
is refused with the message the CLI and a Lambda event get (only the field's name is each
front end's), and one dispatch on the request's kind decides what runs."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from kiqbeat.entrypoints.outcomes import BY_KIND
from kiqbeat.entrypoints.requests import FIELDS, from_event
from kiqbeat.errors import ConfigError
from kiqbeat.redis import keys
from kiqbeat.store import Store
from kiqbeat.web import api
from tests.support.console import Served, Start

DIGEST = {"cron": "0 9 * * *", "class": "DigestWorker", "args": [42]}


def path(name: str, action: str = "") -> str:
    return "/api/v1/schedules/" + quote(name, safe="") + (f"/{action}" if action else "")


def test_every_schedule_address_is_a_request_kind_the_one_dispatch_runs() -> None:
    kinds = {kind for kind, _ in api.ACTIONS.values()}
    assert kinds == set(api.FRONT)
    # each one a request of the CLI's and the Lambda's model, run by their dispatch
    assert kinds <= set(FIELDS) and kinds <= {*BY_KIND, "backfill"}


@pytest.mark.parametrize(("action", "body", "field"), [
    ("skip", {"count": 0}, "count"),
    ("skip", {"count": 10**9}, "count"),
    ("trigger", {"args": {"a": 1}}, "args"),
    ("pause", {"until": "tomorrow"}, "until"),
    ("resume", {"note": "x" * 5000}, "note"),
])
def test_a_bad_value_is_refused_with_the_cli_and_lambda_message(
    start_console: Start, store: Store, action: str, body: dict[str, Any], field: str
) -> None:
    store.put("a", DIGEST)
    served: Served = start_console(background=False)
    with served.api() as client:
        answer = client.post(path("a", action), json=body)
    assert answer.status_code == 422, answer.text
    with pytest.raises(ConfigError) as refused:
        from_event({"kiqbeat": action, "name": "a", **body})
    lambda_message = str(refused.value)
    # The Lambda's message names the event's field; the API's the bare field: else equal.
    assert answer.json()["error"] == lambda_message.replace(f'the event\'s "{field}"', field)
    assert store.get("a") is not None and store.pauses(["a"]) == {}  # nothing was done


def test_a_field_the_request_does_not_take_is_refused_and_nothing_runs(
    start_console: Start, store: Store
) -> None:
    store.put("a", DIGEST)
    served: Served = start_console(background=False)
    with served.api() as client:
        unknown = client.post(path("a", "pause"), json={"note": "x", "untill": None})
        named = client.post(path("a", "resume"), json={"name": "b"})
        acted = client.post(path("a", "skip"), json={"actor": "mallory"})
    assert unknown.status_code == 422 and "'untill' is not a field of 'pause'" in unknown.text
    assert named.status_code == 422 and acted.status_code == 422
    assert store.pauses(["a"]) == {}
    assert store.client.hget(keys.skips(""), "a") is None
