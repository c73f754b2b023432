"""A stored outcome record that is not one (issue 27 on issue 26's promise): one schedule's bad
value costs only that schedule's record and never stalls Redis. A run of 0xFF bytes used to
decode to `inf` in fold.lua, and `varint(inf)` looped forever (BUSY to every client, SCRIPT
KILL: UNKILLABLE); each test talks to its own redis-server with a socket timeout, so a hang
fails the test and the server is stopped with it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from kiqbeat.core.outcomes import decode_outcomes
from kiqbeat.core.payload import jid_ms
from kiqbeat.core.varints import varint
from kiqbeat.demo.server import RedisServer
from kiqbeat.outcomes import fold_outcomes, read_outcomes
from kiqbeat.outcomes.records import read_health
from kiqbeat.redis import keys
from kiqbeat.redis.progress import bucket

T0 = 1_790_000_000_000 - 1_790_000_000_000 % 60_000
TICK = T0.to_bytes(6, "big")
RUN = b"\xff" * 150 + b"\x01"  # a varint of 151 bytes: `inf` to a Lua number


HOSTILE = {
    "beyond": TICK + b"\x00" + RUN + b"\x01" + bytes([2, 1, 0]),
    "success": TICK + RUN + b"\x00\x01" + bytes([2, 1, 0]),
    "count": TICK + b"\x00\x00" + RUN + bytes([2, 1, 0]),
    "attempt": TICK + b"\x00\x00\x01\x02" + RUN + b"\x00",
    "huge count": TICK + b"\x00\x00" + b"\xe9\x07" + bytes([2, 1, 0]),  # 1001 ticks said
    "year 10889": b"\xff" * 6 + b"\x00\x00\x01" + bytes([2, 1, 0]),
    # 600,000 hours before T0: a tick before 1970
    "before the epoch": TICK + b"\x00\x00\x01" + varint(600_000 * 32 + 3 * 8 + 1) + bytes([1, 0]),
}


@pytest.fixture
def own_client() -> Iterator[redis.Redis]:
    """A client with a 5 s socket timeout on a private redis-server (stopped after the test,
    hung or not)."""
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url, socket_timeout=5)
        yield client
        client.close()


def _report(client: redis.Redis, name: str, tick: int) -> None:
    entry = {"s": name, "t": tick, "j": jid_ms(name, tick), "e": "succeeded", "at": tick + 500,
             "a": 1, "d": 1000}
    client.lpush(keys.outcomes_inbox(""), json.dumps(entry, separators=(",", ":")))


@pytest.mark.parametrize("field", sorted(HOSTILE))
def test_a_record_that_is_not_one_costs_only_its_schedule(own_client: redis.Redis,
                                                           field: str) -> None:
    for name in ("victim", "healthy"):
        own_client.hset(keys.definitions(""), name, json.dumps({"class": "W", "cron": "* * * * *"}))
    own_client.hset(keys.outcomes_bucket("", bucket("victim")), "victim", HOSTILE[field])
    _report(own_client, "victim", T0 + 60_000)
    _report(own_client, "healthy", T0 + 60_000)
    fold_outcomes(own_client)
    changed = read_health(own_client, "", ["victim", "healthy"])
    assert own_client.ping()  # Redis still answers
    assert own_client.llen(keys.outcomes_inbox("")) == 0
    # both folded: the healthy one as ever, the victim into a fresh record
    assert changed["healthy"].last_success_tick_ms == T0 + 60_000
    assert changed["victim"].last_success_tick_ms == T0 + 60_000
    found = read_outcomes(own_client, "", ["victim", "healthy"])
    victim = found["victim"][0]
    assert victim is not None and [t.tick_ms for t in victim.ticks] == [T0 + 60_000]
    # Python's decoder keeps the same bounds
    with pytest.raises(ValueError, match="not an outcome record"):
        decode_outcomes(HOSTILE[field])


@pytest.mark.parametrize("tick", [253_370_764_800_000, 2**48 - 1])
def test_an_entry_from_9999_on_is_dropped_as_garbled(own_client: redis.Redis, tick: int) -> None:
    own_client.hset(keys.definitions(""), "a", json.dumps({"class": "W", "cron": "* * * * *"}))
    _report(own_client, "a", tick)
    _report(own_client, "a", T0)
    fold_outcomes(own_client)
    (health,) = read_health(own_client, "", ["a"]).values()
    assert health.last_tick_ms == T0


def test_a_start_reported_past_9999_is_kept_before_it(own_client: redis.Redis) -> None:
    """A running entry's start (its tick plus `at`'s offset) is an instant too: kept before
    9999-01-01, so the record reads back (it used to make a record Python refused)."""
    own_client.hset(keys.definitions(""), "a", json.dumps({"class": "W", "cron": "* * * * *"}))
    tick = 253_370_764_800_000 - 60_000  # the last minute of 9998
    entry = {"s": "a", "t": tick, "j": "x", "e": "started", "at": tick + 2**40, "a": 1}
    own_client.lpush(keys.outcomes_inbox(""), json.dumps(entry))
    fold_outcomes(own_client)
    (health,) = read_health(own_client, "", ["a"]).values()
    assert (health.last_outcome, health.last_tick_ms) == ("running", tick)
    record = read_outcomes(own_client, "", ["a"])["a"][0]
    assert record is not None and record.ticks[0].started_ms == 253_370_764_800_000 - 1
