"""The console's sign-ins, held in Redis (`keys.web_session`): what makes sign-out final.

A session cookie is signed (auth.py), but a signature alone cannot be taken back: a copied
cookie would work for its whole 12 hours after sign-out. So each sign-in also writes a
record under its session id, with the session's TTL; every request with a session cookie
reads it (one GET), and sign-out deletes it. Every replica of the console shares the
records, as it shares the keys that sign the cookies.
"""

from __future__ import annotations

import json
import time

import redis

from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors
from kiqbeat.web.auth import SESSION_S, Auth, Principal, Session


class Sessions:
    """The session records of one deployment's console."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client, self.namespace = client, namespace

    def open(self, principal: Principal) -> str:
        """Record a new session of `principal`; its id."""
        session_id = Auth.new_session_id()
        record = json.dumps({"name": principal.name, "role": principal.role,
                             "at": int(time.time())}, separators=(",", ":"))
        with redis_errors(self.client, "recording a console session"):
            self.client.set(keys.web_session(self.namespace, session_id), record,
                            ex=SESSION_S, nx=True)
        return session_id

    def alive(self, session: Session) -> bool:
        """Whether `session`'s record exists and names the same principal."""
        with redis_errors(self.client, "reading a console session"):
            raw = self.client.get(keys.web_session(self.namespace, session.id))
        if raw is None:
            return False
        try:
            record = json.loads(raw)
        except ValueError:
            return False
        return (isinstance(record, dict) and record.get("name") == session.principal.name
                and record.get("role") == session.principal.role)

    def close(self, session_id: str) -> None:
        """End a session (sign-out): its cookie is refused from now on, on every replica."""
        with redis_errors(self.client, "ending a console session"):
            self.client.delete(keys.web_session(self.namespace, session_id))
