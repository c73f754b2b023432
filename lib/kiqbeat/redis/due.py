"""The due index (DESIGN §7): reading what is due, and re-laying it out.

Invocations read only the entries due (`read_due`, one bounded batch per round trip, with
the Redis clock and any further reads queued on the same pipeline, their replies named).
`reindex` splits the index into shards; `rescore_unplannable` makes entries scored beyond
any instant kiqbeat plans plannable again.
"""

from __future__ import annotations

import contextlib
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import redis

from kiqbeat.core.instants import ENDED_MS
from kiqbeat.core.limits import MAX_DEFINITION_BYTES, MAX_PLANNABLE_MS
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.clock import redis_time
from kiqbeat.redis.connection import redis_errors, reply_text
from kiqbeat.redis.definitions import BATCH, DUE_BATCH, Oversized, due_key


@dataclass(frozen=True)
class Due:
    """One due index entry as read: its name, definition (None if gone, Oversized when over
    the limit: not read), mark and pause record."""

    name: str
    definition: bytes | Oversized | None
    mark_ms: int | None
    pause: bytes | None = None  # its pause record (core/pause.py), if any
    garbled: bool = False  # its progress record is not one (written by hand): set aside


class Reads:
    """Further reads queued on the due read's pipeline, each under a name: the replies come
    back under the same names (`Replies`), never by position."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe
        self.spans: dict[str, tuple[int, int]] = {}  # name -> its replies' [start, end)

    def add(self, name: str, queue: Callable[[Any], object]) -> None:
        """Queue `queue(pipe)`'s commands (any number) under `name`."""
        if name in self.spans:
            raise ValueError(f"a read named {name!r} is queued already")
        start = len(self.pipe)
        queue(self.pipe)
        self.spans[name] = (start - 1, len(self.pipe) - 1)  # the due script's reply is first


@dataclass(frozen=True)
class Replies:
    """The replies of the reads queued with a due read, by the names they were queued under;
    an error reply is an exception object."""

    replies: list[Any] = field(default_factory=list)
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)

    def all(self, name: str) -> list[Any]:
        """Every reply of the read named `name`, in the order its commands were queued."""
        start, end = self.spans[name]
        return self.replies[start:end]

    def one(self, name: str, default: Any = None) -> Any:
        """The reply of the read named `name` (one command), or `default` when none was
        queued under that name."""
        if name not in self.spans:
            return default
        found = self.all(name)
        if len(found) != 1:
            raise ValueError(f"the read named {name!r} has {len(found)} replies, not one")
        return found[0]


class DueRead(NamedTuple):
    """One due read: the Redis clock, a batch of due entries and whether more may be due
    after them (the batch was full, or cut short by the bytes its definitions carry), the
    replies of the reads queued with it (by name), and when the index next comes due (its
    lowest score above the instant read up to, epoch ms; None when there is none, or when it
    is beyond any instant kiqbeat plans)."""

    now: datetime
    entries: list[Due]
    more: bool
    replies: Replies
    next_due_ms: int | None


def plannable_ms(score: Any) -> int | None:
    """A due index score (a number or Redis's text of one) as epoch ms; None when it is
    none, or beyond any instant kiqbeat plans (`MAX_PLANNABLE_MS`: 1e308, +inf)."""
    try:
        value = float(reply_text(score) if isinstance(score, bytes) else score)
    except (TypeError, ValueError):
        return None
    return int(value) if math.isfinite(value) and value <= MAX_PLANNABLE_MS else None


def read_due(
    client: redis.Redis, namespace: str, shard: tuple[int, int] | None, *,
    upto_ms: int | None = None, offset: int = 0, limit: int = DUE_BATCH,
    more: Callable[[Reads], None] | None = None, lua: scripts.Caller = scripts.SCRIPTS,
) -> DueRead:
    """The Redis clock, up to `limit` due entries (lowest score first), `more`'s replies and
    when the index next comes due, in one round trip. Entries are due when scored at or
    below `upto_ms` (default: the Redis clock); the batch stops early once its definitions
    pass MAX_BATCH_DEFINITION_BYTES (`DueRead.more` then says to read on). `more` queues
    further reads on the same pipeline, each under a name (`Reads.add`); their replies come
    back under those names (`Replies`), an error reply as an exception object.
    """
    script_keys = _due_keys(namespace, shard)
    args = ["" if upto_ms is None else upto_ms, offset, limit]
    with redis_errors(client, "reading the due schedules"):
        for attempt in (1, 2):
            pipe = client.pipeline(transaction=False)
            lua.queue(scripts.DUE, pipe, script_keys, args, raw=True)
            reads = Reads(pipe)
            if more is not None:
                more(reads)
            replies = pipe.execute(raise_on_error=False)
            if not isinstance(replies[0], redis.exceptions.NoScriptError) or attempt == 2:
                break  # (FCALL never answers NOSCRIPT: an unloaded library is "not found")
            client.script_load(scripts.DUE.text)  # a new or restarted server: once
        if isinstance(replies[0], Exception):
            raise lua.explained(replies[0])
    return _due_read(replies[0], Replies(replies[1:], reads.spans))


class StartedDue:
    """A due read sent on a line (`scripts.Line`) and not read yet: it runs after every call
    sent on the line before it, and before every call sent after it, whenever its reply is
    read (`result`). The invocation sends the next batch's read this way, on its pushes'
    line, while it plans and pushes the current batch."""

    def __init__(self, client: redis.Redis, namespace: str, shard: tuple[int, int] | None,
                 line: scripts.Line, *, upto_ms: int, offset: int, limit: int = DUE_BATCH,
                 lua: scripts.Caller = scripts.SCRIPTS) -> None:
        self._client = client
        self._read: DueRead | None = None
        with redis_errors(client, "reading the due schedules"):
            self._pending: scripts.Pending | None = lua.start(
                scripts.DUE, client, _due_keys(namespace, shard), [upto_ms, offset, limit],
                line=line, raw=True, resend=False)

    def result(self) -> DueRead | None:
        """The read as `read_due` gives it (no further reads), its reply read once (the same
        again after); None when its reply was lost (a failed connection, a server that did
        not know the script): whether and where among the line's calls it ran is then
        unknown, so it is not sent again. After a first read that raised, None too: a caller
        that goes on reads the due schedules afresh after its pushes."""
        pending, self._pending = self._pending, None
        if pending is not None:
            with (redis_errors(self._client, "reading the due schedules"),
                  contextlib.suppress(scripts.Lost)):  # lost: None, and not sent again
                self._read = _due_read(pending.result(), Replies())
        return self._read


def _due_keys(namespace: str, shard: tuple[int, int] | None) -> list[str]:
    """due.lua's KEYS (its header names them)."""
    return [keys.due(namespace, shard), keys.definitions(namespace),
            keys.progress_bucket(namespace, 0), keys.paused(namespace)]


def _due_read(reply: Any, replies: Replies) -> DueRead:
    """A due read from due.lua's reply."""
    seconds, micros, sizes, blob, to_read, next_due = reply
    return DueRead(redis_time(seconds, micros), _entries(sizes, blob), bool(int(to_read)),
                   replies, plannable_ms(next_due) if next_due else None)


# One due entry's sizes in due.lua's reply (its SIZES_FORMAT, the same format): name length,
# definition length read (-1: not read), stored length, mark (epoch ms as a double; -1:
# none), pause record length (-1: none).
SIZES = struct.Struct(">IiIdi")
GARBLED_MARK = -2  # due.lua's mark of an entry whose progress record is not one


def _entries(sizes: bytes, blob: bytes) -> list[Due]:
    """due.lua's entries: one SIZES record per entry in `sizes`, their bytes in `blob`."""
    if len(sizes) % SIZES.size:
        raise ValueError(f"due.lua's sizes are not {SIZES.size} bytes per entry: "
                         f"{len(sizes)} bytes")
    entries = []
    pos = 0
    for name_length, def_length, def_bytes, mark, pause_length in SIZES.iter_unpack(sizes):
        name = blob[pos:pos + name_length]
        pos += name_length
        definition: bytes | Oversized | None = None
        if def_length >= 0:
            definition = blob[pos:pos + def_length]
            pos += def_length
        elif def_bytes > MAX_DEFINITION_BYTES:
            definition = Oversized(def_bytes)
        pause = None
        if pause_length >= 0:
            pause = blob[pos:pos + pause_length] or None
            pos += pause_length
        # A name that is not UTF-8 (written by another language) stays readable: its
        # definition is then refused by name and set aside, writing back the same bytes.
        entries.append(Due(reply_text(name), definition,
                           None if mark < 0 else int(mark), pause, mark == GARBLED_MARK))
    if pos != len(blob):
        raise ValueError(f"due.lua's entries hold {len(blob)} bytes, their sizes {pos}")
    return entries


def read_ended(client: redis.Redis, namespace: str,
               shards: Sequence[tuple[int, int] | None], limit: int) -> tuple[int, list[str]]:
    """How many schedules have ended (their index entries scored exactly ENDED_MS, where
    nothing is ever due: core/lifecycle.py), and the first `limit` names; one round trip."""
    pipe = client.pipeline(transaction=False)
    for key in due_keys(namespace, shards):
        pipe.zcount(key, ENDED_MS, ENDED_MS)
        pipe.zrangebyscore(key, ENDED_MS, ENDED_MS, start=0, num=limit)
    with redis_errors(client, "reading the ended schedules"):
        replies = pipe.execute()
    count, names = 0, []
    for counted, page in zip(replies[::2], replies[1::2], strict=True):
        count += int(counted)
        names += [reply_text(n) for n in page]
    return count, names[:limit]


def due_keys(namespace: str, shards: Sequence[tuple[int, int] | None]) -> list[str]:
    """The due index keys of `shards` (None: the unsplit index)."""
    return [keys.due(namespace, shard) for shard in shards]


def _glob(text: str) -> str:
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def reindex(client: redis.Redis, namespace: str, shards: int,
            progress: Callable[[int], None] | None = None) -> int:
    """Split the due index into `shards`: record the count first (from then on writers with
    another count are refused), then move every entry of any other layout's keys into its
    key of this one, its score kept, until those keys are empty; returns the entries moved.

    Safe while invocations run (an entry in either layout is planned from its watermark, so
    nothing is pushed twice); an entry not yet moved waits (late within the window, not
    lost). An administrator's step: it also needs SCAN, ZRANGE and ZREM on every index.
    """
    moved = 0
    keep = {keys.due(namespace, (i, shards)) for i in range(shards)}
    with redis_errors(client, "reindexing the due index"):
        client.set(keys.shards(namespace), shards)
        pattern = _glob(keys.due(namespace)) + "*"
        for old in [reply_text(k) for k in client.scan_iter(match=pattern, count=BATCH)]:
            if old in keep:
                continue
            while True:
                page: list[Any] = client.zrange(old, 0, BATCH - 1, withscores=True)
                if not page:
                    break
                pipe = client.pipeline(transaction=False)
                for raw, score in page:  # moved as the bytes they are
                    name = reply_text(raw)
                    pipe.zadd(due_key(namespace, name, shards), {raw: score}, nx=True)
                    pipe.zrem(old, raw)
                pipe.execute()
                moved += len(page)
                if progress is not None:
                    progress(len(page))
    return moved



def rescore_unplannable(client: redis.Redis, namespace: str, shards: int) -> int:
    """Rescore "plan me" (0) every entry of the due indexes of `shards` scored beyond any
    instant kiqbeat plans (written by hand: +inf, 1e308), so that the next invocation plans
    each from its watermark as for a changed definition; returns how many. Safe while
    invocations run: none plans those entries, and an entry removed meanwhile stays removed
    (ZADD XX)."""
    rescored = 0
    layout = [(i, shards) for i in range(shards)] if shards > 1 else [None]
    with redis_errors(client, "rescoring the due index"):
        for key in due_keys(namespace, layout):
            while True:
                page: list[Any] = client.zrangebyscore(key, f"({MAX_PLANNABLE_MS}", "+inf",
                                                       start=0, num=BATCH)
                if not page:
                    break
                pipe = client.pipeline(transaction=False)
                for name in page:
                    pipe.zadd(key, {name: 0}, xx=True)
                pipe.execute()
                rescored += len(page)
    return rescored

