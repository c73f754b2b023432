"""The Redis side as one object (`kiqbeat.redis.side.RedisSide`): it owns the client, key
prefix, shard count and scripts; the reads queued with a due read come back by name."""

from __future__ import annotations

import pytest
import redis

from kiqbeat.operator import Operator
from kiqbeat.redis import keys
from kiqbeat.redis.due import Reads
from kiqbeat.redis.side import RedisSide
from kiqbeat.store import Store


def test_reads_queued_with_a_due_read_come_back_under_their_names_not_their_places(
    client: redis.Redis,
) -> None:
    client.set("a", "one")
    client.rpush("list", "x", "y")

    def more(reads: Reads) -> None:
        reads.add("two", lambda pipe: (pipe.llen("list"), pipe.lrange("list", 0, -1)))
        reads.add("one", lambda pipe: pipe.get("a"))
        reads.add("none", lambda pipe: None)  # queues nothing

    replies = RedisSide(client).read_due(None, more=more).replies
    assert replies.one("one") == b"one"
    assert replies.all("two") == [2, [b"x", b"y"]]
    assert replies.all("none") == []
    assert replies.one("absent", "default") == "default"
    with pytest.raises(ValueError, match="'two' has 2 replies"):
        replies.one("two")


def test_a_read_queued_twice_under_one_name_is_refused(client: redis.Redis) -> None:
    def more(reads: Reads) -> None:
        reads.add("twice", lambda pipe: pipe.get("a"))
        reads.add("twice", lambda pipe: pipe.get("b"))

    with pytest.raises(ValueError, match="'twice' is queued already"):
        RedisSide(client).read_due(None, more=more)


def test_a_side_by_default_has_the_shard_count_the_store_records(client: redis.Redis) -> None:
    assert RedisSide.recorded(client, "ns").shards == 1
    client.set(keys.shards("ns"), 4)
    side = RedisSide.recorded(client, "ns")
    assert (side.namespace, side.shards) == ("ns", 4)
    assert side.layout == [(0, 4), (1, 4), (2, 4), (3, 4)]
    assert side.resharded(1).layout == [None]


def test_the_operators_commands_are_methods_of_every_store(client: redis.Redis) -> None:
    store = Store(client, namespace="ns", shards=2, actor="alice")
    assert isinstance(store, Operator)
    assert (store.client, store.namespace, store.shards) == (client, "ns", 2)
    other = store.acting("bob", note="INC-1").resharded(3)
    assert isinstance(other, Store)
    assert (other.actor, other.note, other.shards, store.shards) == ("bob", "INC-1", 3, 2)


def test_the_store_api_of_a_sharded_deployment_writes_into_its_shards_before_any_reindex(
    client: redis.Redis,
) -> None:
    from kiqbeat.engine import Engine
    from kiqbeat.redis.definitions import shard_of
    from kiqbeat.settings import Settings

    store = Engine(Settings(shard_count=3), client=client).store()
    store.put("digest:1", {"cron": "0 9 * * *", "class": "DigestWorker"})
    assert client.zscore(f"kiqbeat:due:{shard_of('digest:1', 3)}/3", "digest:1") is not None
    assert not client.exists("kiqbeat:due")


def test_a_definition_that_is_not_utf8_reads_as_its_bytes_through_a_decoding_client(
    redis_url: str,
) -> None:
    """A client that decodes replies with `surrogateescape` (as `connect` sets it) gives a
    definition that is not UTF-8 (written by another language, or by hand) back as the very
    bytes stored (`reply_bytes`, `name_bytes`' rule), never an encoding error."""
    stored = b'{"cron": "* * * * *", "class": "W\xff"}'
    with redis.Redis.from_url(redis_url, decode_responses=True,
                              encoding_errors="surrogateescape") as decoding:
        decoding.hset(keys.definitions(""), b"caf\xe9", stored)
        assert RedisSide(decoding).read_present(["caf\udce9"]) == {"caf\udce9": stored}


def test_hash_listings_read_names_that_are_not_utf8_through_a_strictly_decoding_client(
    client: redis.Redis, redis_client: redis.Redis,
) -> None:
    """A Store on a client that decodes replies strictly (redis-py's default errors) lists
    the set-aside definitions, the missed records and the open incidents whatever their
    names: a name another language wrote that is not UTF-8 is read as its bytes (HSCAN
    pages read raw), never a UnicodeDecodeError (issue 26)."""
    from kiqbeat.alerts.incidents import open_incidents

    client.hset(keys.rejected(""), b"caf\xe9", b"bad definition")
    client.hset(keys.missed(""), b"caf\xe9", b"not a record")
    client.hset(keys.incidents(""), b"caf\xe9", b'{"e": "failing", "t": 60000}')
    store = Store(redis_client)
    assert [name for name, _ in store.status().set_aside] == ["caf\udce9"]
    garbled: list[tuple[str, str]] = []
    assert store.missed(garbled=garbled) == []
    assert [name for name, _ in garbled] == ["caf\udce9"]
    assert [i.name for i in open_incidents(redis_client, "")] == ["caf\udce9"]
