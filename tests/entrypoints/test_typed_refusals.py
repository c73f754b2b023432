"""The store's refusals are typed (kiqbeat.errors: ScheduleNotFoundError, ScheduleExistsError,
OwnedByDocumentError), each still a ConfigError with the message it always had, and each
front end maps them once: the Python API raises the type, the CLI prints the message and
exits 1, a Lambda operator event fails with the type (its errorType). The HTTP API's
statuses: tests/web/test_api_refusals.py."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from handler import app

from kiqbeat.errors import (
    ConfigError,
    KiqbeatError,
    OwnedByDocumentError,
    ScheduleExistsError,
    ScheduleNotFoundError,
)
from kiqbeat.store import Store
from tests.support.cli import Kiqbeat

DIGEST = {"cron": "0 9 * * *", "class": "DigestWorker", "args": [42]}
HAND_WRITTEN = json.dumps({"cron": "* * * * *", "class": "HandWorker", "source": "/etc/x"})
NOT_FOUND = "no schedule 'nobody' in the store (kiqbeat:schedules)"
EXISTS = "schedule 'a' exists; update or put it instead"


class LambdaContext:
    """The LambdaContext attributes Powertools and the handler read."""

    function_name = "kiqbeat-test"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:kiqbeat-test"

    def __init__(self) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.ends_at = time.monotonic() + 30

    def get_remaining_time_in_millis(self) -> int:
        return int((self.ends_at - time.monotonic()) * 1000)


Invoke = Callable[[dict[str, Any]], dict[str, Any]]


@pytest.fixture
def invoke(kiqbeat: Kiqbeat) -> Iterator[Invoke]:
    """The real Lambda handler on the test's Redis (the `kiqbeat` runner's environment)."""
    app.forget_warm()
    yield lambda event: app.lambda_handler(event, LambdaContext())
    app.forget_warm()


@pytest.fixture
def store(redis_client: redis.Redis) -> Store:
    """The API's schedule "a", and "x", whose source names no document the store knows."""
    store = Store(redis_client)
    store.put("a", DIGEST)
    redis_client.hset("kiqbeat:schedules", "x", HAND_WRITTEN)
    return store


def test_no_schedule_of_that_name_is_one_type_with_one_message_through_every_front_end(
    store: Store, kiqbeat: Kiqbeat, invoke: Invoke,
) -> None:
    refusals: list[tuple[str, Callable[[], object]]] = [
        ("update", lambda: store.update("nobody", DIGEST)),
        ("pause", lambda: store.pause("nobody")),
        ("resume", lambda: store.resume("nobody")),
        ("skip", lambda: store.skip("nobody")),
        ("trigger", lambda: store.trigger("nobody")),
        ("history", lambda: store.history("nobody")),
        ("report", lambda: store.report("nobody")),
        ("status", lambda: store.status(["nobody"])),
        ("backfill", lambda: store.backfill(["nobody"], must_exist=True)),
    ]
    for what, call in refusals:
        with pytest.raises(ScheduleNotFoundError) as raised:
            call()
        assert isinstance(raised.value, ConfigError | KiqbeatError | ValueError), what
        assert str(raised.value) == NOT_FOUND, what
    # Without must_exist, the Store's backfill skips the name; every front end asks with it.
    assert store.backfill(["nobody"]).skipped == [("nobody", "no schedule of that name")]

    for argv in (["schedules", "update", "nobody", "--json-definition", json.dumps(DIGEST)],
                 ["schedules", "pause", "nobody"], ["schedules", "resume", "nobody"],
                 ["schedules", "skip", "nobody"], ["trigger", "nobody"],
                 ["history", "nobody"], ["report", "nobody"], ["status", "nobody"],
                 ["backfill", "nobody", "--dry-run"]):
        ran = kiqbeat(*argv)
        assert (ran.code, ran.err) == (1, f"kiqbeat: {NOT_FOUND}\n"), argv

    for event in ({"kiqbeat": "update", "name": "nobody", "definition": DIGEST},
                  {"kiqbeat": "pause", "name": "nobody"},
                  {"kiqbeat": "trigger", "name": "nobody"},
                  {"kiqbeat": "history", "name": "nobody"},
                  {"kiqbeat": "backfill", "names": ["nobody"], "dry_run": True}):
        with pytest.raises(ScheduleNotFoundError, match=r"^no schedule 'nobody' in the store"):
            invoke(event)


def test_adding_a_name_the_store_holds_is_one_type_with_one_message_through_every_front_end(
    store: Store, kiqbeat: Kiqbeat, invoke: Invoke, redis_client: redis.Redis,
) -> None:
    before = redis_client.hget("kiqbeat:schedules", "a")
    with pytest.raises(ScheduleExistsError, match=f"^{EXISTS}$"):
        store.add("a", {**DIGEST, "args": [1]})
    ran = kiqbeat("schedules", "add", "a", "--json-definition", json.dumps(DIGEST))
    assert (ran.code, ran.err) == (1, f"kiqbeat: {EXISTS}\n")
    with pytest.raises(ScheduleExistsError, match=f"^{EXISTS}$"):
        invoke({"kiqbeat": "add", "name": "a", "definition": {**DIGEST, "args": [2]}})
    assert redis_client.hget("kiqbeat:schedules", "a") == before


def test_changing_another_sources_schedule_is_one_type_naming_its_owner_through_every_front_end(
    store: Store, kiqbeat: Kiqbeat, invoke: Invoke, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    document = tmp_path / "schedule.yaml"
    document.write_text("schedules:\n  d: {cron: '* * * * *', class: DocD}\n")
    assert kiqbeat("run-once", "--config", str(document)).code == 0
    held = {name: redis_client.hget("kiqbeat:schedules", name) for name in ("x", "d")}
    calls: list[Callable[[], object]] = [
        lambda: store.put("x", DIGEST), lambda: store.update("x", DIGEST),
        lambda: store.remove("x"), lambda: store.put("d", DIGEST), lambda: store.remove("d")]
    for call in calls:
        with pytest.raises(OwnedByDocumentError) as raised:
            call()
        assert isinstance(raised.value, ConfigError)
        assert raised.value.owner in ("/etc/x", str(document))
        assert ("knows no document of that name" in str(raised.value)
                if raised.value.owner == "/etc/x" else
                f"belongs to {document}; " in str(raised.value))

    ran = kiqbeat("schedules", "put", "x", "--json-definition", json.dumps(DIGEST))
    assert ran.code == 1 and ran.err.startswith("kiqbeat: schedule 'x' names '/etc/x' as its "
                                                "source, but the store knows no document")
    ran = kiqbeat("schedules", "remove", "d")
    assert (ran.code, ran.err) == (1, f"kiqbeat: schedule 'd' belongs to {document}; remove "
                                      "it there (if that document is no longer applied "
                                      "anywhere: `kiqbeat schedules remove NAME --force-owner`"
                                      " (Store.remove(..., force=True)))\n")
    with pytest.raises(OwnedByDocumentError, match="knows no document of that name"):
        invoke({"kiqbeat": "update", "name": "x", "definition": DIGEST})
    owned = re.escape(f"belongs to {document}; change it there")
    with pytest.raises(OwnedByDocumentError, match=owned):
        invoke({"kiqbeat": "put", "name": "d", "definition": DIGEST})
    assert {name: redis_client.hget("kiqbeat:schedules", name) for name in ("x", "d")} == held
