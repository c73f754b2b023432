"""The schedule store in Redis (DESIGN §7): definitions, the due index, documents' diffs.

Every schedule kiqbeat runs is a definition in one hash (`keys.definitions`), with an entry
in a due index (`keys.due`) scored by when it next needs planning. Invocations read only the
entries due (`read_due`, one bounded batch per round trip); writers — documents, the Python
API, any other language — change definitions with `write` (one atomic script per batch)
or with the plain commands docs/store.md gives. Nothing here validates: definitions are
bytes, and the caller (the engine, `kiqbeat.store`) decides what they mean.

Bounds: a batch is at most `BATCH` names, and the definitions it carries at most
`MAX_BATCH_DEFINITION_BYTES`; a definition over `MAX_DEFINITION_BYTES` is never read (the
scripts ask its length first, and report it as `Oversized`). One write call is at most
`WRITE_BATCH` operations and `MAX_WRITE_BYTES`, so no script holds Redis for more than a few
milliseconds, whatever one definition's size.
"""

from __future__ import annotations

import base64
import hashlib
import math
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import redis

from kiqbeat.core.limits import MAX_DEFINITION_BYTES, MAX_PLANNABLE_MS
from kiqbeat.core.plan import shard_of
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import redis_errors, reply_bytes, reply_text

BATCH = 500
WRITE_BATCH = 200  # a write op costs Redis more than a read: smaller calls
# 1 MiB of definitions at the limit held Redis 3 ms a write call (median; max 6-24 ms); 256 KiB
# 0.9 ms (max 1.2-4.6 ms): 300 definitions of 64 KiB imported, SLOWLOG.
MAX_WRITE_BYTES = 256 * 1024
WRITE_CODES = {"+": "done", "=": "unchanged", "E": "exists", "M": "missing",
               "O": "belongs to another source", "S": "changed since it was read",
               "L": f"over the size limit of {MAX_DEFINITION_BYTES:,} bytes"}


def definition_sha(definition: bytes) -> str:
    """SHA1 of a stored definition, as the scripts compute it (redis.sha1hex)."""
    return hashlib.sha1(definition).hexdigest()


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
class Due:
    """One due index entry as read: its name, definition (None if gone, Oversized when over
    the limit: not read) and mark."""

    name: str
    definition: bytes | Oversized | None
    mark_ms: int | None


@dataclass(frozen=True)
class DueBatch:
    """One read of the due index: its entries, and whether more may be due after them
    (the batch was full, or cut short by the bytes its definitions carry)."""

    entries: list[Due]
    more: bool


def redis_time(seconds: Any, micros: Any) -> datetime:
    """The instant TIME's two numbers name (aware UTC)."""
    return datetime.fromtimestamp(int(seconds), tz=UTC) + timedelta(microseconds=int(micros))


def read_clock(client: redis.Redis) -> datetime:
    """The Redis clock: the one clock kiqbeat trusts (DESIGN §1)."""
    with redis_errors(client, "reading the clock"):
        seconds, micros = client.time()
    return redis_time(seconds, micros)


class DueRead(NamedTuple):
    """One due read: the Redis clock, a batch of due entries, the replies of the reads queued
    with it, and when the index next comes due (its lowest score above the instant read up
    to, epoch ms; None when there is none, or when it is beyond any instant kiqbeat plans)."""

    now: datetime
    batch: DueBatch
    replies: list[Any]
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
    upto_ms: int | None = None, offset: int = 0, limit: int = BATCH,
    more: Callable[[Any], None] | None = None, lua: scripts.Caller = scripts.SCRIPTS,
) -> DueRead:
    """The Redis clock, up to `limit` due entries (lowest score first), `more`'s replies and
    when the index next comes due, in one round trip. Entries are due when scored at or
    below `upto_ms` (default: the Redis clock); the batch stops early once its definitions
    pass MAX_BATCH_DEFINITION_BYTES (`DueBatch.more` then says to read on). `more` queues
    further reads on the same pipeline; their replies come back as they are, an error
    reply as an exception object.
    """
    script_keys = [keys.due(namespace, shard), keys.definitions(namespace),
                   keys.watermarks(namespace)]
    args = ["" if upto_ms is None else upto_ms, offset, limit]
    with redis_errors(client, "reading the due schedules"):
        for attempt in (1, 2):
            pipe = client.pipeline(transaction=False)
            lua.queue(scripts.DUE, pipe, script_keys, args)
            if more is not None:
                more(pipe)
            replies = pipe.execute(raise_on_error=False)
            if not lua.needs_reload(replies[0]) or attempt == 2:
                break
            lua.reload(scripts.DUE, client)  # a new or restarted server: once
        if isinstance(replies[0], Exception):
            raise lua.explained(replies[0])
    seconds, micros, names, definitions, marks, lengths, to_read, next_due = replies[0]
    now = redis_time(seconds, micros)
    # A name that is not UTF-8 (written by another language) stays readable: its definition
    # is then refused by name and set aside, writing back the same bytes.
    due = [Due(reply_text(name), as_stored(definition, length), int(mark) if mark else None)
           for name, definition, mark, length
           in zip(names, definitions, marks, lengths, strict=True)]
    return DueRead(now, DueBatch(due, bool(int(to_read))), replies[1:],
                   plannable_ms(next_due) if next_due else None)


@dataclass(frozen=True)
class Op:
    """One change to the store: `op` is put, add, update, set, del or reject (write.lua)."""

    op: str
    name: str
    definition: bytes = b""
    source: str = ""
    expect: str = "-"


def _pack(ops: Sequence[Op], index: Mapping[str, int], namespace: str, shards: int) -> bytes:
    parts: list[bytes] = []
    for op in ops:
        source, name = op.source.encode(), op.name.encode(errors="surrogateescape")
        k = index[due_key(namespace, op.name, shards)]
        parts += (b"%s %d %d %s %d %d\n" % (op.op.encode(), k, len(source), op.expect.encode(),
                                            len(name), len(op.definition)),
                  source, name, op.definition)
    return b"".join(parts)


def _batches(ops: Sequence[Op]) -> Iterator[Sequence[Op]]:
    start = size = 0
    for end, op in enumerate(ops):
        size += len(op.definition) + len(op.name) + 64
        if end > start and (end - start >= WRITE_BATCH or size > MAX_WRITE_BYTES):
            yield ops[start:end]
            start, size = end, len(op.definition) + len(op.name) + 64
    if start < len(ops):
        yield ops[start:]


@dataclass(frozen=True)
class Record:
    """A document to record as applied, with the last write of its diff."""

    source: str
    digest: str
    index: bytes


def write(client: redis.Redis, namespace: str, shards: int, ops: Sequence[Op],
          lua: scripts.Caller = scripts.SCRIPTS, *, record: Record | None = None,
          deadline: float | None = None, now_ms: int | None = None) -> list[tuple[str, str]]:
    """Apply `ops` in order, atomically per batch; each op's (code, owner) as write.lua
    says: code "+" done, "=" already so, "E", "M", "O" (owner then set), "S". `record` goes
    with the last batch (alone when there are no ops); write.lua skips it if that batch
    refused an op. Past `deadline` (time.monotonic()), no further batch starts: the results
    are then fewer than the ops. `now_ms` is the instant of the change (default: the Redis
    clock; an invocation applying a document gives its own `now`, replays included)."""
    results: list[tuple[str, str]] = []
    batches = list(_batches(ops)) or [[]]
    for number, batch in enumerate(batches, start=1):
        if deadline is not None and number > 1 and time.monotonic() > deadline:
            break
        due_keys = list(dict.fromkeys(due_key(namespace, op.name, shards) for op in batch))
        index = {key: k for k, key in enumerate(due_keys, start=1)}
        last = record if number == len(batches) else None
        script_keys = [keys.definitions(namespace), keys.watermarks(namespace),
                       keys.first_seen(namespace), keys.rejected(namespace),
                       keys.documents(namespace),
                       keys.document_index(namespace, last.source if last else ""),
                       keys.shards(namespace), keys.missed(namespace), keys.history(namespace),
                       keys.manual(namespace), *due_keys]
        args: list[scripts.Arg] = [_pack(batch, index, namespace, shards), shards]
        if last is not None:
            args += ["1", last.source, last.digest, last.index]
        else:
            args += ["", "", "", ""]
        args.append("" if now_ms is None else now_ms)
        with redis_errors(client, "writing schedule definitions"):
            codes, owners = lua.call(scripts.WRITE, client, script_keys, args)
        owner_of = iter(reply_text(o) for o in owners)
        results += [(code, next(owner_of) if code == "O" else "") for code in reply_text(codes)]
    return results


# ---------------------------------------------------------------------------- documents


def definition_digest(definition: bytes) -> str:
    """A short digest of one definition, kept per name in a document's index."""
    return hashlib.blake2b(definition, digest_size=8).hexdigest()


def document_digest(definitions: Mapping[str, bytes]) -> str:
    """SHA-256 of a whole document's definitions: equal exactly when nothing changed."""
    digest = hashlib.sha256()
    for name in sorted(definitions):
        digest.update(name.encode() + b"\0" + definitions[name] + b"\0")
    return digest.hexdigest()


def _read_index(blob: bytes | None) -> dict[str, str]:
    if not blob:
        return {}
    try:
        lines = zlib.decompress(base64.b64decode(blob)).decode().split("\n")
    except (ValueError, zlib.error):  # garbled: re-apply everything (idempotent)
        return {}
    return dict(line.split("\t", 1) for line in lines if "\t" in line)


@dataclass
class DocumentChange:
    """What applying a changed document did."""

    refused: list[tuple[str, str]] = field(default_factory=list)  # (name, its source)
    round_trips: int = 0
    finished: bool = True  # False: cut off by the deadline; the next invocation goes on


def apply_document(client: redis.Redis, namespace: str, shards: int, source: str,
                   definitions: Mapping[str, bytes], digest: str,
                   lua: scripts.Caller = scripts.SCRIPTS, *,
                   deadline: float | None = None, now_ms: int | None = None) -> DocumentChange:
    """Apply a document as a diff against the names and digests it last applied.

    Added and changed definitions are written, names it no longer has are removed (each
    only if it is still this document's), in bounded batches; then the document's index
    and digest are recorded, so an unchanged document costs nothing again. A diff of more
    than one batch first forgets the recorded digest and records, ahead, every name it may
    leave stored (the old ones with their old digests, the added ones as unknown): a run
    cut off half-way — by a crash or by `deadline` — is then completed by the next
    invocation, whatever the document says by then, and leaves no schedule no document
    owns. Every step is idempotent. `now_ms`: the instant of the change (`write`).
    """
    change = DocumentChange(round_trips=1)
    with redis_errors(client, f"reading the last applied state of document {source}"):
        old = _read_index(reply_bytes(client.get(keys.document_index(namespace, source))))
    new = {name: definition_digest(d) for name, d in definitions.items()}
    ops = [Op("put", name, definitions[name], source) for name, d in new.items()
           if old.get(name) != d]
    ops += [Op("del", name, source=source) for name in old if name not in new]
    record = Record(source, digest, _document_index(new))
    batches = len(list(_batches(ops)))
    if batches > 1:
        ahead = {**{n: "-" for n in new if n not in old}, **old}
        with redis_errors(client, f"recording the diff of document {source} ahead"):
            pipe = client.pipeline(transaction=False)
            pipe.hdel(keys.documents(namespace), source)  # first: a cut-off run is redone
            pipe.set(keys.document_index(namespace, source), _document_index(ahead))
            pipe.execute()
        change.round_trips += 1
    results = write(client, namespace, shards, ops, lua, record=record, deadline=deadline,
                    now_ms=now_ms)
    change.round_trips += max(1, batches)
    if len(results) < len(ops):
        change.finished = False
        return change
    refusals = [(op, owner) for op, (code, owner) in zip(ops, results, strict=True)
                if code == "O"]
    if refusals:  # the script left the record alone: recorded here, as applied
        # A refused del: another writer has taken the name over; it is no longer this
        # document's to remove (its index forgets it). Refused puts are left out of the
        # index, and tried again at the next change.
        change.refused = [(op.name, owner) for op, owner in refusals if op.op == "put"]
        left_out = {name for name, _ in change.refused}
        applied = {n: d for n, d in new.items() if n not in left_out}
        write(client, namespace, shards, [], lua,
              record=Record(source, digest, _document_index(applied)))
        change.round_trips += 1
    return change


def _document_index(digests: Mapping[str, str]) -> bytes:
    # Text (base64), so that a client decoding replies reads it too.
    return base64.b64encode(zlib.compress(
        "\n".join(f"{n}\t{d}" for n, d in digests.items()).encode(), 1))


def recorded_shards(client: redis.Redis, namespace: str) -> int:
    """The shard count the due index is split into (1 before any is recorded)."""
    with redis_errors(client, f"reading {keys.shards(namespace)}"):
        value = client.get(keys.shards(namespace))
    try:
        return max(1, int(reply_text(value))) if value is not None else 1
    except ValueError:
        return 1


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


# ---------------------------------------------------------------------------- reading


def read_definitions(client: redis.Redis, namespace: str, names: Sequence[str],
                     lua: scripts.Caller = scripts.SCRIPTS) -> list[bytes | Oversized | None]:
    """The stored definitions of `names`, in order: None when gone, Oversized when over
    MAX_DEFINITION_BYTES (read.lua asks each length first, in the same step, and never
    reads such a one). One call per `BATCH` names, or fewer once the definitions read pass
    MAX_BATCH_DEFINITION_BYTES: what one call brings back is bounded."""
    out: list[bytes | Oversized | None] = []
    key = keys.definitions(namespace)
    while len(out) < len(names):
        batch = [n.encode(errors="surrogateescape") for n in names[len(out):len(out) + BATCH]]
        with redis_errors(client, f"reading {key}"):
            definitions, lengths, count = lua.call(scripts.READ, client, [key], batch)
        out += [as_stored(d, n) for d, n in zip(definitions, lengths[:int(count)], strict=True)]
    return out


@dataclass(frozen=True)
class Stored:
    """One schedule as stored: definition (Oversized when over the limit: not read) and
    state (None where absent)."""

    name: str
    definition: bytes | Oversized | None
    mark_ms: int | None
    first_seen_ms: int | None
    rejected: str | None


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


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
        sent = [name.encode(errors="surrogateescape") for name in batch]
        with redis_errors(client, "reading stored schedules"):
            pipe = client.pipeline(transaction=False)
            pipe.hmget(keys.watermarks(namespace), sent)
            pipe.hmget(keys.first_seen(namespace), sent)
            pipe.hmget(keys.rejected(namespace), sent)
            marks, seen, rejected = pipe.execute()
        out += [Stored(name, d, _int(m), _int(s),
                       None if r is None else reply_text(r))
                for name, d, m, s, r in zip(batch, defs, marks, seen, rejected, strict=True)]
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


def _due_keys(namespace: str, shards: Sequence[tuple[int, int] | None]) -> list[str]:
    return [keys.due(namespace, shard) for shard in shards]


def read_counts(client: redis.Redis, namespace: str,
                shards: Sequence[tuple[int, int] | None], now_ms: int) -> Counts:
    """Counts of the store (the index entries of `shards`), in one round trip."""
    with redis_errors(client, "counting stored schedules"):
        pipe = client.pipeline(transaction=False)
        pipe.hlen(keys.definitions(namespace))
        pipe.hlen(keys.rejected(namespace))
        pipe.hlen(keys.missed(namespace))
        for key in _due_keys(namespace, shards):
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
        for key in _due_keys(namespace, shards):
            pipe.zrangebyscore(key, f"({MAX_PLANNABLE_MS}", "+inf", start=0, num=limit)
        pages: list[Any] = pipe.execute()
    return [reply_text(name) for page in pages for name in page][:limit]


def rescore_unplannable(client: redis.Redis, namespace: str, shards: int) -> int:
    """Rescore "plan me" (0) every entry of the due indexes of `shards` scored beyond any
    instant kiqbeat plans (written by hand: +inf, 1e308), so that the next invocation plans
    each from its watermark as for a changed definition; returns how many. Safe while
    invocations run: none plans those entries, and an entry removed meanwhile stays removed
    (ZADD XX)."""
    rescored = 0
    layout = [(i, shards) for i in range(shards)] if shards > 1 else [None]
    with redis_errors(client, "rescoring the due index"):
        for key in _due_keys(namespace, layout):
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


def read_order(client: redis.Redis, namespace: str, shards: Sequence[tuple[int, int] | None],
               offset: int, limit: int) -> list[str]:
    """Names in due order (most overdue first) across `shards`, a page of them."""
    with redis_errors(client, "reading the due index"):
        pipe = client.pipeline(transaction=False)
        for key in _due_keys(namespace, shards):
            pipe.zrange(key, 0, offset + limit - 1, withscores=True)
        pages: list[Any] = pipe.execute()
    merged = sorted((score, reply_text(name)) for page in pages for name, score in page)
    return [name for _, name in merged[offset:offset + limit]]


def scan_names(client: redis.Redis, key: str, cursor: int = 0,
               count: int = BATCH) -> tuple[int, list[str]]:
    """One HSCAN page of a hash's field names: (next cursor, 0 when done; names)."""
    with redis_errors(client, "listing stored schedules"):
        cursor, page = client.hscan(key, cursor, count=count)
    return int(cursor), [reply_text(n) for n in page]


def scan_items(client: redis.Redis, key: str, count: int = BATCH
               ) -> Iterable[tuple[str, bytes]]:
    """Every field and value of a hash, one HSCAN page per round trip."""
    cursor = 0
    while True:
        with redis_errors(client, f"reading {key}"):
            cursor, page = client.hscan(key, cursor, count=count)
        assert isinstance(page, dict)
        for name, value in page.items():
            yield reply_text(name), reply_bytes(value) or b""
        if not int(cursor):
            return
