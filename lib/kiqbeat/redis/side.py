"""The Redis side of kiqbeat as one object: `RedisSide` owns the client, the key prefix
(namespace), the shard count and the way scripts are run, so callers stop passing them.

Its methods are the Redis side's operations, by role, each carried out by the module named
for it:

- `redis.clock`: the Redis clock, read once per public call and passed down (`now_ms`);
- `redis.due`: the due index — what is due (with further reads named);
- `redis.definitions`: definitions — reading, writing (write.lua), size checks;
- `redis.documents`: documents — applied as diffs, their digests and indexes;
- `redis.pushes`: every push — an invocation's, a backfill's, a manual run's.

A call that needs only the client, the key prefix and the shard count (`redis.operator_reads`,
reading pauses, document digests, scans of names and set-aside definitions, reindex and
rescore) is made to its module's function, with `client`, `namespace` (and `shards`).

One wire format per script, in one place on the Python side: the module that calls it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

import redis

from kiqbeat.core.limits import DEFAULT_HISTORY
from kiqbeat.core.pause import Pause
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.errors import ConfigError, shown
from kiqbeat.redis import (
    clock,
    definitions,
    documents,
    due,
    keys,
    pauses,
    scripts,
)
from kiqbeat.redis.connection import redis_errors, reply_text
from kiqbeat.redis.definitions import Applied, Op, Oversized, StartedWrite
from kiqbeat.redis.documents import DocumentChange
from kiqbeat.redis.due import DueRead, Reads

if TYPE_CHECKING:  # the push path: loaded when used
    from kiqbeat.redis import pushes
    from kiqbeat.redis.frames import Piece

Shard = tuple[int, int] | None  # (index, count), or None: the index is not split


@dataclass(frozen=True)
class RedisSide:
    """One store in Redis: `client`, key prefix `namespace`, due index split into `shards`,
    scripts run by `lua` (EVALSHA or FCALL)."""

    client: redis.Redis
    namespace: str = ""
    shards: int = 1
    lua: scripts.Caller = scripts.SCRIPTS

    @classmethod
    def recorded(cls, client: redis.Redis, namespace: str = "",
                 lua: scripts.Caller = scripts.SCRIPTS) -> RedisSide:
        """The store with the shard count it records (1 before any is recorded)."""
        return cls(client, namespace, definitions.recorded_shards(client, namespace), lua)

    def resharded(self, shards: int) -> RedisSide:
        """This store as writers with another shard count see it."""
        return replace(self, shards=shards)

    @property
    def layout(self) -> list[Shard]:
        """Every shard of this count (one None when not split)."""
        return [(i, self.shards) for i in range(self.shards)] if self.shards > 1 else [None]

    # ------------------------------------------------------------------------ clock

    def clock(self) -> datetime:
        """The Redis clock (one TIME)."""
        return clock.read_clock(self.client)

    # ------------------------------------------------------------------------ due index

    def due_key(self, name: str) -> str:
        """The due index key that holds `name` with this shard count."""
        return definitions.due_key(self.namespace, name, self.shards)

    def read_due(self, shard: Shard, *, upto_ms: int | None = None, offset: int = 0,
                 limit: int = definitions.DUE_BATCH,
                 more: Callable[[Reads], None] | None = None) -> DueRead:
        """`redis.due.read_due` on this store."""
        return due.read_due(self.client, self.namespace, shard, upto_ms=upto_ms,
                            offset=offset, limit=limit, more=more, lua=self.lua)

    def start_due(self, shard: Shard, line: scripts.Line, *, upto_ms: int, offset: int,
                  limit: int = definitions.DUE_BATCH) -> due.StartedDue:
        """`redis.due.StartedDue` on this store: a due read sent on `line` after the calls
        sent on it before, its reply read later."""
        return due.StartedDue(self.client, self.namespace, shard, line, upto_ms=upto_ms,
                              offset=offset, limit=limit, lua=self.lua)

    # ------------------------------------------------------------------------ definitions

    def write(self, ops: Sequence[Op], *, now_ms: int | None, applied: Applied | None = None,
              deadline: float | None = None) -> list[tuple[str, str]]:
        """`redis.definitions.write` on this store."""
        return definitions.write(self.client, self.namespace, self.shards, ops, self.lua,
                                 applied=applied, deadline=deadline, now_ms=now_ms)

    def start_write(self, ops: Sequence[Op], *, now_ms: int | None) -> StartedWrite:
        """`redis.definitions.StartedWrite` on this store: one call's ops sent, the reply
        read by its `finish`."""
        return StartedWrite(self.client, self.namespace, self.shards, ops, self.lua,
                            now_ms=now_ms)

    def read_present(self, names: Sequence[str]) -> dict[str, bytes | Oversized]:
        """The stored definitions of `names`, absent ones left out, over the limit ones as
        Oversized (never read: `redis.definitions.read_definitions`)."""
        read = definitions.read_definitions(self.client, self.namespace, names, self.lua)
        return {name: d for name, d in zip(names, read, strict=True) if d is not None}

    def scan_definitions(self) -> Iterator[tuple[str, bytes | Oversized]]:
        """Every stored (name, definition), a page of names then their definitions per two
        round trips; one over the limit as Oversized, never read."""
        for names in definitions.name_pages(self.client, keys.definitions(self.namespace)):
            yield from self.read_present(names).items()

    # ------------------------------------------------------------------------ documents

    def apply_document(self, source: str, definitions: Mapping[str, bytes], digest: str, *,
                       now_ms: int | None, deadline: float | None = None) -> DocumentChange:
        """`redis.documents.apply_document` on this store."""
        return documents.apply_document(self.client, self.namespace, self.shards, source,
                                        definitions, digest, self.lua, deadline=deadline,
                                        now_ms=now_ms)

    # ------------------------------------------------------------------------ pushes

    def pusher(self, config: Config, report: Report, deadline: float, *, shard: Shard = None,
               history: int = DEFAULT_HISTORY) -> pushes.Pusher:
        """`redis.pushes.Pusher`: an invocation's push calls into `shard`'s due index."""
        from kiqbeat.redis import pushes

        return pushes.Pusher(self.client, self.namespace, config, report, deadline, self.lua,
                             due_key=keys.due(self.namespace, shard), history=history)

    def push_backfill(self, pieces: Sequence[Piece], history: int
                      ) -> pushes.BackfillCall:
        """`redis.pushes.push_backfill` on this store."""
        from kiqbeat.redis import pushes

        return pushes.push_backfill(self.client, self.namespace, pieces, history, self.lua)

    def push_manual(self, name: str, sha: str, queue: str, jid: str, at_ms: int, job: str,
                    history: int) -> bool:
        """`redis.pushes.push_manual` on this store."""
        from kiqbeat.redis import pushes

        return pushes.push_manual(self.client, self.namespace, name, sha, queue, jid, at_ms,
                                  job, history, self.lua)

    # ------------------------------------------------------------------------ operator reads

    def add_skips(self, name: str, count: int) -> tuple[bool, int] | None:
        """Add `count` pending skips to a stored schedule's (redis/lua/life.lua takes them):
        (whether they were added, its pending skips after), or None when there is no such
        schedule; nothing is added when they would exceed MAX_PENDING_SKIPS (core/limits.py).
        One atomic script (skip.lua) with the schedule's existence: a removal meanwhile leaves
        no field behind. ConfigError naming the schedule and the field when its pending count
        is not a whole number (written by hand: kept as it is)."""
        script_keys = [keys.definitions(self.namespace), keys.skips(self.namespace)]
        with redis_errors(self.client, "adding skips to a schedule"):
            code, pending = self.lua.call(scripts.SKIP, self.client, script_keys, [name, count])
        if reply_text(code) == "G":  # a count written by hand: nothing added
            raise ConfigError(f"schedule {shown(name)}: {reply_text(pending)}")
        return None if reply_text(code) == "M" else (reply_text(code) == "+", int(pending))

    def write_pause(self, name: str, pause: Pause | None, *, now_ms: int
                    ) -> tuple[bool, Pause | None]:
        """`redis.pauses.write_pause` on this store (None: resume)."""
        return pauses.write_pause(self.client, self.namespace, self.due_key(name), name, pause,
                                  now_ms, self.lua)
