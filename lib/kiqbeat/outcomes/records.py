"""The outcome records in Redis: folding what the workers left in the inbox into them
(redis/lua/fold.lua, in bounded slices; workers with the script fold their own reports),
publishing the fold for the workers, and reading the records back as `Outcomes` and `Health`
(the names the fold marks for the alert decision: alerts/step.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from redis.client import NEVER_DECODE

from kiqbeat.core import limits
from kiqbeat.core.outcomes import Health, Outcomes, decode_outcomes, health
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import redis_errors, reply_text
from kiqbeat.redis.progress import bucket

_RAW = {NEVER_DECODE: True}


# The worker protocol's version, first in the published call (docs/store.md): a worker that
# does not know it writes to the inbox instead.
PROTOCOL = "1"


@dataclass
class Folded:
    """What one `fold_outcomes` did: entries taken from the inbox, dropped (garbled, for an
    unknown schedule, or older than every tick a full record keeps), left in the inbox,
    schedules added to the changed names, the script calls and the time they took."""

    taken: int = 0
    dropped: int = 0
    left: int = 0
    notified: int = 0
    calls: int = 0
    duration_s: float = 0.0


def fold_outcomes(client: redis.Redis, namespace: str = "", *, history: int = 10,
                  lua: scripts.Caller = scripts.SCRIPTS, slice_size: int = limits.FOLD_SLICE,
                  slices: int = limits.FOLD_SLICES, deadline: float | None = None,
                  folded: Folded | None = None) -> Folded:
    """Fold what the workers left in the inbox into the schedules' outcome records,
    `slice_size` entries a script call, at most `slices` calls (and none after `deadline`, a
    time.monotonic() instant, once one ran). `history`: ticks a record keeps unless its
    definition says otherwise. Entries left over wait for the next invocation (the inbox is
    bounded); the schedules whose health the alert decision must judge are added to the
    changed names (`changed_names`), as a worker's own fold adds them."""
    report = folded if folded is not None else Folded()
    inbox = keys.outcomes_inbox(namespace)
    started = time.monotonic()
    for _ in range(slices):
        with redis_errors(client, f"folding {inbox}"):
            reply = lua.call(scripts.FOLD, client, [inbox], [slice_size, history])
        report.calls += 1
        taken, dropped, left, notified = (int(v) for v in reply[:4])
        report.taken += taken
        report.dropped += dropped
        report.left = left
        report.notified += notified
        if taken < slice_size or left == 0:
            break
        if deadline is not None and time.monotonic() > deadline:
            break
    report.duration_s += time.monotonic() - started
    return report


def fold_call(history: int, lua: scripts.Caller) -> str:
    """The call a worker makes to fold its own report, as published in
    `keys.outcomes_script`: "PROTOCOL VERB TARGET HISTORY" (docs/store.md, "The worker
    protocol"; the worker sends `VERB TARGET 1 INBOX 0 HISTORY ENTRY`), the same in every
    namespace (the inbox key carries it)."""
    verb, target = ("FCALL", scripts.FOLD.function) if lua.functions else (
        "EVALSHA", scripts.FOLD.sha)
    return f"{PROTOCOL} {verb} {target} {history}"


def publish_fold(client: redis.Redis, namespace: str, history: int, lua: scripts.Caller,
                 published: object, *, reported: bool = True) -> bool:
    """Make the workers' fold current: load the script (scripts mode; in functions mode the
    library is loaded by an administrator) and publish its call, unless `published` (the
    key's value as read; None: none) is that call already. Only once workers `reported`
    something to the inbox (a deployment without the middleware gets no key) or a call is
    published already (another kiqbeat's: an upgrade). Whether it wrote (one pipelined round
    trip)."""
    call = fold_call(history, lua)
    if published is None and not reported:
        return False
    if isinstance(published, bytes | str) and reply_text(published) == call:
        return False
    pipe = client.pipeline(transaction=False)
    if not lua.functions:
        pipe.script_load(scripts.FOLD.text)
    pipe.set(keys.outcomes_script(namespace), call)
    with redis_errors(client, f"publishing {keys.outcomes_script(namespace)}"):
        pipe.execute()
    return True


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
                record = decode_outcomes(raw)  # bytes: read undecoded
            except ValueError:
                record = None
        found[name] = (record, _text(error) if error else None)
    return found


def read_health(client: redis.Redis, namespace: str, names: Sequence[str]) -> dict[str, Health]:
    """Each name's health (one pipelined round trip)."""
    return {name: health(name, record, error)
            for name, (record, error) in read_outcomes(client, namespace, names).items()}


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
