"""A Redis database's whole state, read by type: two databases compared key by key (an
import against the same definitions written one at a time; tests/integration/
test_reference_mode.py keeps its own reader, which also sets history delays aside)."""

from __future__ import annotations

from typing import Any

import redis


def state(client: redis.Redis) -> dict[bytes, Any]:
    """Every key of the database and its value, read by its type."""
    found: dict[bytes, Any] = {}
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        if kind == b"string":
            value: Any = client.get(key)
        elif kind == b"hash":
            value = client.hgetall(key)
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
