"""Moving a schedule's state back in time, as if its last invocation ran earlier: tests then
have ticks to push without waiting on the wall clock. And the whole store's marks read and
written directly, through redis/progress.py's codec (the scripts alone move a mark in normal
running)."""

from __future__ import annotations

from collections.abc import Mapping

import redis
from redis.client import NEVER_DECODE

from kiqbeat.redis import keys, progress
from kiqbeat.redis.connection import redis_errors, reply_bytes, reply_text


def rewind_mark(client: redis.Redis, name: str, seconds: float,
                shard: tuple[int, int] | None = None) -> None:
    """Move `name`'s watermark back by `seconds`, and its first-seen no later than that (no
    tick at or before first-seen is ever pushed), and mark it "plan me"."""
    stored = progress.read_marks(client, "", [name]).get(name)
    if isinstance(stored, progress.Mark):  # none: a new schedule, with nothing to move back
        back = max(0, stored.mark_ms - int(seconds * 1000))
        seen = min(stored.first_seen_ms or stored.mark_ms, back)
        write_marks(client, "", {name: progress.Mark(back, seen)})
    client.zadd(keys.due("", shard), {name: 0})


def stored_mark(client: redis.Redis, name: str, namespace: str = "") -> progress.Mark | None:
    """`name`'s stored watermark and first-seen (redis/progress.py), None when it has none."""
    mark = progress.read_marks(client, namespace, [name]).get(name)
    assert not isinstance(mark, str), f"garbled mark of {name!r}: {mark!r}"
    return mark


def marked_names(client: redis.Redis, namespace: str = "") -> set[str]:
    """The names that have a stored watermark."""
    return set(all_marks(client, namespace))


def write_marks(client: redis.Redis, namespace: str, marks: Mapping[str, progress.Mark]) -> None:
    """Store marks as they are, keeping each record's history."""
    key_of = {n: keys.progress_bucket(namespace, progress.bucket(n)) for n in marks}

    def write(pipe: redis.client.Pipeline) -> None:
        histories = {}
        for name, key in key_of.items():
            raw = pipe.execute_command("HGET", key, name, **{NEVER_DECODE: True})  # type: ignore[no-untyped-call]
            histories[name] = progress.decode_record(raw)[1] if raw and len(raw) >= 12 else b""
        pipe.multi()
        for name, mark in marks.items():
            pipe.hset(key_of[name], name, progress.encode_record(mark, histories[name]))

    with redis_errors(client, "writing watermarks"):
        client.transaction(write, *set(key_of.values()))


def _buckets(client: redis.Redis, namespace: str) -> dict[str, dict[bytes, bytes]]:
    """Every progress bucket that exists (SCAN), with its fields undecoded (HSCAN)."""
    out: dict[str, dict[bytes, bytes]] = {}
    with redis_errors(client, "reading the progress buckets"):
        for key in [reply_text(k) for k in client.scan_iter(
                match=keys.progress_bucket(namespace, "*"), count=1000)]:
            fields: dict[bytes, bytes] = {}
            cursor = 0
            while True:
                cursor, page = client.execute_command(  # type: ignore[no-untyped-call]
                    "HSCAN", key, cursor, "COUNT", 1000, **{NEVER_DECODE: True})
                fields.update(page)
                if not int(cursor):
                    break
            out[key] = fields
    return out


def all_marks(client: redis.Redis, namespace: str = "") -> dict[str, progress.Mark]:
    """Every schedule's mark (a scan of every bucket); garbled records left out."""
    out: dict[str, progress.Mark] = {}
    for fields in _buckets(client, namespace).values():
        for name, raw in fields.items():
            try:
                mark, _ = progress.decode_record(reply_bytes(raw) or b"")
            except ValueError:
                continue
            if mark is not None:
                out[reply_text(name)] = mark
    return out


def names_with_state(client: redis.Redis, namespace: str = "") -> set[str]:
    """Every schedule name that has a mark or a history."""
    return {reply_text(n) for fields in _buckets(client, namespace).values() for n in fields}
