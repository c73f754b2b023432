"""The audit trail (DESIGN §9): every operator action, from every entrypoint, in one place.

The Store records each action it carries out for an operator — add, put, update, remove,
pause, resume, trigger, backfill, import, and a reindex (`kiqbeat schedules reindex`, through
the store's `ctx.audit`) — with who asked (the actor the entrypoint gives it: the console's
token name, the command's `--actor` / `KIQBEAT_ACTOR`, by default user@host), which schedule,
a note when given, and a short detail (the manual run's jid, the count a backfill pushed).
Entries live in one Redis stream (`keys.audit`) whose ids are the Redis clock's instants,
trimmed to about `MAX_AUDIT_ENTRIES`: bounded state.

An entry is written after the action succeeded (a refused action records nothing); if
Redis refuses the entry, the error says the action was done but not recorded. Its fields are
sent as bytes (a name that is not UTF-8 as its own bytes), whatever the client's encoding
settings, so that recording an action done never fails on its text.

An entry is shown escaped and clipped (`errors.shown_name`, `shown_text`: text written by
an operator or another language never reaches a terminal raw), and in JSON with a name that
is not UTF-8 as `json_name` gives it.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis

from kiqbeat.core.limits import MAX_AUDIT_ENTRIES, MAX_AUDIT_NOTE_CHARS, MAX_SHOWN_CHARS
from kiqbeat.errors import json_name, shown, shown_name, shown_text
from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors, reply_text

ACTIONS = ("add", "put", "update", "remove", "pause", "resume", "trigger", "backfill",
           "import", "reindex", "skip", "alert")
_PAGE = 500  # stream entries read per round trip when filtering by schedule


def default_actor() -> str:
    """user@host of this process: who an action is recorded for when no actor is given."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class AuditEntry:
    """One recorded operator action."""

    at: datetime  # by the Redis clock
    actor: str
    action: str
    name: str  # the schedule ("" for an action on several: an import, a backfill --all)
    note: str
    detail: str

    def line(self) -> str:
        """One line for a person (`kiqbeat audit`), each part escaped and clipped: the
        name quoted (`shown`), the actor as `shown_name`, the rest as `shown_text`."""
        target = f" {shown(self.name, MAX_SHOWN_CHARS)}" if self.name else ""
        return (f"{self.at.isoformat(timespec='seconds')} {shown_name(self.actor)}: "
                f"{shown_text(self.action)}{target}"
                + (f" ({shown_text(self.detail)})" if self.detail else "")
                + (f" — {shown_text(self.note, MAX_AUDIT_NOTE_CHARS)}" if self.note else ""))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (a name that is not UTF-8: also its bytes, `json_name`)."""
        return {"at": self.at.isoformat(), "actor": self.actor, "action": self.action,
                **json_name(self.name), "note": self.note, "detail": self.detail}


def record_action(client: redis.Redis, namespace: str, actor: str, action: str,
                  name: str = "", *, note: str = "", detail: str = "") -> None:
    """Append one entry to the audit trail (one XADD, trimming the stream in the same call).

    Each field is sent as bytes — text that is not UTF-8 (a name another language wrote,
    read back as lone surrogates) as its own bytes — so a client's encoding settings never
    make an action done go unrecorded."""
    fields = {"actor": actor[:MAX_SHOWN_CHARS], "action": action, "name": name,
              "note": note[:MAX_AUDIT_NOTE_CHARS], "detail": detail[:MAX_SHOWN_CHARS]}
    sent = {k.encode(): v.encode(errors="surrogateescape") for k, v in fields.items()}
    key = keys.audit(namespace)
    with redis_errors(client, f"recording {action} of {shown(name)} in the audit trail {key} "
                              "(the action itself was done)"):
        client.xadd(key, sent, maxlen=MAX_AUDIT_ENTRIES, approximate=True)  # type: ignore[arg-type]


def _entry(entry_id: Any, fields: Any) -> AuditEntry:
    """One stream entry read back. The name keeps its bytes (`reply_text`: a name that is not
    UTF-8 is still the schedule's); the other fields are only shown, so bytes that are not
    UTF-8 there (written by hand or by another tool) read as U+FFFD: JSON and the console
    can always carry the entry (issue 26)."""
    values = {reply_text(k): (reply_text(v) if reply_text(k) == "name" else _shown_text(v))
              for k, v in fields.items()}
    at = datetime.fromtimestamp(int(reply_text(entry_id).split("-")[0]) / 1000, tz=UTC)
    return AuditEntry(at, values.get("actor", ""), values.get("action", ""),
                      values.get("name", ""), values.get("note", ""), values.get("detail", ""))


def _shown_text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value.encode(
        errors="surrogateescape").decode(errors="replace")


def _newest_first(client: redis.Redis, key: str) -> Iterator[AuditEntry]:
    upper = "+"
    while True:
        with redis_errors(client, f"reading the audit trail {key}"):
            page: Any = client.xrevrange(key, max=upper, min="-", count=_PAGE)
        for entry_id, fields in page:
            yield _entry(entry_id, fields)
        if len(page) < _PAGE:
            return
        upper = "(" + reply_text(page[-1][0])


def read_audit(client: redis.Redis, namespace: str, name: str | None = None,
               limit: int = 50) -> list[AuditEntry]:
    """The newest `limit` entries, of schedule `name` only when given (the trail is bounded,
    so filtering reads at most `MAX_AUDIT_ENTRIES` entries, a page per round trip)."""
    out: list[AuditEntry] = []
    for entry in _newest_first(client, keys.audit(namespace)):
        if name is None or entry.name == name:
            out.append(entry)
            if len(out) >= limit:
                break
    return out
