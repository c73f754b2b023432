"""What a job may hold: every value checked as JSON that every consumer reads back as
written, and every job encoded exactly as it will be pushed (DESIGN §4, docs/security.md).

Limits: at most MAX_JOB_VALUES values in `args` and `payload`, MAX_JOB_BYTES of JSON,
MAX_JSON_DEPTH levels (Sidekiq's parser), 64-bit integers, no lone surrogates; `payload:`
may not set the keys kiqbeat or Sidekiq own, and keys other middlewares own get a warning.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

from kiqbeat.core.limits import MAX_JSON_DEPTH
from kiqbeat.core.payload import job_json
from kiqbeat.core.schedule import Schedule
from kiqbeat.document.fields import RESERVED_PAYLOAD_KEYS
from kiqbeat.errors import ConfigError, shown

# args and payload together, in JSON values: generous for real jobs, and a stop for YAML
# aliases, which PyYAML builds cheaply as shared references but JSON writes out in full.
MAX_JOB_VALUES = 10_000
# One job's JSON: a job never needs more, and one push call (512 KiB) always carries it.
MAX_JOB_BYTES = 512 * 1024
# JSON integers every consumer reads exactly: Ruby's are unbounded, Elixir's too, but
# Sidekiq's JavaScript UI and most other parsers stop at 64 bits.
_INT_RANGE = range(-(2**63), 2**63)
_SURROGATE = re.compile("[\ud800-\udfff]")
# Job-hash keys that other Sidekiq middlewares own: setting them by hand changes what the
# middleware does (a batch id, unique locks, encryption, current attributes).
MIDDLEWARE_KEYS = {
    "bid": "Sidekiq Pro batches", "cattr": "Sidekiq's current attributes",
    "encrypt": "Sidekiq Enterprise encryption", "unique_for": "Sidekiq Enterprise unique jobs",
    "unique_until": "Sidekiq Enterprise unique jobs", "expires_in": "Sidekiq Pro expiring jobs",
    "lock": "sidekiq-unique-jobs", "lock_ttl": "sidekiq-unique-jobs",
    "lock_timeout": "sidekiq-unique-jobs", "lock_args_method": "sidekiq-unique-jobs",
    "on_conflict": "sidekiq-unique-jobs", "unique_digest": "sidekiq-unique-jobs",
    "lock_digest": "sidekiq-unique-jobs", "trace_propagation_headers": "sentry-sidekiq",
}
_SAMPLE_TICK = datetime(2026, 1, 1, tzinfo=UTC)


def job_bytes(schedule: Schedule) -> int:
    """The size of a job of the schedule as it will be pushed (UTF-8 JSON, stamps of this
    century); ValueError or RecursionError when it cannot be written."""
    return len(job_json(schedule, _SAMPLE_TICK, pushed_at=_SAMPLE_TICK).encode("utf-8"))


def encoding_problem(schedule: Schedule) -> str | None:
    """Encode a job of the schedule exactly as it will be pushed; what would break, if any."""
    try:
        size = job_bytes(schedule)
    except (ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        return f"its job cannot be written as UTF-8 JSON ({type(exc).__name__})"
    if size > MAX_JOB_BYTES:
        return (f"its job is {size:,} bytes of JSON; the limit is {MAX_JOB_BYTES:,} "
                "(keep big data elsewhere and pass a key to it)")
    return None


class Shapes:
    """Checks values as JSON every consumer reads back as written, counting what they hold.

    YAML aliases make many schedules share one list or mapping: each shared object is
    checked once (its count and height remembered by identity), so 20,000 schedules sharing
    one body cost one check of it, not 20,000.
    """

    def __init__(self) -> None:
        # id -> (values, container levels, JSON bytes at least)
        self._known: dict[int, tuple[int, int, int]] = {}
        self._keep: list[object] = []  # the ids above stay valid while this lives

    def check(self, value: object, path: str, level: int, budget: list[int]) -> None:
        """Raise ConfigError unless `value`, at `level` of the job hash, is carried intact;
        `budget` counts down the values and the JSON bytes a job may hold."""
        count, _, size = self._shape(value, path, level)
        budget[0] -= count
        budget[1] -= size
        if budget[0] < 0:
            raise ConfigError(f"args and payload hold more than {MAX_JOB_VALUES:,} values "
                              "(YAML aliases?)")
        if budget[1] < 0:
            raise ConfigError(f"args and payload make a job of more than {MAX_JOB_BYTES:,} "
                              "bytes of JSON (keep big data elsewhere and pass a key to it)")

    def _shape(self, value: object, path: str, level: int) -> tuple[int, int, int]:
        if value is None or isinstance(value, bool):
            return 1, 0, 4
        if isinstance(value, int):
            if value not in _INT_RANGE:
                raise ConfigError(f"{path} is {shown(value)}, outside the 64-bit integers "
                                  "that every JSON reader keeps exactly; pass it as a string")
            return 1, 0, 8
        if isinstance(value, str):
            if not value.isascii() and _SURROGATE.search(value):
                raise ConfigError(f"{path} holds a lone surrogate (not a character), which "
                                  "UTF-8 cannot carry")
            return 1, 0, len(value) + 2
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ConfigError(f"{path} is {value!r}, which JSON cannot carry")
            return 1, 0, 8
        if not isinstance(value, list | dict):
            raise ConfigError(f"{path} is a {type(value).__name__} ({shown(value)}), which "
                              "JSON cannot carry")
        known = self._known.get(id(value))
        if known is None:
            known = self._container(value, path, level)
            self._known[id(value)] = known
            self._keep.append(value)
        if level + known[1] - 1 > MAX_JSON_DEPTH:
            raise ConfigError(f"{path} nests deeper than the {MAX_JSON_DEPTH} levels Sidekiq's "
                              "JSON parser reads (the job would go to Dead unrun)")
        return known

    def _container(self, value: list[Any] | dict[Any, Any], path: str,
                   level: int) -> tuple[int, int, int]:
        if level > MAX_JSON_DEPTH:
            raise ConfigError(f"{path} nests deeper than the {MAX_JSON_DEPTH} levels Sidekiq's "
                              "JSON parser reads (the job would go to Dead unrun)")
        count, height, size = 1, 1, 2
        items: list[tuple[str, object]]
        if isinstance(value, list):
            items = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
        else:
            items = []
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ConfigError(f"{path} has the key {shown(key)}; keys must be "
                                      "strings (quote it)")
                size += self._shape(key, f"{path} key {shown(key)}", level + 1)[2] + 1
                items.append((f"{path}[{shown(key)}]", item))
        for where, item in items:
            n, h, b = self._shape(item, where, level + 1)
            count, height, size = count + n, max(height, h + 1), size + b + 1
            if count > MAX_JOB_VALUES:
                raise ConfigError(f"args and payload hold more than {MAX_JOB_VALUES:,} "
                                  "values (YAML aliases?)")
            if size > MAX_JOB_BYTES:
                raise ConfigError(f"args and payload make a job of more than "
                                  f"{MAX_JOB_BYTES:,} bytes of JSON (keep big data elsewhere "
                                  "and pass a key to it)")
        return count, height, size


def plain_values(container: list[Any] | dict[str, Any], level: int) -> int:
    """How many values a list or mapping holds when `Shapes.check` would pass it at `level`
    of the job hash, leaving out the byte budget; -1 when it might not (the full check then
    says why). Checks what `json.loads` lets through: integers beyond 64 bits, NaN and
    Infinity, lone surrogates, nesting, the value count; anything but JSON's own types is
    left to the full check. It builds no paths, so it costs a fraction of `Shapes.check`:
    the check of each schedule's args on a cached definition template."""
    if level > MAX_JSON_DEPTH:
        return -1
    items: Any = container
    if type(container) is dict:
        if not all(type(key) is str and (key.isascii() or not _SURROGATE.search(key))
                   for key in container):
            return -1
        items = container.values()
    elif type(container) is not list:
        return -1
    count = 1
    for item in items:
        kind = type(item)
        if kind is str:
            if not item.isascii() and _SURROGATE.search(item):
                return -1
            count += 1
        elif kind is int:
            if item not in _INT_RANGE:
                return -1
            count += 1
        elif kind is float:
            if not math.isfinite(item):
                return -1
            count += 1
        elif item is None or kind is bool:
            count += 1
        elif kind is list or kind is dict:
            held = plain_values(item, level + 1)
            if held < 0:
                return -1
            count += held
        else:
            return -1
        if count > MAX_JOB_VALUES:
            return -1
    return count


def payload_keys(value: object, options: Mapping[str, Any], shapes: Shapes,
             budget: list[int]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{shown(value)} must be a mapping of job keys to values")
    bad = [k for k in value if not isinstance(k, str) or k in RESERVED_PAYLOAD_KEYS
           or k.startswith("error_")]
    if bad:
        raise ConfigError(
            f"may not set {', '.join(shown(k) for k in bad)}: kiqbeat sets class, args, jid, "
            "queue, wrapped and the timestamps itself (use the schedule's fields), and only "
            "Sidekiq writes at, retry_count and error_* keys")
    twice = [k for k in value if k in options]
    if twice:
        raise ConfigError(f"sets {', '.join(repr(k) for k in twice)}, also given as a "
                          "schedule field; keep one")
    # The payload's keys merge into the job hash: its values are at level 2, like args.
    shapes.check(value, "payload", 1, budget)
    return cast(dict[str, Any], value)
