"""Pause records (core/pause.py): written and deleted one schedule at a time (pause.lua), read
for the operator's outputs (status, get, the console)."""

from __future__ import annotations

from collections.abc import Sequence

import redis

from kiqbeat.core.pause import Pause
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import name_bytes, redis_errors, reply_text


def write_pause(client: redis.Redis, namespace: str, due_key: str, name: str,
                pause: Pause | None, now_ms: int, lua: scripts.Caller = scripts.SCRIPTS
                ) -> tuple[bool, Pause | None]:
    """Write `name`'s pause record at `now_ms` (None: delete it, resuming), moving its
    watermark as pause.lua says; (whether the schedule exists, the record it replaced).
    One atomic call."""
    script_keys = [keys.definitions(namespace), keys.paused(namespace), due_key,
                   keys.progress_bucket(namespace, 0), keys.missed(namespace)]
    with redis_errors(client, f"{'pausing' if pause else 'resuming'} a schedule"):
        code, previous = lua.call(scripts.PAUSE, client, script_keys,
                                  [name_bytes(name),
                                   b"" if pause is None else pause.encode(), now_ms])
    return reply_text(code) == "+", Pause.decode(previous) if previous else None


def read_pauses(client: redis.Redis, namespace: str, names: Sequence[str]
                ) -> dict[str, Pause]:
    """The pause records of those of `names` that have one (one HMGET)."""
    if not names:
        return {}
    with redis_errors(client, f"reading {keys.paused(namespace)}"):
        raw = client.hmget(keys.paused(namespace),
                           [name_bytes(name) for name in names])
    return {name: Pause.decode(data) for name, data in zip(names, raw, strict=True) if data}
