"""An alert event as decided (incidents.lua) and as each sink sends it: pure.

The webhook's body is JSON with at least `schedule`, `event` (failing | silent | recovered |
paused), `tick` (ISO), `tick_ms`, `jid`, `error`, `key` (the idempotency key: schedule, event
and the incident's opening tick; a receiver that sees a key twice has seen the event before)
and `text`, one line a Slack incoming webhook shows as is. With a secret, the body's
HMAC-SHA256 goes in the `X-Kiqbeat-Signature` header as `sha256=HEX`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kiqbeat.core.limits import MAX_SHOWN_CHARS
from kiqbeat.core.payload import jid_ms

SIGNATURE_HEADER = "X-Kiqbeat-Signature"
KEY_HEADER = "X-Kiqbeat-Idempotency-Key"
_WORDS = {
    "failing": "is failing",
    "silent": "is silent",
    "recovered": "has recovered",
    "paused": "paused itself",
}
_MARKS = {"failing": ":red_circle:", "silent": ":large_orange_circle:",
          "recovered": ":large_green_circle:", "paused": ":double_vertical_bar:"}


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")


@dataclass(frozen=True)
class AlertEvent:
    """One decided event: which schedule, what happened, at which tick, and why."""

    key: str  # NAME|EVENT|OPENING_TICK_MS
    schedule: str
    event: str
    tick_ms: int
    jid: str
    error: str
    note: str
    decided_ms: int

    @classmethod
    def of(cls, fields: Mapping[Any, Any]) -> AlertEvent:
        """The event an outbox entry holds (its fields as incidents.lua writes them)."""
        got = {_text(k): _text(v) for k, v in fields.items()}
        name, tick = got.get("s", ""), int(got.get("t") or 0)
        return cls(got.get("k", ""), name, got.get("e", ""), tick,
                   got.get("j") or (jid_ms(name, tick) if tick else ""),
                   got.get("x", ""), got.get("n", ""), int(got.get("at") or 0))

    @property
    def tick(self) -> str:
        """The tick, ISO 8601 in UTC."""
        return datetime.fromtimestamp(self.tick_ms / 1000, tz=UTC).isoformat()

    def text(self) -> str:
        """One line for a person (a Slack incoming webhook shows it as is)."""
        what = _WORDS.get(self.event, self.event)
        line = f"{_MARKS.get(self.event, '')} kiqbeat: schedule {self.schedule!r} {what}"
        details = [self.note, f"tick {self.tick}"]
        if self.error:
            details.append(f"last error: {self.error[:MAX_SHOWN_CHARS]}")
        return f"{line.strip()} ({'; '.join(d for d in details if d)})"

    def body(self) -> dict[str, Any]:
        """The JSON object a webhook receives (and an SNS message holds)."""
        return {"schedule": self.schedule, "event": self.event, "tick": self.tick,
                "tick_ms": self.tick_ms, "jid": self.jid, "error": self.error or None,
                "note": self.note, "key": self.key,
                "decided_at": datetime.fromtimestamp(self.decided_ms / 1000,
                                                     tz=UTC).isoformat(),
                "text": self.text()}

    def encoded(self) -> bytes:
        """The body as sent: compact JSON, UTF-8."""
        return json.dumps(self.body(), separators=(",", ":"), ensure_ascii=False).encode()


def signature(secret: str, body: bytes) -> str:
    """The `X-Kiqbeat-Signature` value of `body`: "sha256=" and its HMAC-SHA256 in hex."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
