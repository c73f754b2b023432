"""kiqbeat's private per-schedule state in Redis: watermark, first-seen and history.

The one Python reader and writer of the progress record (`lua/progress.lua` the Lua one;
the format is specified in docs/store.md "Encodings"): each schedule's state is one record,
a field of one small hash picked by a stable hash of its name (`bucket`,
`keys.progress_bucket`): 12 bytes of watermark and first-seen, then its last pushes, a few
bytes each, so that a script reads and writes a schedule's state with one HGET and one HSET
and Redis keeps every bucket as a listpack. The layout before it is
migrated once (`redis.migrate`): nothing here reads it.

Histories are handed to readers as what they mean, `core.records.Push`es, newest first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis
from redis.client import NEVER_DECODE

from kiqbeat.core.instants import from_ms
from kiqbeat.core.limits import MAX_PLANNABLE_MS, STATE_BUCKETS
from kiqbeat.core.varints import UNITS_MS, read_varint, unzigzag, varint, zigzag
from kiqbeat.redis import keys
from kiqbeat.redis.connection import name_bytes, redis_errors, reply_bytes, reply_text

if TYPE_CHECKING:
    from kiqbeat.core.records import Push

# Records are bytes: read undecoded whatever the client's decode_responses.
_RAW = {NEVER_DECODE: True}
# Names read per pipelined round trip.
BATCH = 1000
# KIND's codes, each its letter in core.records.KINDS: tick, backfill, manual run, skipped
# (`kiqbeat schedules skip`).
_KIND_CODES = "tbms"


def bucket(name: str | bytes) -> int:
    """The bucket holding schedule `name`'s state: SHA1's first 4 hex digits mod
    STATE_BUCKETS (the scripts' `bucket_of`, lua/checks.lua)."""
    raw = name_bytes(name) if isinstance(name, str) else name
    return int(hashlib.sha1(raw).hexdigest()[:4], 16) % STATE_BUCKETS


@dataclass(frozen=True)
class Mark:
    """A schedule's watermark and first-seen (None when unknown), epoch ms."""

    mark_ms: int
    first_seen_ms: int | None


# The watermark of a record that holds a history but no watermark yet (progress.lua).
_NO_MARK = 2**48 - 1


def encode_record(mark: Mark | None, history: bytes = b"") -> bytes:
    """A progress record: the watermark (unsigned 48-bit big-endian; 2^48-1: none), varint
    zigzag(watermark - first-seen) (first-seen 0: unknown), then, with a history
    (`decode_history`'s form), varint zigzag(watermark - its NEWEST) and the rest of it."""
    mark_ms, seen = (_NO_MARK, 0) if mark is None else (mark.mark_ms, mark.first_seen_ms or 0)
    record = mark_ms.to_bytes(6, "big") + varint(zigzag(mark_ms - seen))
    if history:
        record += varint(zigzag(mark_ms - int.from_bytes(history[:6], "big"))) + history[6:]
    return record


def decode_record(raw: bytes) -> tuple[Mark | None, bytes]:
    """The mark (None when none) and history part (`decode_history` reads it) of a record;
    ValueError when it is not one (progress.lua's `parse_record` refuses the same)."""
    try:
        mark_ms = int.from_bytes(raw[:6], "big")
        if len(raw) < 7:
            raise IndexError
        zz, pos = read_varint(raw, 6)
        history = b""
        if pos < len(raw):
            newest, count_at = read_varint(raw, pos)
            count, after = read_varint(raw, count_at)
            if count < 1 or len(raw) - after < 2 * count:
                raise ValueError("a progress record whose history is cut short")
            history = (mark_ms - unzigzag(newest)).to_bytes(6, "big") + raw[count_at:]
    except IndexError:
        raise ValueError(f"not a progress record: {raw[:40]!r}") from None
    seen = mark_ms - unzigzag(zz)
    return (None if mark_ms == _NO_MARK else Mark(mark_ms, seen or None)), history


def decode_history(name: str, blob: bytes, limit: int | None = None) -> list[Push]:
    """Schedule `name`'s pushes in a record's history part, newest first (the newest `limit`
    of them when given: the others are walked, not read); ValueError when it is not one, or
    a push read names an instant outside [0, MAX_PLANNABLE_MS] or a manual run's jid holds a
    space or a line break. A tick's or backfill's jid is the tick's, derived as the job's
    was (only a manual run's is stored)."""
    if not blob:
        return []
    # Here, not at the top: a nothing-due run-once reads no history (tests/entrypoints/
    # test_cold_start.py DUE_ONLY).
    from kiqbeat.core.payload import jid_ms
    from kiqbeat.core.records import KINDS, Push

    entries: list[tuple[int, int, int, str]] = []  # code, d, delay, jid: oldest first
    try:
        tick = int.from_bytes(blob[:6], "big")
        count, pos = read_varint(blob, 6)
        while pos < len(blob):
            head, pos = read_varint(blob, pos)
            delay, pos = read_varint(blob, pos)
            jid = ""
            if head % 4 == 2:
                length, pos = read_varint(blob, pos)
                if pos + length > len(blob):
                    raise IndexError
                jid = blob[pos:pos + length].decode(errors="replace")
                pos += length
            entries.append((head % 4, unzigzag(head // 16) * UNITS_MS[head // 4 % 4],
                            unzigzag(delay), jid))
    except IndexError:
        raise ValueError("a history record cut short") from None
    if len(entries) != count:
        raise ValueError(f"a history record of {count} entries holds {len(entries)}")
    pushes = []
    for code, d, delay, jid in reversed(entries[-limit:] if limit else entries):
        when = tick + delay
        if not (0 <= tick <= MAX_PLANNABLE_MS and 0 <= when <= MAX_PLANNABLE_MS):
            raise ValueError(f"a push of tick {tick} ms pushed at {when} ms")
        if " " in jid or (jid and jid.splitlines() != [jid]):
            raise ValueError(f"a manual run's jid {jid[:40]!r}")
        try:
            job_id = jid if code == 2 else jid_ms(name, tick)
        except UnicodeEncodeError:
            raise ValueError("a history of a name that is not UTF-8") from None
        pushes.append(Push(KINDS[_KIND_CODES[code]], from_ms(tick), job_id, from_ms(when)))
        tick -= d
    return pushes


def _records(client: redis.Redis, namespace: str, names: Sequence[str], what: str
             ) -> Iterator[tuple[str, bytes | None]]:
    """Each of `names` with its record (None: none), `BATCH` names a round trip."""
    for first in range(0, len(names), BATCH):
        batch = names[first:first + BATCH]
        with redis_errors(client, f"reading {what}"):
            pipe = client.pipeline(transaction=False)
            for name in batch:
                pipe.execute_command("HGET", keys.progress_bucket(namespace, bucket(name)),  # type: ignore[no-untyped-call]
                                     name_bytes(name), **_RAW)
            values = pipe.execute()
        yield from zip(batch, values, strict=True)


def read_marks(client: redis.Redis, namespace: str, names: Sequence[str]
               ) -> dict[str, Mark | str]:
    """The mark of each of `names` that has one, or, for a garbled record, its text."""
    out: dict[str, Mark | str] = {}
    for name, raw in _records(client, namespace, names, "watermarks"):
        if raw is None:
            continue
        try:
            mark, _ = decode_record(raw)
        except ValueError:
            out[name] = raw.decode(errors="replace")
            continue
        if mark is not None:
            out[name] = mark
    return out


def read_histories(client: redis.Redis, namespace: str, names: Sequence[str],
                   limit: int | None = None) -> dict[str, list[Push] | bytes]:
    """The history of each of `names` that has one, newest first (`decode_history`: the
    newest `limit` pushes when given); a garbled record as its bytes."""
    out: dict[str, list[Push] | bytes] = {}
    for name, raw in _records(client, namespace, names, "histories"):
        if raw is None:
            continue
        try:
            history = decode_history(name, decode_record(raw)[1], limit)
        except ValueError:
            out[name] = raw
            continue
        if history:
            out[name] = history
    return out


# HSCAN COUNT for one bucket: more than a bucket holds, so one call reads it.
_SCAN_COUNT = 1000


def scan_histories(client: redis.Redis, namespace: str, first_bucket: int, count: int
                   ) -> tuple[int, list[tuple[str, Push]]]:
    """The newest push of each history in buckets [first_bucket, first_bucket + count), as
    (name, push), and the bucket to go on from (-1 when this page reached the last): one
    round trip, a few dozen names a bucket. Garbled records, empty histories and a bucket
    key of another type (written by hand: costs only its own names) are left out."""
    last = min(first_bucket + count, STATE_BUCKETS)
    with redis_errors(client, "sweeping histories"):
        pipe = client.pipeline(transaction=False)
        for b in range(first_bucket, last):
            pipe.execute_command("HSCAN", keys.progress_bucket(namespace, b), 0, "COUNT",  # type: ignore[no-untyped-call]
                                 _SCAN_COUNT, **_RAW)
        pages = pipe.execute(raise_on_error=False)
    out = []
    for reply in pages:  # a bucket is one page (a listpack is scanned whole)
        if isinstance(reply, redis.ResponseError):
            continue
        for name, record in reply[1].items():
            try:
                newest = decode_history(reply_text(name),
                                        decode_record(reply_bytes(record) or b"")[1], 1)
            except ValueError:
                continue
            if newest:
                out.append((reply_text(name), newest[0]))
    return (last if last < STATE_BUCKETS else -1), out

