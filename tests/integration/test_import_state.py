"""An import leaves the store exactly as the same definitions written one at a time do, and
write.lua's name index (written once per call: names.lua's names_flush) ends as one command
per operation would leave it, whatever the order of the operations in a call.

Two databases of one real redis-server start from the same state; one takes the import (in
several write calls), the other the same definitions through `Store.put`, one call each. Every
key is then compared by its type (tests/support/state.py), the audit trail excepted: it holds
one entry per operator action, and these are two kinds of action.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from kiqbeat.document.validate import encode_definition
from kiqbeat.errors import ConfigError
from kiqbeat.redis import keys, progress
from kiqbeat.redis.definitions import WRITE_BATCH, Op, definition_sha, write
from kiqbeat.store import Store
from tests.support.name_index import facets, indexed
from tests.support.state import state

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"]


def databases(url: str) -> Iterator[redis.Redis]:
    """Databases 0 and 1 of the test's server (database 0: tests/conftest.py), emptied."""
    for db in (0, 1):
        client = redis.Redis.from_url(url.replace("?db=0", f"?db={db}") if "?db=0" in url
                                      else url.removesuffix("/0") + f"/{db}")
        assert client.connection_pool.connection_kwargs.get("db", 0) == db
        client.flushdb()
        yield client


def compared(client: redis.Redis) -> dict[bytes, Any]:
    found = state(client)
    found.pop(keys.audit("").encode(), None)
    return found


def definitions() -> list[tuple[str, Any]]:
    """Valid ones of many shapes, invalid ones, and names given twice (in one write call and
    across calls: the later definition is the one that stays, each time)."""
    items: list[tuple[str, Any]] = []
    for i in range(2 * WRITE_BATCH + 50):
        definition: dict[str, Any] = {
            "class": "Worker", "cron": f"{i % 60} {'*' if i % 3 else i % 24} * * *",
            "tz": ZONES[i % len(ZONES)], "queue": f"q{i % 7}",
            "args": [i, "é", {"tenant": i % 5, "nested": [i, None, True]}]}
        if i % 11 == 0:
            definition["enabled"] = False
        if i % 13 == 0:
            del definition["cron"]
            definition["every"] = "5m"
        items.append((f"s{i:04d}", definition))
        if i == 5:  # s0003 again, in the same write call
            items.append(("s0003", {"class": "Again", "cron": "* * * * *", "enabled": False}))
    items += [
        ("bad-cron", {"class": "W", "cron": "61 * * * *"}),
        ("bad-source", {"class": "W", "cron": "* * * * *", "source": "mine"}),
        ("not-a-mapping", ["class", "W"]),
        ("bad-every", {"class": "W", "every": "0s"}),
        ("s0001", {"class": "Again", "cron": "* * * * *", "queue": "later"}),  # a later call
        ("s0011", {"class": "Enabled", "cron": "* * * * *"}),  # was disabled
        ("owned", {"class": "Mine", "cron": "* * * * *"}),  # a document's: refused
        ("kept", {"class": "Same", "cron": "* * * * *"}),  # the same bytes: unchanged
        ("was-off", {"class": "On", "cron": "* * * * *"}),
    ]
    return items


def before(client: redis.Redis) -> None:
    """The state both databases start from: a document's schedule, a schedule stored with
    the bytes the import gives it (its facets dropped by a plain-Redis writer), and a
    disabled one the import enables."""
    write(client, "", 1, [
        Op("put", "owned", encode_definition({"class": "D", "cron": "* * * * *"}, "doc.yml"),
           source="doc.yml"),
        Op("put", "kept", encode_definition({"class": "Same", "cron": "* * * * *"})),
        Op("put", "was-off", encode_definition({"class": "Off", "cron": "* * * * *",
                                                "enabled": False})),
    ], now_ms=None)
    client.zadd(keys.names(""), {"kept": 0})  # marked by a plain writer: facets unknown


def test_an_import_leaves_the_state_the_same_definitions_written_one_at_a_time_leave(
    redis_url: str,
) -> None:
    imported, one_by_one = databases(redis_url)
    for client in (imported, one_by_one):
        before(client)
    items = definitions()
    result = Store(imported).import_definitions(items)
    store = Store(one_by_one)
    refused = []
    for name, definition in items:
        try:
            store.put(name, definition)
        except ConfigError as exc:
            refused.append(name)
            assert name in exc.problems[0], exc.problems
    assert compared(imported) == compared(one_by_one)
    # Independent facts: what the import says it did is what the store holds.
    assert sorted(n for n, _ in result.invalid) == sorted(
        ["bad-cron", "bad-source", "not-a-mapping", "bad-every"])
    assert [n for n, _ in result.refused] == ["owned"] and sorted(refused) == sorted(
        ["bad-cron", "bad-source", "not-a-mapping", "bad-every", "owned"])
    stored = imported.hgetall(keys.definitions(""))
    assert len(stored) == 2 * WRITE_BATCH + 50 + 3
    assert b'"class":"Again"' in stored[b"s0003"] and b'"enabled":false' in stored[b"s0003"]
    index = indexed(imported)
    assert index[b"s0003"] == facets("default", False)
    assert index[b"s0001"] == facets("later", True)
    assert index[b"kept"] == facets("default", True)
    assert imported.zcard(keys.names("")) == 0
    assert imported.smembers(keys.disabled("")) == {
        f"s{i:04d}".encode() for i in range(0, 2 * WRITE_BATCH + 50, 11) if i != 11} | {
        b"s0003"}
    assert len(index) == len(stored)


@pytest.mark.parametrize("shards", [1, 3])
def test_write_lua_leaves_the_name_index_as_one_call_per_operation_would(
    redis_url: str, shards: int,
) -> None:
    # Names met more than once in one call, in every order: set then removed, removed then
    # set, enabled then disabled, a definition that is not JSON, one set aside, one added
    # twice (refused the second time). With shards, their index entries go into several due
    # indexes.
    def put(name: str, **fields: Any) -> Op:
        return Op("put", name, encode_definition({"class": "W", "cron": "* * * * *",
                                                  **fields}))

    late = encode_definition({"class": "W", "cron": "* * * * *", "queue": "late"})
    ops = [
        put("a"), put("a", enabled=False), put("b", enabled=False), Op("del", "b"),
        put("c", queue="x"), Op("del", "c"), put("c", enabled=False, queue="y"),
        Op("put", "d", b"not json"), put("e"), Op("add", "e", late), Op("add", "f", late),
        put("g", enabled=False), Op("reject", "g", b"set aside by a test",
                                    expect=definition_sha(encode_definition(
                                        {"class": "W", "cron": "* * * * *",
                                         "enabled": False}))),
        put("a", queue="last"),
    ]
    one_call, one_each = databases(redis_url)
    codes = write(one_call, "", shards, ops, now_ms=1_700_000_000_000)
    each = [write(one_each, "", shards, [op], now_ms=1_700_000_000_000)[0] for op in ops]
    assert codes == each
    assert "".join(code for code, _ in codes) == "+++++++++E++++"
    assert state(one_call) == state(one_each)
    assert indexed(one_call) == {
        b"a": facets("last", True), b"c": facets("y", False), b"d": b"?",
        b"e": facets("default", True), b"f": facets("late", True),
        b"g": facets("default", False)}
    assert one_call.smembers(keys.disabled("")) == {b"c", b"g"}


def test_a_removal_meeting_an_outcome_key_of_another_type_costs_the_call_nothing(
    redis_url: str,
) -> None:
    # A removal forgets the name's outcome record and progress record, in keys that hold
    # many names; one of another type (written by hand) holds nothing of it to forget, and
    # must not stop the call half-way, before the name index is written for every operation.
    def put(name: str) -> Op:
        return Op("put", name, encode_definition({"class": "W", "cron": "* * * * *"}))

    client, _ = databases(redis_url)
    write(client, "", 1, [put("b")], now_ms=1_700_000_000_000)
    client.set(f"kiqbeat:outcomes:{progress.bucket('b')}", "by hand")
    client.set(keys.progress_bucket("", progress.bucket("b")), "by hand")
    codes = write(client, "", 1, [put("a"), Op("del", "b"), put("c")],
                  now_ms=1_700_000_000_000)
    assert "".join(code for code, _ in codes) == "+++"
    assert client.hkeys(keys.definitions("")) == [b"a", b"c"]
    assert set(indexed(client)) == {b"a", b"c"}
    assert client.get(f"kiqbeat:outcomes:{progress.bucket('b')}") == b"by hand"
