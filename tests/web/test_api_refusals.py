"""The HTTP API maps the store's typed refusals once (`kiqbeat.web.api.error_answer`):
ScheduleNotFoundError 404, OwnedByDocumentError 409, any other ConfigError 422, each with the
store's message; and it reads no schedule first to choose the status: the refusal comes
from the write (or the read) the request makes anyway."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import redis

from kiqbeat.errors import OwnedByDocumentError, ScheduleNotFoundError
from kiqbeat.redis import keys
from kiqbeat.store import Store
from tests.support.console import Served, Start

DIGEST = {"cron": "0 9 * * *", "class": "DigestWorker", "args": [42]}
NOT_FOUND = "no schedule 'nobody' in the store (kiqbeat:schedules)"
READ_ONLY = ("schedule 'x' belongs to the document '/etc/x': change it there (it is "
             "read-only here)")
HAND_WRITTEN = '{"cron": "* * * * *", "class": "HandWorker", "source": "/etc/x"}'


def path(name: str, action: str = "") -> str:
    return "/api/v1/schedules/" + quote(name, safe="") + (f"/{action}" if action else "")


@pytest.fixture
def quiet(start_console: Start) -> Served:
    """A console without its thread: every Redis command it sends is a request's."""
    return start_console(background=False)


@contextlib.contextmanager
def commands(redis_url: str) -> Iterator[list[dict[str, Any]]]:
    """The commands Redis runs meanwhile, as MONITOR shows them (those a script runs
    included, with client_type "lua")."""
    seen: list[dict[str, Any]] = []
    stop = "kiqbeat-test-monitor-stop"
    client = redis.Redis.from_url(redis_url)
    with client.monitor() as monitor:
        monitor.next_command  # noqa: B018 (the MONITOR reply is read by the first call)
        started = threading.Event()

        def watch() -> None:
            started.set()
            while True:
                command = monitor.next_command()
                if stop in command["command"]:
                    return
                seen.append(command)

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        started.wait(5)
        redis.Redis.from_url(redis_url).ping()
        try:
            yield seen
        finally:
            redis.Redis.from_url(redis_url).echo(stop)
            thread.join(10)
    client.close()


def row_reads(seen: list[dict[str, Any]]) -> list[str]:
    """The reads of a schedule's row (`Store.rows`: its set-aside reason, runs and skips,
    pipelined outside any script) among `seen`."""
    hashes = (keys.rejected(""), keys.runs(""), keys.skips(""))
    return [c["command"] for c in seen if c.get("client_type") != "lua"
            and c["command"].upper().startswith("HMGET")
            and c["command"].split(" ")[1] in hashes]


def test_no_schedule_of_that_name_is_404_with_the_stores_message_on_every_address(
    console: Served, store: Store,
) -> None:
    with console.api() as api:
        answers = {
            "get": api.get(path("nobody")),
            "report": api.get(path("nobody", "report")),
            "delete": api.delete(path("nobody")),
            "pause": api.post(path("nobody", "pause")),
            "resume": api.post(path("nobody", "resume")),
            "skip": api.post(path("nobody", "skip")),
            "trigger": api.post(path("nobody", "trigger")),
            "backfill": api.post(path("nobody", "backfill"), json={"dry_run": True}),
        }
    assert {what: (a.status_code, a.json()) for what, a in answers.items()} == {
        what: (404, {"error": NOT_FOUND, "problems": [NOT_FOUND]}) for what in answers}
    assert store.get("nobody") is None and store.pauses(["nobody"]) == {}


def test_another_sources_schedule_is_409_read_only_and_left_as_it_was(
    console: Served, store: Store, redis_client: redis.Redis,
) -> None:
    redis_client.hset(keys.definitions(""), "x", HAND_WRITTEN)
    with console.api() as api:
        put = api.put(path("x"), json=DIGEST)
        delete = api.delete(path("x"))
        invalid = api.put(path("x"), json={"cron": "0 9 * * *"})  # the messages come first
    for answer in (put, delete):
        assert (answer.status_code, answer.json()) == (
            409, {"error": READ_ONLY, "problems": [READ_ONLY]})
    assert invalid.status_code == 422 and "'class'" in invalid.json()["error"]
    assert redis_client.hget(keys.definitions(""), "x") == HAND_WRITTEN
    with pytest.raises(OwnedByDocumentError) as raised:  # what the console mapped
        store.put("x", DIGEST)
    assert raised.value.owner == "/etc/x"


def test_a_refusal_is_the_writes_own_the_console_reads_no_row_first(
    quiet: Served, store: Store, redis_url: str, redis_client: redis.Redis,
) -> None:
    redis_client.hset(keys.definitions(""), "x", HAND_WRITTEN)
    with quiet.api() as api, commands(redis_url) as seen:
        refused = [api.put(path("x"), json=DIGEST), api.delete(path("x")),
                   api.delete(path("nobody")), api.post(path("nobody", "pause")),
                   api.post(path("nobody", "resume")), api.post(path("nobody", "skip")),
                   api.post(path("nobody", "trigger")),
                   api.post(path("nobody", "backfill"), json={"dry_run": True})]
    assert [a.status_code for a in refused] == [409, 409] + [404] * 6
    assert seen, "MONITOR saw nothing"
    assert row_reads(seen) == []
    with pytest.raises(ScheduleNotFoundError):
        store.trigger("nobody")


def test_a_schedule_created_is_201_replaced_200_and_its_row_is_the_answer(
    quiet: Served, store: Store,
) -> None:
    with quiet.api() as api:
        created = api.put(path("a"), json=DIGEST)
        replaced = api.put(path("a"), json={**DIGEST, "args": [7]})
        again = api.put(path("a"), json={**DIGEST, "args": [7]})
    assert [a.status_code for a in (created, replaced, again)] == [201, 200, 200]
    row = store.get("a")
    assert row is not None and row.definition == {**DIGEST, "args": [7]}
    assert replaced.json()["definition"] == row.definition
