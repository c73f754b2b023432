"""The layout before the progress buckets, migrated once.

A 0.1.0 development build kept each schedule's watermark, first-seen and history in three
plain hashes (`keys.watermarks`, `keys.first_seen`, `keys.history`). No script reads them:
an invocation migrates them into the bucket records (lua/migrate.lua, a batch of names a
call, each name atomically) before its first due read, the first time its process meets
the store (`migrate_layout`); a store without them costs three TYPEs, which a new client's
startup checks send in their round trip (deployment.py).
Running it again changes nothing (docs/store.md "Keys").
"""

from __future__ import annotations

from typing import Any

import redis

from kiqbeat.errors import StateError, shown_name
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import hash_pages, redis_errors, reply_text

# Names a migration call moves (one atomic script: a few ms).
BATCH = 500
# Whole passes over the old hashes, until none is left (more only while an old build writes).
MAX_PASSES = 10


def old_layout(namespace: str) -> list[str]:
    """The old layout's three hashes, in migrate.lua's KEYS order."""
    return [keys.watermarks(namespace), keys.first_seen(namespace), keys.history(namespace)]


def migrate_layout(client: redis.Redis, namespace: str,
                   lua: scripts.Caller = scripts.SCRIPTS, types: list[Any] | None = None
                   ) -> list[str]:
    """Move every schedule's state out of the old layout, if any is left; returns a warning
    per schedule whose old watermark was not a whole number (it starts afresh). `types`:
    the replies to a TYPE of each `old_layout` key, when already read (else read here)."""
    old = old_layout(namespace)
    warnings = []
    with redis_errors(client, "migrating the old state layout"):
        if types is None:
            pipe = client.pipeline(transaction=False)
            for key in old:
                pipe.type(key)  # TYPE: what every invocation is granted (EXISTS is optional)
            types = pipe.execute(raise_on_error=False)
        for kind in types:
            if isinstance(kind, Exception):
                raise kind
        kinds = [reply_text(kind) for kind in types]
        if kinds == ["none"] * len(old):
            return []
        for key, kind in zip(old, kinds, strict=True):
            if kind not in ("hash", "none"):
                raise StateError(f"{key} holds a {kind}, expected a hash (the state layout "
                                 "before the progress buckets); nothing was migrated (fix "
                                 "or delete the key)")
        # Follow each scan's cursor to its end (deleting as it goes), then again while any
        # name is left (one written meanwhile by an old build): a scan restarted at 0 over
        # emptied buckets can answer an empty page before the end.
        for _ in range(MAX_PASSES):
            for key in old:
                for page in hash_pages(client, key, BATCH):
                    if not page:
                        continue
                    for name in lua.call(scripts.MIGRATE, client, old, list(page), raw=True):
                        warnings.append(
                            f"schedule {shown_name(name)}: its watermark in "
                            f"{keys.watermarks(namespace)} was not a whole number; it starts "
                            "afresh (its next tick after this invocation)")
            pipe = client.pipeline(transaction=False)
            for key in old:
                pipe.hlen(key)
            if not any(pipe.execute()):
                break
    return warnings
