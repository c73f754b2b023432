"""The name index (kiqbeat:names, kiqbeat:facets, kiqbeat:disabled) is kept by the write
script in the same step as the definitions (redis/lua/names.lua): after any sequence of
writes, removals, document applies, set-asides, imports and index builds, it equals the
definitions hash — checked against HKEYS and each definition's own fields, independently of
the index's reader."""

from __future__ import annotations

import json
from typing import Any

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiqbeat.document.validate import encode_definition
from kiqbeat.errors import KiqbeatError
from kiqbeat.redis import keys
from kiqbeat.redis.definitions import Op, definition_sha, write
from kiqbeat.redis.names import build, index_names
from kiqbeat.redis.side import RedisSide
from kiqbeat.store import Store

NAMES = ["a", "b", "c/d", "é", "zz"]
DOC = "file:///etc/kiqbeat/schedules.yaml"


def definition(queue: str, enabled: bool) -> dict[str, Any]:
    return {"cron": "* * * * *", "class": "W", "queue": queue, "enabled": enabled}


def check_index(client: redis.Redis) -> None:
    """The index holds exactly the stored names, each with its own definition's facets, and
    set of disabled ones holds exactly the definitions with `enabled: false`."""
    stored = client.hgetall(keys.definitions(""))
    names = set(client.zrange(keys.names(""), 0, -1))
    assert names == set(stored), "the name index differs from HKEYS of the definitions"
    assert all(score == 0 for _, score in client.zrange(keys.names(""), 0, -1,
                                                        withscores=True))
    facets = client.hgetall(keys.facets(""))
    assert set(facets) == set(stored)
    disabled = set()
    for name, data in stored.items():
        raw = json.loads(data)
        want = [0 if raw.get("enabled", True) is False else 1,
                raw.get("queue", "default"), raw.get("source", "")]
        assert json.loads(facets[name]) == want, name
        if raw.get("enabled", True) is False:
            disabled.add(name)
    assert client.smembers(keys.disabled("")) == disabled


WRITES = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(NAMES), st.sampled_from(["default", "mail"]),
              st.booleans()),
    st.tuples(st.just("remove"), st.sampled_from(NAMES)),
    st.tuples(st.just("document"), st.frozensets(st.sampled_from(NAMES)),
              st.sampled_from(["default", "mail"])),
    st.tuples(st.just("reject"), st.sampled_from(NAMES)),
    st.tuples(st.just("import"), st.frozensets(st.sampled_from(NAMES)), st.booleans()),
    st.tuples(st.just("pause"), st.sampled_from(NAMES)),
    st.tuples(st.just("resume"), st.sampled_from(NAMES)),
    st.tuples(st.just("plain"), st.sampled_from(NAMES), st.booleans()),  # plain Redis
    st.tuples(st.just("plain remove"), st.sampled_from(NAMES)),
    st.tuples(st.just("build"),),
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(WRITES, min_size=1, max_size=12))
def test_the_index_equals_the_definitions_after_every_kind_of_write(
        redis_client: redis.Redis, steps: list[tuple[Any, ...]]) -> None:
    client = redis_client
    client.flushdb()
    store = Store(client)
    side = RedisSide(client)
    for step in steps:
        kind = step[0]
        try:
            if kind == "put":
                store.put(step[1], definition(step[2], step[3]))
            elif kind == "remove":
                store.remove(step[1], force=True)
            elif kind == "document":
                defs = {n: encode_definition(definition(step[2], True), DOC) for n in step[1]}
                side.apply_document(DOC, defs, f"d{len(step[1])}{step[2]}", now_ms=None)
            elif kind == "reject":
                data = client.hget(keys.definitions(""), step[1])
                if data is not None:
                    write(client, "", 1, [Op("reject", step[1], b"garbled",
                                             expect=definition_sha(data.encode()))], now_ms=None)
            elif kind == "import":
                store.import_definitions(
                    [(n, definition("imported", step[2])) for n in step[1]])
            elif kind == "pause":
                store.pause(step[1])
            elif kind == "resume":
                store.resume(step[1])
            elif kind == "plain":  # docs/store.md's protocol, with plain commands
                pipe = client.pipeline()
                pipe.hset(keys.definitions(""), step[1],
                          json.dumps(definition("plain", step[2])))
                pipe.hdel(keys.rejected(""), step[1])
                pipe.zadd(keys.due(""), {step[1]: 0})
                pipe.zadd(keys.names(""), {step[1]: 0})
                pipe.hdel(keys.facets(""), step[1])
                pipe.execute()
                index_names(client, "", [step[1]])  # as the console does on meeting it
            elif kind == "plain remove":
                pipe = client.pipeline()
                pipe.hdel(keys.definitions(""), step[1])
                pipe.zadd(keys.due(""), {step[1]: 0})
                pipe.zrem(keys.names(""), step[1])
                pipe.hdel(keys.facets(""), step[1])
                pipe.srem(keys.disabled(""), step[1])
                pipe.execute()
            else:
                build(client, "")
        except KiqbeatError:
            pass  # refused (another source's, not found): the refusal changed nothing
        check_index(client)
