"""What every part of the store stands on: the Redis side, the settings its reads and
writes use, who acts (for the audit trail), and the refusals the parts share."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis

from kiqbeat.audit import record_action
from kiqbeat.core import json_text
from kiqbeat.core.instants import to_ms
from kiqbeat.core.limits import MAX_DEFINITION_BYTES
from kiqbeat.core.schedule import Schedule
from kiqbeat.document.validate import Checks, read_definition
from kiqbeat.errors import ConfigError, ScheduleNotFoundError, shown
from kiqbeat.redis import keys
from kiqbeat.redis.definitions import Oversized
from kiqbeat.redis.side import RedisSide


@dataclass(frozen=True)
class StoreContext:
    """One store's Redis side, window and history settings, and the actor and note its
    changes are recorded under; the parts of a `Store` share one."""

    side: RedisSide
    window_s: float
    keep_history: int
    actor: str
    note: str = ""
    # Definitions checked by content (document/validate.py), kept for this store's reads.
    checks: Checks = field(default_factory=Checks, compare=False)

    @property
    def client(self) -> redis.Redis:
        """The Redis client."""
        return self.side.client

    @property
    def namespace(self) -> str:
        """The key prefix."""
        return self.side.namespace

    def audit(self, action: str, name: str = "", detail: str = "") -> None:
        """Record a change in the audit trail, for this context's actor, with its note."""
        record_action(self.client, self.namespace, self.actor, action, name, note=self.note,
                      detail=detail)

    def no_schedule(self, names: Iterable[str]) -> ScheduleNotFoundError:
        """The refusal of `names` the store does not hold: it names the hash looked in, so
        that a wrong namespace (key prefix) shows."""
        key = keys.definitions(self.namespace)
        return ScheduleNotFoundError([f"no schedule {shown(n)} in the store ({key})"
                                      for n in names])

    def now_ms(self) -> int:
        """The instant of a public call's changes: one Redis clock read, passed to each of
        its writes (epoch ms)."""
        return to_ms(self.side.clock())

    def schedule(self, name: str, data: bytes | Oversized | None) -> Schedule | str:
        """The checked schedule of a stored definition, or why there is none."""
        if data is None:
            return "no schedule of that name"
        if isinstance(data, Oversized):
            return data.why()
        try:
            return read_definition(name, data, window_s=self.window_s, checks=self.checks)
        except ConfigError as exc:
            return "its definition is invalid: " + "; ".join(exc.problems)


def as_mapping(data: bytes) -> dict[str, Any] | None:
    """A stored definition's JSON object, or None when it is not one."""
    try:
        value = json_text.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def exportable(name: str, data: bytes | Oversized | None) -> dict[str, Any] | str:
    """A stored definition as a mapping, or why it cannot be exported."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return ("its name is not UTF-8 (written by another language), which no export "
                "format holds; rename it to export it")
    if data is None:
        return "its definition could not be read"
    if isinstance(data, Oversized):
        return data.why()
    if len(data) > MAX_DEFINITION_BYTES:
        return (f"its definition is {len(data):,} bytes, over the limit of "
                f"{MAX_DEFINITION_BYTES:,}")
    try:
        value = json_text.loads(data)
    except RecursionError:
        return "its definition is JSON nested too deeply to read"
    except ValueError:
        return f"its definition is not JSON: {shown(data)}"
    if not isinstance(value, dict):
        return f"its definition is not a JSON object: {shown(value)}"
    return value
