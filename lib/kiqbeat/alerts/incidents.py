"""The decision step an invocation runs after its pushes (DESIGN §12), and the reads of what it
leaves: open incidents and the delivery backlog.

`Watch` collects, as the invocation plans, the due schedules that have expectations; `decide`
sends one incidents.lua call with the ticks this invocation pushed of them, the health of the
changed names the outcome folds left and the sinks, and the script decides every incident
once (compare and set on `kiqbeat:incidents`, in the same step as the outbox and audit
entries). Its cost follows the work: the schedules with expectations this invocation pushed,
the changed names, and the deadlines due (a sorted set read by score), never all schedules.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import redis

from kiqbeat.core.limits import MAX_AUDIT_ENTRIES, MAX_OUTBOX_EVENTS
from kiqbeat.core.outcomes import LAST_TICK_MS, Health
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Expectations
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import hash_pages, redis_errors, reply_text

if TYPE_CHECKING:
    from kiqbeat.core.plan import Entry


# Deadlines one invocation looks at (the rest come due for the next one).
DEADLINES_PER_INVOCATION = 10_000


@dataclass
class Watch:
    """The due schedules with expectations an invocation planned: name -> the SHA1 of the
    definition planned and its expectations (None: planned disabled, so no deadline)."""

    planned: dict[str, tuple[str, Expectations | None]] = field(default_factory=dict)

    def add(self, entries: Sequence[Entry]) -> None:
        """Note the entries of a batch that have expectations (one attribute look each)."""
        for entry in entries:
            schedule = entry.schedule
            if schedule.expectations is not None:
                self.planned[schedule.name] = (
                    entry.sha, schedule.expectations if schedule.enabled else None)


@dataclass(frozen=True)
class Decision:
    """What one decision step did: events decided, schedules to pause, and per sink its
    backlog (entries delivered but not acknowledged, entries not yet delivered; -1 unknown)."""

    events: int
    to_pause: list[str]
    backlog: dict[str, tuple[int, int]]


def decide(client: redis.Redis, namespace: str, now_ms: int, watch: Watch, report: Report,
           changed: Sequence[Health], sinks: Sequence[str],
           lua: scripts.Caller = scripts.SCRIPTS, *, judged: Sequence[tuple[str, str]] = ()
           ) -> Decision:
    """Run the decision step (one incidents.lua call): arm the deadlines of the ticks this
    invocation pushed of schedules with expectations, judge the changed health and the
    deadlines due, and take the `judged` changed names ((name, sequence number) pairs:
    `step.Changed`) away (unless added again since).
    The script's header states the rules."""
    arms: list[Any] = []
    armed = set()
    for name, _queue, ticks, _releases, flags in report.pushed_runs:
        found = watch.planned.get(name)
        if found is None or found[1] is None or name in armed:
            continue
        first = next(t for t, f in zip(ticks, flags, strict=True) if f == "1")
        arms += [name, found[0], first, found[1].encode()]
        armed.add(name)
    disarms = [name for name, (_sha, rules) in watch.planned.items() if rules is None]
    health: list[Any] = []
    for h in changed:
        if h.last_success_tick_ms is not None or h.consecutive_failures:
            health += [h.name, h.last_success_tick_ms or 0, h.consecutive_failures]
    args: list[Any] = [now_ms, MAX_OUTBOX_EVENTS, MAX_AUDIT_ENTRIES, DEADLINES_PER_INVOCATION,
                       len(sinks), *sinks, len(arms) // 4, *arms, len(disarms), *disarms,
                       len(health) // 3, *health,
                       len(judged), *(v for pair in judged for v in pair)]
    script_keys = [keys.deadlines(namespace), keys.expectations(namespace),
                   keys.incidents(namespace), keys.outbox(namespace), keys.audit(namespace),
                   keys.definitions(namespace), keys.paused(namespace),
                   keys.outcomes_errors(namespace), keys.outcomes_changed(namespace)]
    with redis_errors(client, "deciding incidents"):
        events, to_pause, backlog = lua.call(scripts.INCIDENTS, client, script_keys, args)
    out: dict[str, tuple[int, int]] = {}
    for sink, pair in zip(sinks, backlog, strict=True):
        pending, lag = reply_text(pair).split()
        out[sink] = (int(pending), int(lag))
    return Decision(int(events), [reply_text(n) for n in to_pause], out)


@dataclass(frozen=True)
class Incident:
    """An open incident: its schedule, event (failing | silent | paused) and opening tick."""

    name: str
    event: str
    tick_ms: int

    @property
    def at(self) -> datetime:
        """The opening tick, aware UTC."""
        return datetime.fromtimestamp(self.tick_ms / 1000, tz=UTC)

    @property
    def tick(self) -> str:
        """The opening tick, ISO 8601 in UTC."""
        return self.at.isoformat()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"schedule": self.name, "event": self.event, "tick": self.tick}


def incident_record(raw: bytes | str) -> tuple[str, int]:
    """An incident record's event ("" once closed) and opening tick (epoch ms), read as the
    scripts read it (deadline.lua's `read_incident`): a record that is not one (not JSON, not
    an object, its event not a string) is an open `failing`, a tick that is no instant 0."""
    try:
        value = json.loads(raw)
    except ValueError:
        return "failing", 0
    if not (isinstance(value, dict) and isinstance(value.get("e"), str)):
        return "failing", 0
    tick = _lua_number(value.get("t"))
    return value["e"], int(tick) if tick is not None and 0 <= tick < LAST_TICK_MS else 0


def _lua_number(value: Any) -> float | None:
    """What Lua's `tonumber` makes of a decoded JSON value: a number as it is; a string of
    one, decimal or hexadecimal, spaces around it allowed; nothing else (true: nil)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if not isinstance(value, str):
        return value
    text = value.strip(" \t\n\v\f\r")  # C's spaces: Lua reads no other digits or spaces
    if not text.isascii():
        return None
    try:
        return float(text) if "_" not in text else None
    except ValueError:
        pass
    try:  # C's strtod reads hexadecimal too ('0x10', '-0x1p4')
        return float.fromhex(text) if text.lstrip("+-")[:2].lower() == "0x" else None
    except ValueError:
        return None


def open_incidents(client: redis.Redis, namespace: str, limit: int = 100) -> list[Incident]:
    """Up to `limit` open incidents, oldest tick first (HSCAN pages of the incidents hash:
    it holds the schedules that ever had an incident)."""
    found: list[Incident] = []
    key = keys.incidents(namespace)
    for page in hash_pages(client, key, 200):
        for name, raw in page.items():
            event, tick = incident_record(raw)
            if event:  # "": closed
                found.append(Incident(reply_text(name), event, tick))
        if len(found) >= limit:
            break
    return sorted(found, key=lambda i: (i.tick_ms, i.name))[:limit]
