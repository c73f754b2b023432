"""The outcome records in Redis: folding the workers' inbox into them (redis/lua/fold.lua,
in bounded slices) and reading them back as `Outcomes` and `Health`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis
from redis.client import NEVER_DECODE

from kiqbeat.core import limits
from kiqbeat.core.outcomes import Health, Outcomes, decode_outcomes, health
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import redis_errors
from kiqbeat.redis.progress import bucket

_RAW = {NEVER_DECODE: True}


@dataclass
class Folded:
    """What one `fold_outcomes` did: entries taken from the inbox, dropped (garbled, for an
    unknown schedule, or older than every tick a full record keeps), left in the inbox, the
    script calls and the time they took."""

    taken: int = 0
    dropped: int = 0
    left: int = 0
    calls: int = 0
    duration_s: float = 0.0
    changed: list[Health] = field(default_factory=list)


def fold_outcomes(client: redis.Redis, namespace: str = "", *, history: int = 10,
                  lua: scripts.Caller = scripts.SCRIPTS, slice_size: int = limits.FOLD_SLICE,
                  slices: int = limits.FOLD_SLICES, deadline: float | None = None,
                  folded: Folded | None = None) -> list[Health]:
    """Fold the workers' inbox into the schedules' outcome records, `slice_size` entries a
    script call, at most `slices` calls (and none after `deadline`, a time.monotonic()
    instant, once one ran); the health of every schedule whose record changed, one per name
    (its state after the last call). `history`: ticks a record keeps unless its definition
    says otherwise. Entries left over wait for the next invocation (the inbox is bounded)."""
    ns = namespace
    call_keys = [keys.outcomes_inbox(ns), keys.definitions(ns), keys.outcomes_errors(ns)]
    changed: dict[str, Health] = {}
    report = folded if folded is not None else Folded()
    started = time.monotonic()
    for _ in range(slices):
        with redis_errors(client, f"folding {call_keys[0]}"):
            # raw: records are bytes whatever the client's decode_responses
            reply = lua.call(scripts.FOLD, client, call_keys, [slice_size, history], raw=True)
        report.calls += 1
        taken, dropped, left = (int(v) for v in reply[:3])
        report.taken += taken
        report.dropped += dropped
        report.left = left
        rest = reply[3:]
        for k in range(0, len(rest), 3):
            name = _text(rest[k])
            raw, error = rest[k + 1], rest[k + 2]
            try:
                record: Outcomes | None = decode_outcomes(_bytes(raw))
            except ValueError:  # not one (fold.lua writes none): nothing known, this one only
                record = None
            changed[name] = health(name, record, _text(error) if error else None)
        if taken < slice_size or left == 0:
            break
        if deadline is not None and time.monotonic() > deadline:
            break
    report.duration_s += time.monotonic() - started
    report.changed = list(changed.values())
    return report.changed


def read_outcomes(client: redis.Redis, namespace: str, names: Sequence[str]
                  ) -> dict[str, tuple[Outcomes | None, str | None]]:
    """The outcome record (None: none, or garbled) and last error of each name, in one
    pipelined round trip."""
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.execute_command("HGET", keys.outcomes_bucket(namespace, bucket(name)), name,
                             **_RAW)  # type: ignore[no-untyped-call]
        pipe.hget(keys.outcomes_errors(namespace), name)
    with redis_errors(client, "reading the outcome records"):
        replies = pipe.execute()
    found: dict[str, tuple[Outcomes | None, str | None]] = {}
    for k, name in enumerate(names):
        raw, error = replies[2 * k], replies[2 * k + 1]
        record = None
        if raw:
            try:
                record = decode_outcomes(_bytes(raw))
            except ValueError:
                record = None
        found[name] = (record, _text(error) if error else None)
    return found


def read_health(client: redis.Redis, namespace: str, names: Sequence[str]) -> dict[str, Health]:
    """Each name's health (one pipelined round trip)."""
    return {name: health(name, record, error)
            for name, (record, error) in read_outcomes(client, namespace, names).items()}


def _bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("latin-1", errors="surrogateescape")
    raise ValueError(f"not an outcome record: {value!r}")


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
