"""A Redis database's whole state, read by type: two databases compared key by key (an
import against the same definitions written one at a time; the reference mode against the
devices, with the history delays set aside)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

# A hash's value as compared: (its key, its fields) -> the fields to compare.
HashView = Callable[[bytes, dict[bytes, bytes]], dict[bytes, Any]]


def state(client: redis.Redis, hashes: HashView | None = None) -> dict[bytes, Any]:
    """Every key of the database and its value, read by its type (a hash through `hashes`
    when given)."""
    found: dict[bytes, Any] = {}
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        if kind == b"string":
            value: Any = client.get(key)
        elif kind == b"hash":
            value = client.hgetall(key)
            if hashes is not None:
                value = hashes(key, value)
        elif kind == b"zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == b"list":
            value = client.lrange(key, 0, -1)
        elif kind == b"set":
            value = client.smembers(key)
        elif kind == b"stream":
            value = client.xrange(key)
        else:
            value = (kind, client.dump(key))
        found[key] = (kind, value, client.pttl(key) > 0)
    return found
