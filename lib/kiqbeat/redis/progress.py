"""kiqbeat's private per-schedule state in Redis: watermark, first-seen and history.

The one Python reader and writer of the progress record (`lua/progress.lua` the Lua one;
the format is specified in docs/store.md "Encodings"): each schedule's state is one record,
a field of one small hash picked by a stable hash of its name (`bucket`,
`keys.progress_bucket`): 12 bytes of watermark and first-seen, then its last pushes, a few
bytes each, so that a script reads and writes a schedule's state with one HGET and one HSET
and Redis keeps every bucket as a listpack. The layout before it is
migrated once (`redis.migrate`): nothing here reads it.

Histories are handed to readers as the text the old layout stored ("KIND TICK DELAY [JID]"
lines, newest first), which `core.records.parse_history` reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import redis
from redis.client import NEVER_DECODE

from kiqbeat.core.limits import STATE_BUCKETS
from kiqbeat.core.varints import UNITS_MS, read_varint, unzigzag, varint, zigzag
from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors, reply_bytes, reply_text

# Records are bytes: read undecoded whatever the client's decode_responses.
_RAW = {NEVER_DECODE: True}
# Names read per pipelined round trip.
BATCH = 1000
_KINDS = "tbms"  # tick, backfill, manual run, skipped (`kiqbeat schedules skip`)


def bucket(name: str | bytes) -> int:
    """The bucket holding schedule `name`'s state: SHA1's first 4 hex digits mod
    STATE_BUCKETS (the scripts' `bucket_of`, lua/checks.lua)."""
    raw = name.encode(errors="surrogateescape") if isinstance(name, str) else name
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
    (`encode_history`), varint zigzag(watermark - its NEWEST) and the rest of it."""
    mark_ms, seen = (_NO_MARK, 0) if mark is None else (mark.mark_ms, mark.first_seen_ms or 0)
    record = mark_ms.to_bytes(6, "big") + varint(zigzag(mark_ms - seen))
    if history:
        record += varint(zigzag(mark_ms - int.from_bytes(history[:6], "big"))) + history[6:]
    return record


def decode_record(raw: bytes) -> tuple[Mark | None, bytes]:
    """The mark (None when none) and history (`encode_history`'s form) of a record;
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


def encode_history(text: str) -> bytes:
    """The history part of a record given as "KIND TICK DELAY [JID]" lines, newest first
    (b"" when none): NEWEST (the last push's tick), COUNT, the entries oldest first."""
    lines = [line.split(" ") for line in text.splitlines()][::-1]
    if not lines:
        return b""
    out, previous = bytearray(), int(lines[0][1])
    for kind, tick_text, delay_text, *jid in lines:
        tick, delay = int(tick_text), int(delay_text)
        d = tick - previous
        unit = next(u for u in (3, 2, 1, 0) if d % UNITS_MS[u] == 0)
        out += varint(zigzag(d // UNITS_MS[unit]) * 16 + unit * 4 + _KINDS.index(kind))
        out += varint(zigzag(delay))
        if kind == "m":
            raw = (jid[0] if jid else "").encode()
            out += varint(len(raw)) + raw
        previous = tick
    return previous.to_bytes(6, "big") + varint(len(lines)) + bytes(out)


def decode_history(blob: bytes) -> str:
    """A record's history part as "KIND TICK DELAY [JID]" lines, newest first; ValueError
    when it is not one."""
    if not blob:
        return ""
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
                jid = " " + blob[pos:pos + length].decode(errors="replace")
                pos += length
            entries.append((head % 4, unzigzag(head // 16) * UNITS_MS[head // 4 % 4],
                            unzigzag(delay), jid))
    except IndexError:
        raise ValueError("a history record cut short") from None
    if len(entries) != count:
        raise ValueError(f"a history record of {count} entries holds {len(entries)}")
    lines = []
    for code, d, delay, jid in reversed(entries):
        lines.append(f"{_KINDS[code]} {tick} {delay}{jid}")
        tick -= d
    return "\n".join(lines)


def _records(client: redis.Redis, namespace: str, names: Sequence[str], what: str
             ) -> Iterator[tuple[str, bytes | None]]:
    """Each of `names` with its record (None: none), `BATCH` names a round trip."""
    for first in range(0, len(names), BATCH):
        batch = names[first:first + BATCH]
        with redis_errors(client, f"reading {what}"):
            pipe = client.pipeline(transaction=False)
            for name in batch:
                pipe.execute_command("HGET", keys.progress_bucket(namespace, bucket(name)),  # type: ignore[no-untyped-call]
                                     name.encode(errors="surrogateescape"), **_RAW)
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


def read_histories(client: redis.Redis, namespace: str, names: Sequence[str]
                   ) -> dict[str, str]:
    """The history of each of `names` that has one, as "KIND TICK DELAY [JID]" lines
    (newest first); a garbled record as its bytes shown, which `parse_history` refuses."""
    out: dict[str, str] = {}
    for name, raw in _records(client, namespace, names, "histories"):
        if raw is None:
            continue
        try:
            history = decode_history(decode_record(raw)[1])
        except ValueError:
            out[name] = repr(raw)
            continue
        if history:
            out[name] = history
    return out


# HSCAN COUNT for one bucket: more than a bucket holds, so one call reads it.
_SCAN_COUNT = 1000


def scan_histories(client: redis.Redis, namespace: str, first_bucket: int, count: int
                   ) -> tuple[int, list[tuple[str, str]]]:
    """The histories in buckets [first_bucket, first_bucket + count), as (name, lines), and
    the bucket to go on from (-1 when this page reached the last): one round trip, a few
    dozen names a bucket. Garbled records, empty histories and a bucket key of another type
    (written by hand: costs only its own names) are left out."""
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
                history = decode_history(decode_record(reply_bytes(record) or b"")[1])
            except ValueError:
                continue
            if history:
                out.append((reply_text(name), history))
    return (last if last < STATE_BUCKETS else -1), out

