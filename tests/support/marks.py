"""Moving a schedule's state back in time, as if its last invocation ran earlier: tests then
have ticks to push without waiting on the wall clock."""

from __future__ import annotations

import redis

from kiqbeat.redis import keys


def rewind_mark(client: redis.Redis, name: str, seconds: float,
                shard: tuple[int, int] | None = None) -> None:
    """Move `name`'s watermark back by `seconds`, and its first-seen no later than that (no
    tick at or before first-seen is ever pushed), and mark it "plan me"."""
    mark = int(client.hget(keys.watermarks(""), name) or 0)
    back = mark - int(seconds * 1000)
    client.hset(keys.watermarks(""), name, back)
    seen = int(client.hget(keys.first_seen(""), name) or mark)
    client.hset(keys.first_seen(""), name, min(seen, back))
    client.zadd(keys.due("", shard), {name: 0})
