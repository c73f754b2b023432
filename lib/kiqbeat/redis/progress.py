"""kiqbeat's private per-schedule state in Redis: watermark, first-seen and history.

The one Python reader and writer of the layout `lua/progress.lua` states (the one Lua one):
each schedule's record sits in two small hashes picked by a stable hash of its name
(`bucket`), `keys.marks_bucket` (watermark and first-seen, 12 bytes) and
`keys.history_bucket` (its last pushes, a few bytes each), so that Redis keeps every
bucket as a listpack. A name the new layout lacks is read from the layout before it
(`keys.watermarks`, `keys.first_seen`, `keys.history`), which the scripts delete name by
name as they write: an upgraded deployment keeps every mark.

Histories are handed to readers as the text the old layout stored ("KIND TICK DELAY [JID]"
lines, newest first), which `core.records.parse_history` reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import redis
from redis.client import NEVER_DECODE

from kiqbeat.core.limits import STATE_BUCKETS
from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors, reply_bytes, reply_text

# Records are bytes: read undecoded whatever the client's decode_responses.
_RAW = {NEVER_DECODE: True}
# Names read per pipelined round trip.
BATCH = 1000
_KINDS = "tbms"  # tick, backfill, manual run, skipped (`kiqbeat schedules skip`)


def bucket(name: str | bytes) -> int:
    """The bucket holding schedule `name`'s state: SHA1's first 4 hex digits mod
    STATE_BUCKETS (progress.lua's `bucket_of`)."""
    raw = name.encode(errors="surrogateescape") if isinstance(name, str) else name
    return int(hashlib.sha1(raw).hexdigest()[:4], 16) % STATE_BUCKETS


@dataclass(frozen=True)
class Mark:
    """A schedule's watermark and first-seen (None when unknown), epoch ms."""

    mark_ms: int
    first_seen_ms: int | None


def encode_mark(mark: Mark) -> bytes:
    """A mark record: watermark then first-seen (0: unknown), unsigned 48-bit big-endian."""
    return mark.mark_ms.to_bytes(6, "big") + (mark.first_seen_ms or 0).to_bytes(6, "big")


def decode_mark(raw: bytes) -> Mark:
    """The mark of a record; ValueError when it is not one."""
    if len(raw) != 12:
        raise ValueError(f"a mark record is 12 bytes, not {len(raw)}")
    seen = int.from_bytes(raw[6:], "big")
    return Mark(int.from_bytes(raw[:6], "big"), seen or None)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _zigzag(value: int) -> int:
    return 2 * value if value >= 0 else -2 * value - 1


def _unzigzag(value: int) -> int:
    return value // 2 if value % 2 == 0 else -(value + 1) // 2


def encode_history(text: str) -> bytes:
    """The record of a history given as "KIND TICK DELAY [JID]" lines, newest first."""
    out, previous = bytearray(), None
    for line in text.splitlines():
        kind, tick_text, delay_text, *jid = line.split(" ")
        tick, delay = int(tick_text), int(delay_text)
        d = tick if previous is None else previous - tick
        unit = 0
        if d % 1000 == 0:
            unit, d = 1, d // 1000
        out += _varint(_zigzag(d) * 8 + unit * 4 + _KINDS.index(kind))
        out += _varint(_zigzag(delay))
        if kind == "m":
            raw = (jid[0] if jid else "").encode()
            out += _varint(len(raw)) + raw
        previous = tick
    return bytes(out)


def _read_varint(blob: bytes, pos: int) -> tuple[int, int]:
    value, scale = 0, 1
    while True:
        byte = blob[pos]  # IndexError when cut short
        value += (byte % 128) * scale
        pos += 1
        if byte < 128:
            return value, pos
        scale *= 128


def decode_history(blob: bytes) -> str:
    """A history record as "KIND TICK DELAY [JID]" lines, newest first; ValueError when it is
    not one."""
    lines: list[str] = []
    pos = tick = 0
    try:
        while pos < len(blob):
            head, pos = _read_varint(blob, pos)
            delay, pos = _read_varint(blob, pos)
            code, d = head % 4, _unzigzag(head // 8) * (1000 if head // 4 % 2 else 1)
            tick = d if not lines else tick - d
            line = f"{_KINDS[code]} {tick} {_unzigzag(delay)}"
            if code == 2:
                length, pos = _read_varint(blob, pos)
                line += " " + blob[pos:pos + length].decode(errors="replace")
                pos += length
            lines.append(line)
    except IndexError:
        raise ValueError("a history record cut short") from None
    return "\n".join(lines)


def _get(client: redis.Redis, key_of: Mapping[str, str], names: Sequence[str],
         what: str) -> Iterator[tuple[str, bytes | None]]:
    for first in range(0, len(names), BATCH):
        batch = names[first:first + BATCH]
        with redis_errors(client, f"reading {what}"):
            pipe = client.pipeline(transaction=False)
            for name in batch:
                pipe.execute_command("HGET", key_of[name], name.encode(errors="surrogateescape"),  # type: ignore[no-untyped-call]
                                     **_RAW)
            values = pipe.execute()
        yield from zip(batch, values, strict=True)


def _legacy(client: redis.Redis, key: str, names: Sequence[str]) -> dict[str, bytes]:
    """The old layout's values of `names` in hash `key` (none when the hash is gone)."""
    out: dict[str, bytes] = {}
    for first in range(0, len(names), BATCH):
        batch = [n.encode(errors="surrogateescape") for n in names[first:first + BATCH]]
        with redis_errors(client, f"reading {key}"):
            values = client.hmget(key, batch)
        out.update((names[first + j], reply_bytes(v) or b"") for j, v in enumerate(values)
                   if v is not None)
    return out


def read_marks(client: redis.Redis, namespace: str, names: Sequence[str]
               ) -> dict[str, Mark | str]:
    """The mark of each of `names` that has one, or, for a garbled one, its text."""
    out: dict[str, Mark | str] = {}
    key_of = {n: keys.marks_bucket(namespace, bucket(n)) for n in names}
    for name, raw in _get(client, key_of, names, "watermarks"):
        if raw is not None:
            try:
                out[name] = decode_mark(raw)
            except ValueError:
                out[name] = raw.decode(errors="replace")
    rest = [n for n in names if n not in out]
    if rest:  # the old layout (HMGET: what every reader is granted)
        marks = _legacy(client, keys.watermarks(namespace), rest)
        seen = _legacy(client, keys.first_seen(namespace), list(marks)) if marks else {}
        for name, raw in marks.items():
            text = reply_text(raw)
            seen_text = reply_text(seen.get(name, b""))
            out[name] = (Mark(int(text), int(seen_text) if seen_text.isdigit() else None)
                         if text.isascii() and text.isdigit() else text)
    return out


def read_histories(client: redis.Redis, namespace: str, names: Sequence[str]
                   ) -> dict[str, str]:
    """The history of each of `names` that has one, as "KIND TICK DELAY [JID]" lines
    (newest first); a garbled record as its bytes shown, which `parse_history` refuses."""
    out: dict[str, str] = {}
    key_of = {n: keys.history_bucket(namespace, bucket(n)) for n in names}
    for name, raw in _get(client, key_of, names, "histories"):
        if raw is not None:
            try:
                out[name] = decode_history(raw)
            except ValueError:
                out[name] = repr(raw)
    rest = [n for n in names if n not in out]
    if rest:
        out.update((n, reply_text(v)) for n, v in
                   _legacy(client, keys.history(namespace), rest).items())
    return out


def write_marks(client: redis.Redis, namespace: str, marks: Mapping[str, Mark]) -> None:
    """Store marks as they are (for operators' repairs and tests: the scripts alone move a
    mark in normal running), dropping any old-layout copy."""
    with redis_errors(client, "writing watermarks"):
        pipe = client.pipeline(transaction=True)
        for name, mark in marks.items():
            pipe.hset(keys.marks_bucket(namespace, bucket(name)), name, encode_mark(mark))
            pipe.hdel(keys.watermarks(namespace), name)
            pipe.hdel(keys.first_seen(namespace), name)
        pipe.execute()


def state_keys(client: redis.Redis, namespace: str) -> list[str]:
    """Every bucket key that exists (SCAN): for checks that state stays bounded."""
    found: list[str] = []
    for pattern in (keys.marks_bucket(namespace, "*"), keys.history_bucket(namespace, "*")):
        with redis_errors(client, "listing state buckets"):
            found += [reply_text(k) for k in client.scan_iter(match=pattern, count=1000)]
    return found


def names_with_state(client: redis.Redis, namespace: str) -> set[str]:
    """Every schedule name that has a mark or a history, in either layout."""
    names: set[str] = set()
    legacy = [keys.watermarks(namespace), keys.first_seen(namespace), keys.history(namespace)]
    for key in [*state_keys(client, namespace), *legacy]:
        with redis_errors(client, f"reading {key}"):
            names.update(reply_text(n) for n in client.hkeys(key))
    return names


def scan_histories(client: redis.Redis, namespace: str, first_bucket: int, count: int
                   ) -> tuple[int, list[tuple[str, str]]]:
    """The histories in buckets [first_bucket, first_bucket + count), as (name, lines), and
    the bucket to go on from (-1 when this page reached the last): one round trip, a few
    dozen names a bucket. Garbled records are left out; the old layout is not swept."""
    last = min(first_bucket + count, STATE_BUCKETS)
    with redis_errors(client, "sweeping histories"):
        pipe = client.pipeline(transaction=False)
        for b in range(first_bucket, last):
            pipe.execute_command("HSCAN", keys.history_bucket(namespace, b), 0, "COUNT",  # type: ignore[no-untyped-call]
                                 _SCAN_COUNT, **_RAW)
        pages = pipe.execute()
    out = []
    for _, page in pages:  # a bucket is one page (a listpack is scanned whole)
        for name, blob in page.items():
            try:
                out.append((reply_text(name), decode_history(reply_bytes(blob) or b"")))
            except ValueError:
                continue
    return (last if last < STATE_BUCKETS else -1), out


# HSCAN COUNT for one bucket: more than a bucket holds, so one call reads it.
_SCAN_COUNT = 1000


def _scan_bucket(client: redis.Redis, key: str) -> dict[bytes, bytes]:
    """Every field of a bucket, undecoded (HSCAN: what the console's ACL grants)."""
    out: dict[bytes, bytes] = {}
    cursor = 0
    while True:
        with redis_errors(client, f"reading {key}"):
            cursor, page = client.execute_command("HSCAN", key, cursor, "COUNT", _SCAN_COUNT,  # type: ignore[no-untyped-call]
                                                  **_RAW)
        out.update(page)
        if not int(cursor):
            return out


def all_marks(client: redis.Redis, namespace: str) -> dict[str, Mark]:
    """Every schedule's mark, in either layout (SCAN and HGETALL of every bucket: for
    checks and tests, not for an invocation); garbled records left out."""
    out: dict[str, Mark] = {}
    legacy = read_marks(client, namespace, [
        reply_text(n) for n in client.hkeys(keys.watermarks(namespace))])
    out.update((n, m) for n, m in legacy.items() if isinstance(m, Mark))
    for key in state_keys(client, namespace):
        if not key.startswith(keys.marks_bucket(namespace, "")):
            continue
        for name, raw in _scan_bucket(client, key).items():
            try:
                out[reply_text(name)] = decode_mark(reply_bytes(raw) or b"")
            except ValueError:
                continue
    return out
