"""The name index (`keys.names`, `keys.facets`, `keys.disabled`): read, and built once.

The write script keeps it in the same atomic step as the definitions (redis/lua/names.lua),
so the console lists, filters and counts from it without reading a definition. A store
written before the index existed, or by plain Redis commands that skip it (docs/store.md),
is brought into it by `build`: `kiqbeat schedules reindex`, or the console's first start
on a store without `keys.names_built`. `build` is idempotent and safe beside any writer:
each name is judged against its definition in one step (index.lua).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import name_bytes, redis_errors, reply_text
from kiqbeat.redis.definitions import name_pages

BUILD_PAGE = 250  # names per index.lua call: one call stays well under 5 ms at 1 KB each


@dataclass(frozen=True)
class Facets:
    """What the console filters a schedule by, as the write script recorded it."""

    enabled: bool
    queue: str
    source: str  # "" for the API's and other languages'


UNREAD = "?"  # the facets of a definition not read (over the limit) or not readable


class NameIndex:
    """The name index of one store, read."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client, self.namespace, self.key = client, namespace, keys.names(namespace)

    def page(self, prefix: str, after: str | None, count: int) -> list[str]:
        """Up to `count` indexed names starting with `prefix`, in byte order, after `after`."""
        low = b"(" + name_bytes(after) if after is not None else b"[" + name_bytes(prefix)
        # 0xFF never occurs in UTF-8: every name with the prefix sorts below prefix + 0xFF.
        high = b"[" + name_bytes(prefix) + b"\xff" if prefix else b"+"
        with redis_errors(self.client, f"reading {self.key}"):
            page: Any = self.client.zrangebylex(self.key, low, high, start=0, num=count)
        return [reply_text(n) for n in page]

    def size(self) -> int:
        """Names indexed."""
        with redis_errors(self.client, f"reading {self.key}"):
            return int(self.client.zcard(self.key))

    def facets(self, names: Sequence[str]) -> dict[str, Facets | None]:
        """The facets of those of `names` the index holds (None: recorded as not read); a
        name missing here was written without the index (plain Redis commands)."""
        if not names:
            return {}
        key = keys.facets(self.namespace)
        with redis_errors(self.client, f"reading {key}"):
            raw = self.client.hmget(key, [name_bytes(n) for n in names])
        out: dict[str, Facets | None] = {}
        for name, value in zip(names, raw, strict=True):
            if value is not None:
                out[name] = _facets(value)
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


def _facets(value: bytes | str) -> Facets | None:
    text = reply_text(value)
    if text == UNREAD:
        return None
    try:
        enabled, queue, source = json.loads(text)
    except (ValueError, TypeError):
        return None
    return Facets(bool(enabled), str(queue), str(source))


def index_names(client: redis.Redis, namespace: str, names: Sequence[str], *,
                mode: str = "", lua: scripts.Caller = scripts.SCRIPTS) -> int:
    """Bring `names` into the index as their definitions stand (one index.lua call); mode
    "1": record the index as built after them; "gone": only drop those without a definition
    (none read). Returns the stored names indexed."""
    script_keys = [keys.definitions(namespace), keys.names(namespace),
                   keys.facets(namespace), keys.disabled(namespace),
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
    return indexed
