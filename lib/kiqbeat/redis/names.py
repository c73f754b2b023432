"""The name index (`keys.name_ranges` and its buckets, `keys.names`, `keys.disabled`): read,
and built once.

The write script keeps it in the same atomic step as the definitions (redis/lua/names.lua),
so the console lists, filters and counts from it without reading a definition. Names are
kept in small sorted buckets that Redis stores as listpacks (a few dozen bytes a name); the
names a plain Redis writer marks (docs/store.md) wait in `keys.names` until kiqbeat meets
them. A store written before the index existed, or by plain Redis commands that skip it, is
brought into it by `build`: `kiqbeat schedules reindex`, or the console's first start on a
store without `keys.names_built`; a store indexed before the buckets by `fold`. Both are
idempotent and safe beside any writer: each name is judged against its definition in one
step (index.lua).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import (
    hash_pages,
    name_bytes,
    redis_errors,
    reply_bytes,
    reply_text,
)
from kiqbeat.redis.definitions import name_pages

BUILD_PAGE = 250  # names per index.lua call: one call stays well under 5 ms at 1 KB each


@dataclass(frozen=True)
class Facets:
    """What the console filters a schedule by, as the write script recorded it."""

    enabled: bool
    queue: str
    source: str  # "" for the API's and other languages'


class NameIndex:
    """The name index of one store, read with plain commands (a read-only user's): a page
    reads a bucket's names (sorted here), then the bound after it, so a bucket split
    meanwhile (which only moves names to a later bucket) leaves none out."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client, self.namespace = client, namespace
        self.key, self.marked = keys.name_ranges(namespace), keys.names(namespace)

    def _bucket(self, bound: bytes) -> bytes:
        """Bucket `bound`'s key (names.lua's one derivation)."""
        return name_bytes(self.key) + b":" + bound

    def _bounds(self, names: Sequence[bytes]) -> list[bytes]:
        """The bound of the bucket of each of `names` ("" below every bound)."""
        with redis_errors(self.client, f"reading {self.key}"), self.client.pipeline(
                transaction=False) as pipe:
            for name in names:
                pipe.zrevrangebylex(self.key, b"[" + name, b"-", start=0, num=1)
            return [reply_bytes(found[0]) or b"" if found else b"" for found in pipe.execute()]

    def page(self, prefix: str, after: str | None, count: int) -> list[str]:
        """Up to `count` indexed names starting with `prefix`, in byte order, after `after`
        (the names a plain writer marked among them)."""
        start = name_bytes(after if after is not None else prefix)
        # 0xFF never occurs in UTF-8: every name with the prefix sorts below prefix + 0xFF.
        top = name_bytes(prefix) + b"\xff" if prefix else None
        high = b"[" + top if top is not None else b"+"

        def wanted(name: bytes) -> bool:
            return (name > start if after is not None else name >= start) and (
                top is None or name <= top)

        names: set[bytes] = set()
        bound: bytes | None = self._bounds([start])[0]
        with redis_errors(self.client, f"reading {self.key}"):
            while bound is not None and len(names) < count:
                with self.client.pipeline(transaction=False) as pipe:
                    pipe.hkeys(self._bucket(bound))
                    pipe.zrangebylex(self.key, b"(" + bound, high, start=0, num=1)
                    bucket, following = pipe.execute(raise_on_error=False)
                if isinstance(following, Exception):
                    raise following
                if isinstance(bucket, Exception):  # not a hash (written by hand): no names
                    bucket = []
                names.update(n for n in map(name_bytes, map(reply_text, bucket)) if wanted(n))
                bound = reply_bytes(following[0]) if following else None
            marked = self.client.zrangebylex(
                self.marked, b"(" + start if after is not None else b"[" + start, high,
                start=0, num=count)
        names.update(name_bytes(reply_text(m)) for m in marked)
        return [reply_text(n) for n in sorted(names)[:count]]

    def size(self) -> int:
        """Names the index lists: the stored ones."""
        key = keys.definitions(self.namespace)
        with redis_errors(self.client, f"reading {key}"):
            return int(self.client.hlen(key))

    def facets(self, names: Sequence[str]) -> dict[str, Facets | None]:
        """The facets of those of `names` the index holds (None: recorded as not read); a
        name missing here is not indexed, or a plain writer marked it (unknown facets). A
        name not found is looked up once more: a split between reading its bucket's bound
        and reading the bucket moves it."""
        out: dict[str, Facets | None] = {}
        unfound = list(names)
        for _ in range(2):
            if not unfound:
                break
            raw = [name_bytes(n) for n in unfound]
            bounds = self._bounds(raw)
            with redis_errors(self.client, f"reading {self.key}"), self.client.pipeline(
                    transaction=False) as pipe:
                for name, bound in zip(raw, bounds, strict=True):
                    pipe.zscore(self.marked, name)
                    pipe.hget(self._bucket(bound), name)
                replies = pipe.execute(raise_on_error=False)
            missed = []
            for k, asked in enumerate(unfound):
                marked, found = replies[2 * k], replies[2 * k + 1]
                if isinstance(marked, Exception):
                    raise marked
                if marked is not None:
                    continue  # its facets unknown until indexed again
                if found is not None and not isinstance(found, Exception):
                    out[asked] = _facets(name_bytes(reply_text(found)))
                else:
                    missed.append(asked)
            unfound = missed
        return out

    def disabled(self) -> int:
        """Indexed definitions with `enabled: false`."""
        key = keys.disabled(self.namespace)
        with redis_errors(self.client, f"reading {key}"):
            return int(self.client.scard(key))

    def built(self) -> bool:
        """Whether the index covers the store (built, or kept since it was empty)."""
        key = keys.names_built(self.namespace)
        with redis_errors(self.client, f"reading {key}"):
            return bool(self.client.exists(key))


def _facets(body: bytes) -> Facets | None:
    """A name's facets as its bucket holds them (names.lua: ENABLED QUEUE "\0" SOURCE, or
    "?"); None for "?" or a value not of that form (written by hand)."""
    queue, separator, source = body[1:].partition(b"\0")
    if body[:1] not in (b"0", b"1") or not separator:
        return None
    return Facets(body[:1] == b"1", reply_text(queue), reply_text(source))


def index_names(client: redis.Redis, namespace: str, names: Sequence[str], *,
                mode: str = "", lua: scripts.Caller = scripts.SCRIPTS) -> int:
    """Bring `names` into the index as their definitions stand (one index.lua call); mode
    "1": record the index as built after them; "gone": only drop those without a definition
    (none read). Returns the stored names indexed."""
    script_keys = [keys.definitions(namespace), keys.names(namespace),
                   keys.name_ranges(namespace), keys.disabled(namespace),
                   keys.names_built(namespace)]
    with redis_errors(client, f"indexing names in {keys.names(namespace)}"):
        return int(lua.call(scripts.INDEX, client, script_keys,
                            [mode, *(name_bytes(n) for n in names)]))


def build(client: redis.Redis, namespace: str, lua: scripts.Caller = scripts.SCRIPTS) -> int:
    """Index every stored name and drop every indexed name without a definition, a page per
    call, then record the index as built; returns the stored names indexed. Reads each
    definition once, inside Redis (its facets), one over the limit never."""
    indexed = 0
    for page in name_pages(client, keys.definitions(namespace), BUILD_PAGE):
        indexed += index_names(client, namespace, page, lua=lua)
    index, after = NameIndex(client, namespace), None
    while True:
        page = index.page("", after, BUILD_PAGE)
        index_names(client, namespace, page, mode="gone", lua=lua)
        if len(page) < BUILD_PAGE:
            break
        after = page[-1]
    index_names(client, namespace, [], mode="1", lua=lua)
    fold(client, namespace, lua)
    return indexed


def fold(client: redis.Redis, namespace: str, lua: scripts.Caller = scripts.SCRIPTS) -> int:
    """Index the names a plain writer marked (`keys.names`; every name, in a store indexed
    before the buckets), a page per call, each judged against its definition and taken out
    (at least one call: each repairs a bound written by hand), then delete the facets
    hash of before the buckets; returns the names met."""
    met = 0
    while True:
        with redis_errors(client, f"reading {keys.names(namespace)}"):
            page: list[bytes | str] = client.zrange(  # type: ignore[assignment]
                keys.names(namespace), 0, BUILD_PAGE - 1)
        if not page:
            break
        index_names(client, namespace, [reply_text(n) for n in page], lua=lua)
        met += len(page)
    if not met:  # every index call repairs a bound written by hand (names.lua)
        index_names(client, namespace, [], lua=lua)
    legacy = keys.facets(namespace)
    with redis_errors(client, f"deleting {legacy}"):
        if reply_text(client.type(legacy)) != "hash":
            client.delete(legacy)  # absent, or not the hash of before: nothing to page
    for fields in hash_pages(client, legacy, 1000):  # a page a call: no stall at 1,000,000
        if fields:
            with redis_errors(client, f"deleting {legacy}"):
                client.hdel(legacy, *fields)
    return met
