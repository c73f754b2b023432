"""Documents in the store (DESIGN §7): a document is applied as a diff against the names and
digests it last applied, recorded per document (`keys.document_index`, `keys.documents`).
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import redis

from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import redis_errors, reply_bytes, reply_text
from kiqbeat.redis.definitions import Applied, Op, write, write_batches


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
                   deadline: float | None = None, now_ms: int | None) -> DocumentChange:
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
    applied = Applied(source, digest, _document_index(new))
    batches = len(list(write_batches(ops)))
    if batches > 1:
        ahead = {**{n: "-" for n in new if n not in old}, **old}
        with redis_errors(client, f"recording the diff of document {source} ahead"):
            pipe = client.pipeline(transaction=False)
            pipe.hdel(keys.documents(namespace), source)  # first: a cut-off run is redone
            pipe.set(keys.document_index(namespace, source), _document_index(ahead))
            pipe.execute()
        change.round_trips += 1
    results = write(client, namespace, shards, ops, lua, applied=applied, deadline=deadline,
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
        kept = {n: d for n, d in new.items() if n not in left_out}
        write(client, namespace, shards, [], lua,
              applied=Applied(source, digest, _document_index(kept)), now_ms=now_ms)
        change.round_trips += 1
    return change


def _document_index(digests: Mapping[str, str]) -> bytes:
    # Text (base64), so that a client decoding replies reads it too.
    return base64.b64encode(zlib.compress(
        "\n".join(f"{n}\t{d}" for n, d in digests.items()).encode(), 1))


def applied_digest(client: redis.Redis, namespace: str, source: str) -> str | None:
    """The digest of the document from `source` as last applied (None: none recorded)."""
    with redis_errors(client, f"reading {keys.documents(namespace)}"):
        applied = client.hget(keys.documents(namespace), source)
    return None if applied is None else reply_text(applied)


def knows_document(client: redis.Redis, namespace: str, source: str) -> bool:
    """Whether the store knows a document of this location: it records the digest it last
    applied, or its index (a document being applied has dropped its digest)."""
    with redis_errors(client, f"reading {keys.documents(namespace)}"):
        pipe = client.pipeline(transaction=False)
        pipe.hexists(keys.documents(namespace), source)
        pipe.exists(keys.document_index(namespace, source))
        recorded, indexed = pipe.execute()
    return bool(recorded) or bool(indexed)
