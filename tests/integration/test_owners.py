"""A definition whose `source` names no document the store knows (written by hand, or by
another tool) has a way out: the API and the CLI remove or replace it with an explicit
`force`, while a known document's schedules stay protected by default."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from kiqbeat.core.limits import MAX_DEFINITION_BYTES
from kiqbeat.document import load_config_text
from kiqbeat.engine import run
from kiqbeat.errors import ConfigError
from kiqbeat.redis.definitions import Op
from kiqbeat.redis.side import RedisSide
from kiqbeat.store import Store
from tests.support.engine import pushed_jobs
from tests.support.marks import stored_mark

SCHEDULES = "kiqbeat:schedules"
DUE = "kiqbeat:due"
MINUTELY: dict[str, Any] = {"cron": "* * * * *", "class": "MinuteWorker"}
HAND_WRITTEN = json.dumps({**MINUTELY, "class": "HandWorker", "source": "/etc/x"})


def hand_written(client: redis.Redis) -> Store:
    """A store holding `x`, written with plain commands claiming the document /etc/x (which
    no invocation ever applied), and planned once."""
    client.hset(SCHEDULES, "x", HAND_WRITTEN)
    client.zadd(DUE, {"x": 0})
    run(client, load_config_text("schedules: {}\n", source="none.yaml"))
    assert stored_mark(client, "x") is not None
    return Store(client)


def test_a_definition_naming_an_unknown_document_is_refused_naming_the_flag(
    client: redis.Redis,
) -> None:
    store = hand_written(client)
    for attempt, flag in [(lambda: store.remove("x"), "schedules remove NAME --force-owner"),
                          (lambda: store.put("x", MINUTELY), "schedules put NAME --force-owner"),
                          (lambda: store.update("x", MINUTELY),
                           "schedules update NAME --force-owner")]:
        with pytest.raises(ConfigError) as refused:
            attempt()
        assert "names '/etc/x' as its source" in str(refused.value)
        assert "knows no document of that name" in str(refused.value)
        assert flag in str(refused.value)
    assert client.hget(SCHEDULES, "x") == HAND_WRITTEN.encode()  # nothing changed


def test_force_removes_a_definition_naming_an_unknown_document_and_forgets_its_state(
    client: redis.Redis,
) -> None:
    store = hand_written(client)
    assert store.owner("x") == ("/etc/x", False)
    assert store.remove("x", force=True) is True
    assert not client.hexists(SCHEDULES, "x")
    assert client.zscore(DUE, "x") is None and stored_mark(client, "x") is None
    assert store.remove("x", force=True) is False  # gone: nothing to remove


@pytest.mark.parametrize("action", ["put", "update"])
def test_force_replaces_a_definition_naming_an_unknown_document_which_the_api_then_owns(
    client: redis.Redis, action: str,
) -> None:
    store = hand_written(client)
    write_it = store.put if action == "put" else store.update
    assert write_it("x", {**MINUTELY, "class": "ApiWorker"}, force=True) is True
    assert json.loads(client.hget(SCHEDULES, "x") or b"") == {**MINUTELY, "class": "ApiWorker"}
    assert store.owner("x") == ("", False)
    assert store.remove("x") is True  # the API's own now: no flag needed


def test_a_known_documents_schedule_stays_protected_and_force_overrides_it(
    client: redis.Redis,
) -> None:
    source = "s3://bucket/schedules.yaml"
    run(client, load_config_text("schedules:\n  x: {cron: '* * * * *', class: DocX}\n",
                                 source=source))
    store = Store(client)
    with pytest.raises(ConfigError) as refused:
        store.remove("x")
    assert f"belongs to {source}; remove it there" in str(refused.value)
    assert "--force-owner" in str(refused.value)  # for a document no longer applied
    assert store.owner("x") == (source, True)
    assert store.remove("x", force=True) is True
    assert not client.hexists(SCHEDULES, "x")


def test_a_forced_removal_is_refused_when_the_definition_changed_since_it_was_read(
    client: redis.Redis,
) -> None:
    """write.lua removes another source's definition only if it is the one the caller read
    (its SHA1): a definition written meanwhile is left alone."""
    hand_written(client)
    (result,) = RedisSide(client).write([Op("del", "x", expect="0" * 40)], now_ms=None)
    assert result == ("S", "")
    assert client.hget(SCHEDULES, "x") == HAND_WRITTEN.encode()
    assert pushed_jobs(client) == []


def test_a_forced_removal_is_refused_when_the_definition_was_swapped_for_one_over_the_limit(
    client: redis.Redis,
) -> None:
    """The same when the definition written meanwhile is over MAX_DEFINITION_BYTES (never
    read, so it cannot be the one read): "S", nothing removed, instead of the script failing
    on the SHA1 of a definition it did not read."""
    hand_written(client)
    big = json.dumps({**MINUTELY, "args": ["x" * MAX_DEFINITION_BYTES]})
    client.hset(SCHEDULES, "x", big)
    (result,) = RedisSide(client).write([Op("del", "x", expect="0" * 40)], now_ms=None)
    assert result == ("S", "")
    assert client.hget(SCHEDULES, "x") == big.encode()
    assert stored_mark(client, "x") is not None  # its state is not forgotten either
