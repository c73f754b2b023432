"""Moving a schedule's state back in time, as if its last invocation ran earlier: tests then
have ticks to push without waiting on the wall clock."""

from __future__ import annotations

import redis

from kiqbeat.redis import keys, progress


def rewind_mark(client: redis.Redis, name: str, seconds: float,
                shard: tuple[int, int] | None = None) -> None:
    """Move `name`'s watermark back by `seconds`, and its first-seen no later than that (no
    tick at or before first-seen is ever pushed), and mark it "plan me"."""
    stored = progress.read_marks(client, "", [name]).get(name)
    if isinstance(stored, progress.Mark):  # none: a new schedule, with nothing to move back
        back = max(0, stored.mark_ms - int(seconds * 1000))
        seen = min(stored.first_seen_ms or stored.mark_ms, back)
        progress.write_marks(client, "", {name: progress.Mark(back, seen)})
    client.zadd(keys.due("", shard), {name: 0})


def stored_mark(client: redis.Redis, name: str, namespace: str = "") -> progress.Mark | None:
    """`name`'s stored watermark and first-seen (redis/progress.py), None when it has none."""
    mark = progress.read_marks(client, namespace, [name]).get(name)
    assert not isinstance(mark, str), f"garbled mark of {name!r}: {mark!r}"
    return mark


def marked_names(client: redis.Redis, namespace: str = "") -> set[str]:
    """The names that have a stored watermark."""
    return set(progress.all_marks(client, namespace))
