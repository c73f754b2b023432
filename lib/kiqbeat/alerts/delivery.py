"""The outbox drained into the sinks (DESIGN §12): delivered until acknowledged, never
stalling an invocation.

Each sink is a consumer group of the outbox stream. An invocation first takes back the
events delivered before but not acknowledged for `RETRY_IDLE_MS` (a failed send, a copy killed
mid-send: XAUTOCLAIM, atomic, so two copies never both take one), then the events not yet
delivered (XREADGROUP: each to one copy), at most `MAX_DELIVERED_PER_INVOCATION` a sink; it
sends each within `ALERT_TIMEOUT_S` and acknowledges it (XACK) on success. A sink's first
failure ends its turn: the rest wait for the next invocation, so a hanging webhook costs an
invocation one timeout at most. An entry that cannot be read as an event (a field written by
hand, a tick past year 9999) is acknowledged for the sink with a warning naming its id and
why, and the turn carries on: one bad entry never holds back the rest nor fails the
invocation. The outbox is trimmed to `MAX_OUTBOX_EVENTS`: a sink down for
long loses the oldest events, never the invocation's memory.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from kiqbeat.alerts.events import AlertEvent
from kiqbeat.alerts.sinks import AlertDeliveryError, Sink, Sns, Webhook
from kiqbeat.core.limits import ALERT_TIMEOUT_S, MAX_DELIVERED_PER_INVOCATION
from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors, reply_text

# Every copy reads as the one consumer (a Lambda container's name would pile up consumers);
# the group's delivery bookkeeping, not the consumer, keeps two copies off one event.
CONSUMER = "kiqbeat"
# An event delivered but not acknowledged this long is taken back and sent again: past any
# send's timeout, so a copy still sending is never overtaken.
RETRY_IDLE_MS = int(ALERT_TIMEOUT_S * 1000) * 5


def sinks_of(webhook: str, secret: str, sns_topic: str,
             environ: Mapping[str, str] | None = None) -> list[Sink]:
    """The sinks the settings name (none when none is set)."""
    out: list[Sink] = []
    if webhook:
        out.append(Webhook(webhook, secret))
    if sns_topic:
        endpoint = (environ or {}).get("AWS_ENDPOINT_URL_SNS") or (environ or {}).get(
            "AWS_ENDPOINT_URL") or None
        out.append(Sns(sns_topic, endpoint))
    return out


@dataclass(frozen=True)
class Delivered:
    """One sink's turn: events acknowledged, the error that ended it (None: none), and the
    entries dropped as unreadable (each a line naming its id and why)."""

    sink: str
    sent: int
    error: str | None
    dropped: tuple[str, ...] = ()


def _readable(entry_id: Any, fields: Any) -> tuple[AlertEvent | None, str]:
    """The event an entry holds, checked to encode, or None and why it cannot be sent."""
    try:
        event = AlertEvent.of(fields)
        event.encoded()  # the tick's and the decision's dates: in range
    except (ValueError, OverflowError, OSError) as exc:
        return None, (f"outbox entry {reply_text(entry_id)} is not an alert event "
                      f"({type(exc).__name__}: {str(exc)[:200]}); acknowledged, not sent")
    return event, ""


def deliver(client: redis.Redis, namespace: str, sink: Sink) -> Delivered:
    """One sink's turn at the outbox (module docstring)."""
    key, most = keys.outbox(namespace), MAX_DELIVERED_PER_INVOCATION
    with redis_errors(client, f"reading the alert outbox {key}"):
        claimed: Any = client.xautoclaim(key, sink.name, CONSUMER, RETRY_IDLE_MS,
                                         start_id="0-0", count=most)
        entries = list(claimed[1])
        gone = claimed[2] if len(claimed) > 2 else []  # trimmed away meanwhile
        if gone:
            client.xack(key, sink.name, *gone)
        if len(entries) < most:
            fresh: Any = client.xreadgroup(sink.name, CONSUMER, {key: ">"},
                                           count=most - len(entries))
            for _stream, more in fresh or []:
                entries += more
    sent = 0
    dropped: list[str] = []
    for entry_id, fields in entries:
        if not fields:  # deleted meanwhile
            continue
        event, why = _readable(entry_id, fields)
        if event is not None:
            try:
                sink.send(event)
            except AlertDeliveryError as exc:
                return Delivered(sink.name, sent, str(exc), tuple(dropped))
        else:
            dropped.append(why)
        with redis_errors(client, f"acknowledging an alert in {key}"):
            client.xack(key, sink.name, entry_id)
        sent += event is not None
    return Delivered(sink.name, sent, None, tuple(dropped))


@dataclass(frozen=True)
class Backlog:
    """One sink's undelivered events: how many (delivered but not acknowledged, and not yet
    delivered) and the oldest one's age in seconds (None when there is none)."""

    sink: str
    waiting: int
    oldest_age_s: float | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"sink": self.sink, "waiting": self.waiting,
                "oldest_age_s": None if self.oldest_age_s is None
                else round(self.oldest_age_s, 1)}


def backlogs(client: redis.Redis, namespace: str, now_ms: int | None = None) -> list[Backlog]:
    """Every sink's backlog (XINFO GROUPS, and per sink with one, two reads of its oldest
    event): what `status` shows."""
    key = keys.outbox(namespace)
    with redis_errors(client, f"reading the alert outbox {key}"):
        if not client.exists(key):
            return []
        groups: Any = client.xinfo_groups(key)
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        out = []
        for group in groups:
            name = reply_text(group["name"])
            pending = int(group.get("pending") or 0)
            lag = group.get("lag")
            oldest: list[str] = []
            if pending:
                summary: Any = client.xpending(key, name)
                if summary.get("min"):
                    oldest.append(reply_text(summary["min"]))
            after = reply_text(group.get("last-delivered-id") or "0-0")
            nxt: Any = client.xrange(key, min=f"({after}", max="+", count=1)
            if nxt:
                oldest.append(reply_text(nxt[0][0]))
            undelivered = int(lag) if isinstance(lag, int) else (
                int(client.xlen(key)) if nxt else 0)
            first = min((int(i.split("-")[0]) for i in oldest), default=None)
            out.append(Backlog(name, pending + undelivered,
                               None if first is None else max(0.0, (now_ms - first) / 1000)))
    return out


def deliver_all(client: redis.Redis, namespace: str, sinks: Sequence[Sink],
                backlog: Mapping[str, tuple[int, int]]) -> list[Delivered]:
    """Every sink's turn that has something waiting (`backlog` from the decision step: a sink
    with nothing pending nor undelivered costs no round trip)."""
    return [deliver(client, namespace, sink) for sink in sinks
            if backlog.get(sink.name, (1, 1)) != (0, 0)]
