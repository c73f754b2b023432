"""The operator's records in Redis: reading missed ranges and histories, and the two scripts
that push outside an invocation — a backfill's recorded ticks (backfill.lua) and a manual
run (trigger.lua). `kiqbeat.store.Store` decides what to push; this carries it out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from kiqbeat.errors import shown
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import redis_errors, reply_text
from kiqbeat.redis.store import BATCH, Oversized, read_definitions, scan_items


def _hmget(client: redis.Redis, key: str, names: Sequence[str]) -> Iterator[tuple[str, Any]]:
    """(name, value) of each of `names` present in hash `key`, one HMGET per `BATCH`."""
    for first in range(0, len(names), BATCH):
        batch = list(names[first:first + BATCH])
        with redis_errors(client, f"reading {key}"):
            values = client.hmget(key, batch)
        yield from ((n, v) for n, v in zip(batch, values, strict=True) if v is not None)


def read_records(client: redis.Redis, key: str, names: Sequence[str]
                 ) -> Iterable[tuple[str, str]]:
    """(name, record) of each named schedule that has one in hash `key`, or of every one
    when no names are given (HSCAN pages)."""
    if not names:
        for name, value in scan_items(client, key):
            yield name, value.decode(errors="replace")
        return
    for name, found in _hmget(client, key, names):
        yield name, reply_text(found)


def read_present(client: redis.Redis, namespace: str, names: Sequence[str],
                 lua: scripts.Caller = scripts.SCRIPTS) -> dict[str, bytes | Oversized]:
    """The stored definitions of `names`, absent ones left out, over the limit ones as
    Oversized (never read: `kiqbeat.redis.store.read_definitions`)."""
    return {name: d for name, d in zip(names, read_definitions(client, namespace, names, lua),
                                       strict=True) if d is not None}


def read_first_seen(client: redis.Redis, namespace: str, names: Sequence[str]
                    ) -> dict[str, int]:
    """When each of `names` was first seen, epoch ms (absent or garbled ones left out)."""
    seen = {}
    for name, value in _hmget(client, keys.first_seen(namespace), names):
        text = reply_text(value)
        if text.isascii() and text.isdigit():
            seen[name] = int(text)
    return seen


@dataclass
class Piece:
    """Part of one schedule's record that one backfill call settles: (after_ms, through_ms]
    is taken out of the record, and the jobs (tick_ms, JSON) pushed if still recorded."""

    name: str
    after_ms: int
    through_ms: int
    queue: str
    sha: str
    jobs: list[tuple[int, str]]


def push_backfill(client: redis.Redis, namespace: str, pieces: Sequence[Piece],
                  history: int, lua: scripts.Caller = scripts.SCRIPTS) -> tuple[int, int, int, str]:
    """One atomic backfill call: (pushed, already, stale, flags), flags one "1"/"0" per job
    in order."""
    queue_index: dict[str, int] = {}
    parts: list[bytes] = []
    for piece in pieces:
        target = queue_index.setdefault(piece.queue, len(queue_index) + 1)
        parts.append(b"%s\n%d %d %d %d %s\n" % (
            piece.name.encode(errors="surrogateescape"), piece.after_ms, piece.through_ms,
            len(piece.jobs), target, piece.sha.encode()))
        for tick_ms, job in piece.jobs:
            payload = job.encode()
            parts += (b"%d %d\n" % (tick_ms, len(payload)), payload)
    queues = list(queue_index)
    script_keys = [keys.missed(namespace), keys.definitions(namespace), keys.history(namespace),
                   keys.queues(namespace), *(keys.queue(namespace, q) for q in queues)]
    with redis_errors(client, "backfilling missed ticks"):
        pushed, already, stale, flags = lua.call(
            scripts.BACKFILL, client, script_keys,
            [history, len(queues), *queues, b"".join(parts)])
    return int(pushed), int(already), int(stale), reply_text(flags)


def push_manual(client: redis.Redis, namespace: str, name: str, sha: str, queue: str,
                jid: str, at_ms: int, job: str, history: int,
                lua: scripts.Caller = scripts.SCRIPTS) -> bool:
    """Push one manual job (trigger.lua), once even when the call is re-sent; False when
    the definition changed meanwhile."""
    script_keys = [keys.definitions(namespace), keys.history(namespace), keys.queues(namespace),
                   keys.queue(namespace, queue), keys.manual(namespace)]
    with redis_errors(client, f"running schedule {shown(name)} now"):
        done = lua.call(scripts.TRIGGER, client, script_keys,
                        [name, sha, history, queue, jid, at_ms, job])
    return int(done) > 0
