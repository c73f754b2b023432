"""Definitions in Redis (DESIGN §7): reading them, writing them, and the size checks both do.

Every schedule kiqbeat runs is a definition in one hash (`keys.definitions`), with an entry
in a due index (`keys.due`) scored by when it next needs planning. Writers — documents, the
Python API, any other language — change definitions with `write` (one atomic write.lua call
per batch) or with the plain commands docs/store.md gives. Nothing here validates:
definitions are bytes, and the caller (the engine, `kiqbeat.store`) decides what they mean.

Bounds: a read is at most `BATCH` names, and the definitions it carries at most
`MAX_BATCH_DEFINITION_BYTES`; a definition over `MAX_DEFINITION_BYTES` is never read (the
scripts ask its length first, and report it as `Oversized`). One write call is at most
`WRITE_BATCH` operations and `MAX_WRITE_BYTES`, so no script holds Redis for more than a few
milliseconds, whatever one definition's size.
"""

from __future__ import annotations

import hashlib
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from kiqbeat.core.limits import MAX_DEFINITION_BYTES
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import hash_pages, name_bytes, redis_errors, reply_bytes, reply_text

BATCH = 500
# Due index entries one due read returns: due.lua costs 6-11 us an entry (6 at 10,000
# schedules, 7.5-11 at 200,000-1,000,000: its mark, definition length and definition), so 150
# hold Redis at most about 1.7 ms (200 held it 2-3 ms at 1,000,000; 500 up to 9.9).
DUE_BATCH = 150
# A write op costs Redis more than a read: up to ~24 us at 1,000,000 schedules, so 100 hold
# it at most ~2.5 ms (200 held it up to 4.9 ms in a 1,000,000-schedule import).
WRITE_BATCH = 100
# 1 MiB of definitions at the limit held Redis 3 ms a write call (median; max 6-24 ms); 256 KiB
# 0.9 ms (max 1.2-4.6 ms): 300 definitions of 64 KiB imported, SLOWLOG.
MAX_WRITE_BYTES = 256 * 1024
WRITE_CODES = {"+": "done", "=": "unchanged", "E": "exists", "M": "missing",
               "O": "belongs to another source", "S": "changed since it was read",
               "L": f"over the size limit of {MAX_DEFINITION_BYTES:,} bytes"}


def definition_sha(definition: bytes) -> str:
    """SHA1 of a stored definition, as the scripts compute it (redis.sha1hex)."""
    return hashlib.sha1(definition).hexdigest()


def shard_of(name: str, count: int) -> int:
    """The shard (0..count-1) a schedule belongs to: a stable hash of its name only (of its
    bytes, as any language computes it, a name read from Redis that was not UTF-8 included)."""
    return zlib.crc32(name_bytes(name)) % count


def due_key(namespace: str, name: str, shards: int) -> str:
    """The due index that holds `name` when the store is split into `shards`."""
    return keys.due(namespace, (shard_of(name, shards), shards) if shards > 1 else None)


@dataclass(frozen=True)
class Oversized:
    """A stored definition over MAX_DEFINITION_BYTES, in place of its bytes: it was not read
    (Redis gave its length), and is set aside as such."""

    size_bytes: int

    def why(self) -> str:
        """The reason it is set aside, for `kiqbeat:rejected`, reports and listings."""
        return (f"its definition is {self.size_bytes:,} bytes, over the limit of "
                f"{MAX_DEFINITION_BYTES:,} bytes (not read; keep large data out of a "
                "schedule, e.g. an id in args, and write it again)")


def as_stored(definition: Any, size_bytes: Any) -> bytes | Oversized | None:
    """A definition as a script read it (nil when gone or not read) with its length."""
    if int(size_bytes) > MAX_DEFINITION_BYTES:
        return Oversized(int(size_bytes))
    return reply_bytes(definition)


@dataclass(frozen=True)
class Op:
    """One change to the store: `op` is put, add, update, set, del or reject (write.lua)."""

    op: str
    name: str
    definition: bytes = b""
    source: str = ""
    expect: str = "-"


def _pack(ops: Sequence[Op], due_keys: Sequence[str], index: Mapping[str, int]) -> bytes:
    """write.lua's ARGV[1]: each op's line, then its source, name and definition; `due_keys`
    is each op's due index key, `index` where each key is in KEYS."""
    parts: list[bytes] = []
    for op, key in zip(ops, due_keys, strict=True):
        source, name = op.source.encode(), name_bytes(op.name)
        parts += (b"%s %d %d %s %d %d\n" % (op.op.encode(), index[key], len(source),
                                            op.expect.encode(), len(name),
                                            len(op.definition)),
                  source, name, op.definition)
    return b"".join(parts)


def write_batches(ops: Sequence[Op]) -> Iterator[Sequence[Op]]:
    start = size = 0
    for end, op in enumerate(ops):
        size += len(op.definition) + len(op.name) + 64
        if end > start and (end - start >= WRITE_BATCH or size > MAX_WRITE_BYTES):
            yield ops[start:end]
            start, size = end, len(op.definition) + len(op.name) + 64
    if start < len(ops):
        yield ops[start:]


@dataclass(frozen=True)
class Applied:
    """A document to record as applied (its location, digest and index), with the last
    write of its diff."""

    source: str
    digest: str
    index: bytes


def write(client: redis.Redis, namespace: str, shards: int, ops: Sequence[Op],
          lua: scripts.Caller = scripts.SCRIPTS, *, applied: Applied | None = None,
          deadline: float | None = None, now_ms: int | None) -> list[tuple[str, str]]:
    """Apply `ops` in order, atomically per batch; each op's (code, owner) as write.lua
    says: code "+" done, "=" already so, "E", "M", "O" (owner then set), "S". `applied`
    goes with the last batch (alone when there are no ops); write.lua skips it if that batch
    refused an op. Past `deadline` (time.monotonic()), no further batch starts: the results
    are then fewer than the ops.

    `now_ms` is the instant of the change, always given by the caller: the one Redis clock
    read of the public call making it (an invocation applying a document gives its own
    `now`, replays included), or None for the instant the script itself runs at (its own
    TIME, in the same atomic step)."""
    results: list[tuple[str, str]] = []
    batches = list(write_batches(ops)) or [[]]
    for number, batch in enumerate(batches, start=1):
        if deadline is not None and number > 1 and time.monotonic() > deadline:
            break
        last = applied if number == len(batches) else None
        script_keys, args = _call(namespace, shards, batch, last, now_ms)
        with redis_errors(client, WRITING):
            reply = lua.call(scripts.WRITE, client, script_keys, args)
        results += _results(reply)
    return results


WRITING = "writing schedule definitions"


def _call(namespace: str, shards: int, batch: Sequence[Op], applied: Applied | None,
          now_ms: int | None) -> tuple[list[str], list[scripts.Arg]]:
    """write.lua's KEYS and ARGV for one batch."""
    of_op = ([due_key(namespace, op.name, shards) for op in batch] if shards > 1
             else [keys.due(namespace)] * len(batch))
    index = {key: k for k, key in enumerate(dict.fromkeys(of_op), start=1)}
    script_keys = [keys.definitions(namespace), keys.progress_bucket(namespace, 0),
                   keys.rejected(namespace), keys.documents(namespace),
                   keys.document_index(namespace, applied.source if applied else ""),
                   keys.shards(namespace), keys.missed(namespace), keys.manual(namespace),
                   keys.paused(namespace), keys.runs(namespace),
                   keys.skips(namespace), keys.last_jobs(namespace),
                   keys.held(namespace), keys.names(namespace), keys.name_ranges(namespace),
                   keys.disabled(namespace), *index]
    args: list[scripts.Arg] = [_pack(batch, of_op, index), shards]
    if applied is not None:
        args += ["1", applied.source, applied.digest, applied.index]
    else:
        args += ["", "", "", ""]
    args.append("" if now_ms is None else now_ms)
    return script_keys, args


def _results(reply: Any) -> list[tuple[str, str]]:
    """Each op's (code, owner) from write.lua's reply."""
    codes, owners = reply
    owner_of = iter(reply_text(o) for o in owners)
    return [(code, next(owner_of) if code == "O" else "") for code in reply_text(codes)]


class StartedWrite:
    """One write call (at most `WRITE_BATCH` ops, as `write_batches` cuts them) sent to
    Redis on a connection of its own, its reply not read yet (`scripts.Pending`, the one
    "send now, read later"), so that the caller prepares the next call while Redis runs this
    one (an import checks the next definitions: the import then costs the longer of the
    two, not their sum). `finish` reads the reply, or `abandon` drops it; write.lua writes
    nothing twice, so a call re-sent after a lost connection is safe."""

    def __init__(self, client: redis.Redis, namespace: str, shards: int, ops: Sequence[Op],
                 lua: scripts.Caller, *, now_ms: int | None) -> None:
        self.ops = ops
        self._client = client
        script_keys, args = _call(namespace, shards, ops, None, now_ms)
        with redis_errors(client, WRITING):
            self._pending = lua.start(scripts.WRITE, client, script_keys, args)

    def finish(self) -> list[tuple[str, str]]:
        """Each op's (code, owner), as `write` gives them."""
        with redis_errors(self._client, WRITING):
            return _results(self._pending.result())

    def abandon(self) -> None:
        """Drop the call without reading its reply; whether it was applied is unknown."""
        self._pending.abandon()


def recorded_shards(client: redis.Redis, namespace: str) -> int:
    """The shard count the due index is split into (1 before any is recorded)."""
    with redis_errors(client, f"reading {keys.shards(namespace)}"):
        value = client.get(keys.shards(namespace))
    try:
        return max(1, int(reply_text(value))) if value is not None else 1
    except ValueError:
        return 1



def read_definitions(client: redis.Redis, namespace: str, names: Sequence[str],
                     lua: scripts.Caller = scripts.SCRIPTS) -> list[bytes | Oversized | None]:
    """The stored definitions of `names`, in order: None when gone, Oversized when over
    MAX_DEFINITION_BYTES (read.lua asks each length first, in the same step, and never
    reads such a one). One call per `BATCH` names, or fewer once the definitions read pass
    MAX_BATCH_DEFINITION_BYTES: what one call brings back is bounded."""
    out: list[bytes | Oversized | None] = []
    key = keys.definitions(namespace)
    while len(out) < len(names):
        batch = [name_bytes(n) for n in names[len(out):len(out) + BATCH]]
        with redis_errors(client, f"reading {key}"):
            definitions, lengths, count = lua.call(scripts.READ, client, [key], batch)
        out += [as_stored(d, n) for d, n in zip(definitions, lengths[:int(count)], strict=True)]
    return out



def scan_names(client: redis.Redis, key: str, cursor: int = 0,
               count: int = BATCH) -> tuple[int, list[str]]:
    """One page of a hash's field names, never a value (issue 26: a definition over the limit
    must not be transferred to list names): (next cursor, 0 when done; names).

    `HSCAN ... NOVALUES` where the server has it (Redis 7.4+, Valkey 8+); before that, HKEYS
    (names only; one reply of every name, bounded by the names' bytes) paged here, the
    cursor then an offset into the sorted names."""
    with redis_errors(client, "listing stored schedules"):
        try:
            # no_values: redis-py's HSCAN reply parser would otherwise pair the names up as
            # if they were fields and values, and give back half of them.
            cursor, page = client.execute_command(  # type: ignore[no-untyped-call]
                "HSCAN", key, cursor, "COUNT", count, "NOVALUES", no_values=True)
        except redis.ResponseError:  # no NOVALUES: names alone, every one in one reply
            names = sorted(reply_text(n) for n in client.hkeys(key))
            page = names[cursor:cursor + count]
            return (cursor + count if cursor + count < len(names) else 0), page
    return int(cursor), [reply_text(n) for n in page]


def name_pages(client: redis.Redis, key: str, count: int = BATCH) -> Iterator[list[str]]:
    """A hash's field names, a page of `count` at a time, never a value: HSCAN NOVALUES
    (Redis 7.4+, Valkey 8+); before that one HKEYS (names only), paged here: `scan_names`'
    fallback would read every name again for each page, quadratic over a whole pass."""
    cursor, page = scan_names(client, key, 0, count)
    if cursor == count and len(page) == count:  # maybe HKEYS' offset: ask once
        with redis_errors(client, f"listing {key}"):
            try:
                client.execute_command(  # type: ignore[no-untyped-call]
                    "HSCAN", key, 0, "COUNT", 1, "NOVALUES", no_values=True)
            except redis.ResponseError:  # no NOVALUES: every name in one reply, once
                names = sorted(reply_text(n) for n in client.hkeys(key))
                for first in range(0, len(names), count):
                    yield names[first:first + count]
                return
    yield page
    while cursor:
        cursor, page = scan_names(client, key, cursor, count)
        yield page


def scan_items(client: redis.Redis, key: str) -> Iterable[tuple[str, bytes]]:
    """Every field and value of a hash, one HSCAN page per round trip."""
    for page in hash_pages(client, key, BATCH):
        for name, value in page.items():
            yield reply_text(name), reply_bytes(value) or b""
