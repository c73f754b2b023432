"""What the operator's commands read (`kiqbeat status`, `missed`, `backfill`, `history`):
counts of the store, the due order, a schedule's stored state, its recorded missed ranges
and first-seen. Reads only; `kiqbeat.store` (status.py, operations.py) decides what they mean.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from kiqbeat.core.limits import MAX_PLANNABLE_MS
from kiqbeat.redis import keys, progress, scripts
from kiqbeat.redis.connection import name_bytes, redis_errors, reply_reason, reply_text
from kiqbeat.redis.definitions import BATCH, Oversized, read_definitions, scan_items
from kiqbeat.redis.due import due_keys

if TYPE_CHECKING:  # read histories only (a nothing-due run-once reads none)
    from kiqbeat.core.records import Push


@dataclass(frozen=True)
class Stored:
    """One schedule as stored: definition (Oversized when over the limit: not read) and
    state (None where absent)."""

    name: str
    definition: bytes | Oversized | None
    mark_ms: int | None
    first_seen_ms: int | None
    rejected: str | None
    runs: int = 0  # ticks pushed over its life (kiqbeat:runs; only kept with max_runs)
    skips: int = 0  # ticks still to skip (kiqbeat:skips)


def _count(value: bytes | None) -> int:
    """A counter field (another writer's garbage: 0)."""
    try:
        return max(0, int(value or 0))
    except ValueError:
        return 0


def _mark_ms(mark: progress.Mark | str | None) -> int | None:
    return mark.mark_ms if isinstance(mark, progress.Mark) else None


def _seen_ms(mark: progress.Mark | str | None) -> int | None:
    return mark.first_seen_ms if isinstance(mark, progress.Mark) else None


def read_stored(client: redis.Redis, namespace: str, names: Sequence[str],
                lua: scripts.Caller = scripts.SCRIPTS) -> list[Stored]:
    """The stored state of `names`: per `BATCH` names, the definitions (`read_definitions`)
    and one pipelined round trip for the rest.

    Names are sent as bytes (a name read from Redis that was not UTF-8 is sent back as the
    bytes it was), whatever the client's own encoding settings."""
    out: list[Stored] = []
    for first in range(0, len(names), BATCH):
        batch = list(names[first:first + BATCH])
        defs = read_definitions(client, namespace, batch, lua)
        sent = [name_bytes(name) for name in batch]
        with redis_errors(client, "reading stored schedules"):
            pipe = client.pipeline(transaction=False)
            pipe.hmget(keys.rejected(namespace), sent)
            pipe.hmget(keys.runs(namespace), sent)
            pipe.hmget(keys.skips(namespace), sent)
            rejected, runs, skips = pipe.execute()
        marks = progress.read_marks(client, namespace, batch)
        out += [Stored(name, d, _mark_ms(marks.get(name)), _seen_ms(marks.get(name)),
                       None if r is None else reply_reason(r), _count(n), _count(k))
                for name, d, r, n, k in zip(batch, defs, rejected, runs, skips, strict=True)]
    return out


@dataclass(frozen=True)
class Counts:
    """The store at a glance, for `kiqbeat status`."""

    schedules: int  # definitions stored
    indexed: int  # with an entry in this shard's due index
    overdue: int  # entries at or below now: planned by the next invocation
    set_aside: int  # definitions refused, waiting for a fix
    with_missed: int = 0  # schedules with missed ticks recorded (`kiqbeat missed`)
    unplannable: int = 0  # entries scored beyond MAX_PLANNABLE_MS: never planned (reindex)


def read_counts(client: redis.Redis, namespace: str,
                shards: Sequence[tuple[int, int] | None], now_ms: int) -> Counts:
    """Counts of the store (the index entries of `shards`), in one round trip."""
    with redis_errors(client, "counting stored schedules"):
        pipe = client.pipeline(transaction=False)
        pipe.hlen(keys.definitions(namespace))
        pipe.hlen(keys.rejected(namespace))
        pipe.hlen(keys.missed(namespace))
        for key in due_keys(namespace, shards):
            pipe.zcard(key)
            pipe.zcount(key, "-inf", now_ms)
            pipe.zcount(key, f"({MAX_PLANNABLE_MS}", "+inf")
        stored, aside, missed, *per_shard = (int(v) for v in pipe.execute())
    return Counts(stored, sum(per_shard[0::3]), sum(per_shard[1::3]), aside, missed,
                  sum(per_shard[2::3]))


def read_unplannable(client: redis.Redis, namespace: str,
                     shards: Sequence[tuple[int, int] | None], limit: int) -> list[str]:
    """Up to `limit` names of the entries of `shards`' due indexes scored beyond any instant
    kiqbeat plans (`MAX_PLANNABLE_MS`), which no invocation ever plans; one round trip."""
    with redis_errors(client, "reading the due index"):
        pipe = client.pipeline(transaction=False)
        for key in due_keys(namespace, shards):
            pipe.zrangebyscore(key, f"({MAX_PLANNABLE_MS}", "+inf", start=0, num=limit)
        pages: list[Any] = pipe.execute()
    return [reply_text(name) for page in pages for name in page][:limit]


def read_order(client: redis.Redis, namespace: str, shards: Sequence[tuple[int, int] | None],
               offset: int, limit: int) -> list[str]:
    """Names in due order (most overdue first) across `shards`, a page of them."""
    with redis_errors(client, "reading the due index"):
        pipe = client.pipeline(transaction=False)
        for key in due_keys(namespace, shards):
            pipe.zrange(key, 0, offset + limit - 1, withscores=True)
        pages: list[Any] = pipe.execute()
    merged = sorted((score, reply_text(name)) for page in pages for name, score in page)
    return [name for _, name in merged[offset:offset + limit]]


def read_missed(client: redis.Redis, namespace: str, names: Sequence[str]
                ) -> Iterable[tuple[str, str]]:
    """(name, its missed ranges as recorded) of each named schedule that has some, or of
    every one when no names are given (HSCAN pages); `core.records.parse_ranges` reads
    them."""
    key = keys.missed(namespace)
    if not names:
        for name, value in scan_items(client, key):
            yield name, reply_text(value)
        return
    for first in range(0, len(names), BATCH):  # one HMGET per BATCH names
        batch = list(names[first:first + BATCH])
        with redis_errors(client, f"reading {key}"):
            values = client.hmget(key, batch)
        yield from ((n, reply_text(v)) for n, v in zip(batch, values, strict=True) if v is not None)


def read_first_seen(client: redis.Redis, namespace: str, names: Sequence[str]
                    ) -> dict[str, int]:
    """When each of `names` was first seen, epoch ms (absent or garbled ones left out)."""
    return {name: mark.first_seen_ms for name, mark in
            progress.read_marks(client, namespace, names).items()
            if isinstance(mark, progress.Mark) and mark.first_seen_ms is not None}


def read_history(client: redis.Redis, namespace: str, name: str
                 ) -> tuple[list[Push] | bytes | None, bool]:
    """Schedule `name`'s pushes, newest first (None when it has none; its record's bytes
    when garbled: `progress.read_histories`) and whether its definition exists."""
    with redis_errors(client, f"reading {keys.definitions(namespace)}"):
        exists = client.hexists(keys.definitions(namespace), name)
    return progress.read_histories(client, namespace, [name]).get(name), bool(exists)
