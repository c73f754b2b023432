"""Who may use the console, and how a browser proves it (docs/security.md, "The console").

- **Tokens.** `KIQBEAT_WEB_TOKEN` holds operators' tokens (read and act),
  `KIQBEAT_WEB_READ_TOKEN` readers' (read only); each may instead name a secret file
  (`KIQBEAT_WEB_TOKEN_FILE`, `KIQBEAT_WEB_READ_TOKEN_FILE`), as a Kubernetes Secret mounts
  them. A value holds one token per line, `TOKEN` or `NAME:TOKEN`; the name is what the
  audit trail records (default "operator" or "reader"). A token has at least
  `MIN_TOKEN_CHARS` characters and an estimated `MIN_TOKEN_BITS` bits (`token_bits`): a
  repeated or short-alphabet token is refused at start. A presented token is compared with
  every configured one in constant time (hmac.compare_digest), none skipped.
- **The API** takes `Authorization: Bearer TOKEN` on every request.
- **A browser** signs in at /login (a form field named `token`) and gets a session cookie:
  HttpOnly, SameSite=Strict, Secure over HTTPS, valid `SESSION_S`, holding a session id,
  the token's name and role (never the token), signed with the *session key*. The session
  also lives in Redis (sessions.py): sign-out deletes it, and a cookie whose record is gone
  is refused. Both keys are derived from the configured tokens (so every replica accepts a
  cookie, and changing the tokens ends every session), each with its own label, and every
  signed payload starts with its type: a CSRF field can never verify as a session.
- **CSRF.** Every form carries a field, the HMAC under the *CSRF key* of a per-browser nonce
  cookie (HttpOnly, SameSite=Strict; exactly `NONCE_CHARS` characters of the URL-safe
  base64 alphabet, any other value replaced), rotated at sign-in and sign-out; a form
  posted without both, or with an Origin header of another site, is refused. The login
  form too.
- **No tokens** (`anonymous`): only for a console listening on loopback (the command
  refuses any other address); every request is an operator's, recorded as the process's
  user@host, and a request whose Host header is not a loopback name is refused (DNS
  rebinding).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import math
import re
import secrets
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kiqbeat.audit import default_actor
from kiqbeat.errors import ConfigError

MIN_TOKEN_CHARS = 20
# A token's estimated entropy (`token_bits`) must reach this: secrets.token_urlsafe(16)
# (22 characters) gives 91 bits on average and 74 at the least in 100,000 draws;
# token_hex(16) 115 (91 at least); "password12345678" 62, "op-" + "7" * 29 19.
MIN_TOKEN_BITS = 72
SESSION_S = 12 * 3600
SESSION_COOKIE = "kiqbeat_session"
NONCE_COOKIE = "kiqbeat_csrf"
NONCE_CHARS = 32  # secrets.token_urlsafe(24)
_NONCE = re.compile(rf"[A-Za-z0-9_-]{{{NONCE_CHARS}}}")
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{24}")
ROLES = ("operator", "reader")
# What each signed payload starts with: a value signed as one type never verifies as another.
_SESSION_TYPE, _CSRF_TYPE = b"kiqbeat-session-v2\0", b"kiqbeat-csrf-v2\0"
VARIABLES = {"operator": ("KIQBEAT_WEB_TOKEN", "KIQBEAT_WEB_TOKEN_FILE"),
             "reader": ("KIQBEAT_WEB_READ_TOKEN", "KIQBEAT_WEB_READ_TOKEN_FILE")}


@dataclass(frozen=True)
class Principal:
    """Who is asking: a token's name and role (operator or reader)."""

    name: str
    role: str

    @property
    def operator(self) -> bool:
        """May act, not only read."""
        return self.role == "operator"

    @property
    def actor(self) -> str:
        """What the audit trail records."""
        return f"web:{self.name}"


@dataclass(frozen=True)
class Token:
    """A configured token (its secret never reaches a repr, a page or a log)."""

    name: str
    role: str
    secret: str

    def __repr__(self) -> str:
        return f"Token({self.name!r}, {self.role!r})"


def token_bits(secret: str) -> float:
    """A token's estimated entropy in bits: its length times the Shannon entropy of its own
    characters' frequencies. Random tokens score near length x log2(alphabet); a repeated
    character, a short alphabet or a short token scores low. (No estimate sees that a long
    token is a phrase: generate tokens, never choose them.)"""
    n = len(secret)
    return max(0.0, -sum(c * math.log2(c / n) for c in Counter(secret).values()))


def token_problem(secret: str) -> str | None:
    """Why `secret` cannot be a console token (None: it can)."""
    if len(secret) < MIN_TOKEN_CHARS or not secret.isprintable() or " " in secret:
        return (f"a token must be at least {MIN_TOKEN_CHARS} printable characters without "
                "spaces")
    if token_bits(secret) < MIN_TOKEN_BITS:
        return (f"a token must be random: this one has an estimated {token_bits(secret):.0f} "
                f"bits, under {MIN_TOKEN_BITS} (repeated characters or a short alphabet)")
    return None


_GENERATE = "(e.g. from `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`)"


def _tokens(text: str, role: str, where: str) -> list[Token]:
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        name, _, secret = line.rpartition(":") if ":" in line else ("", "", line)
        name = name.strip() or role
        if why := token_problem(secret):
            raise ConfigError(f"{where}, line {number}: {why} {_GENERATE}")
        out.append(Token(name[:100], role, secret))
    return out


@dataclass(frozen=True)
class Session:
    """A verified session cookie: its id (the key of its record in Redis) and principal."""

    id: str
    principal: Principal


class Auth:
    """The configured tokens, sessions and CSRF fields."""

    def __init__(self, tokens: list[Token], *, anonymous: bool = False) -> None:
        if not tokens and not anonymous:
            raise ConfigError("the console needs tokens (KIQBEAT_WEB_TOKEN, "
                              "KIQBEAT_WEB_READ_TOKEN) unless it runs anonymous on loopback")
        for token in tokens:
            if token.role not in ROLES:
                raise ConfigError(f"token {token.name!r}: role {token.role!r} is not one of "
                                  f"{', '.join(ROLES)}")
            if why := token_problem(token.secret):
                raise ConfigError(f"token {token.name!r}: {why} {_GENERATE}")
        self.tokens, self.anonymous = tuple(tokens), anonymous and not tokens
        seed = b"\0".join(t.secret.encode() for t in tokens) if tokens else secrets.token_bytes(
            32)
        # Two keys, each for one use: a session cookie and a CSRF field are never signed
        # with the same key (and each payload starts with its type besides).
        self._session_key = hashlib.sha256(b"kiqbeat-web-session-key\0" + seed).digest()
        self._csrf_key = hashlib.sha256(b"kiqbeat-web-csrf-key\0" + seed).digest()
        self._anonymous = Principal(default_actor(), "operator")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], *, anonymous: bool = False) -> Auth:
        """Tokens from the variables (or the files they name)."""
        tokens: list[Token] = []
        for role, (variable, file_variable) in VARIABLES.items():
            if value := environ.get(variable, ""):
                tokens += _tokens(value, role, variable)
            if path := environ.get(file_variable, ""):
                try:
                    text = Path(path).read_text()
                except OSError as exc:
                    raise ConfigError(f"{file_variable}: cannot read {path!r}: "
                                      f"{exc.strerror}") from None
                tokens += _tokens(text, role, f"{file_variable} ({path})")
        return cls(tokens, anonymous=anonymous)

    # ------------------------------------------------------------------------ tokens

    def match(self, presented: str) -> Principal | None:
        """The principal of a presented token, compared with every token in constant time."""
        found: Token | None = None
        given = presented.encode()
        for token in self.tokens:
            if hmac.compare_digest(given, token.secret.encode()) and found is None:
                found = token
        return Principal(found.name, found.role) if found else None

    def bearer(self, header: str) -> Principal | None:
        """The principal of an `Authorization` header, or the anonymous operator."""
        if self.anonymous:
            return self._anonymous
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            return None
        return self.match(value.strip())

    # ------------------------------------------------------------------------ sessions

    def _sign(self, payload: bytes) -> str:
        body = _SESSION_TYPE + payload
        mac = hmac.new(self._session_key, body, hashlib.sha256).digest()
        return (base64.urlsafe_b64encode(payload).decode().rstrip("=") + "."
                + base64.urlsafe_b64encode(mac).decode().rstrip("="))

    def _verify(self, value: str) -> bytes | None:
        body, _, mac = value.partition(".")
        try:
            payload = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            given = base64.urlsafe_b64decode(mac + "=" * (-len(mac) % 4))
        except ValueError:
            return None
        expected = hmac.new(self._session_key, _SESSION_TYPE + payload,
                            hashlib.sha256).digest()
        return payload if hmac.compare_digest(given, expected) else None

    def session(self, principal: Principal, session_id: str, now_s: float | None = None
                ) -> str:
        """A session cookie's value for `principal`, session `session_id` (its record's
        key: `new_session_id`)."""
        if principal.role not in ROLES or not _SESSION_ID.fullmatch(session_id):
            raise ValueError("not a session of this console")
        expires = int((time.time() if now_s is None else now_s) + SESSION_S)
        return self._sign(f"{session_id}\n{principal.role}\n{expires}\n"
                          f"{principal.name}".encode())

    @staticmethod
    def new_session_id() -> str:
        """A fresh session id (144 random bits)."""
        return secrets.token_urlsafe(18)

    def verify_session(self, value: str, now_s: float | None = None) -> Session | None:
        """The session a cookie holds; None when the cookie is missing, forged, expired or
        not of a known role. (Whether its record still exists is sessions.py's to say.)"""
        payload = self._verify(value) if value else None
        if payload is None:
            return None
        parts = payload.decode(errors="replace").split("\n", 3)
        if len(parts) != 4:
            return None
        session_id, role, expires, name = parts
        if (role not in ROLES or not _SESSION_ID.fullmatch(session_id)
                or not expires.isascii() or not expires.isdigit() or len(expires) > 12):
            return None
        if int(expires) < (time.time() if now_s is None else now_s):
            return None
        return Session(session_id, Principal(name, role))

    # ------------------------------------------------------------------------ CSRF

    @staticmethod
    def new_nonce() -> str:
        """A browser's CSRF nonce (its cookie): NONCE_CHARS URL-safe characters."""
        return secrets.token_urlsafe(24)

    @staticmethod
    def nonce_ok(nonce: str) -> bool:
        """Whether a nonce cookie is one this console could have made (else replaced)."""
        return bool(_NONCE.fullmatch(nonce))

    def csrf_field(self, nonce: str) -> str:
        """The hidden field every form of a browser with `nonce` carries."""
        return hmac.new(self._csrf_key, _CSRF_TYPE + nonce.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, nonce: str, field: str) -> bool:
        """Whether a posted form's field belongs to the browser's nonce cookie."""
        return self.nonce_ok(nonce) and hmac.compare_digest(
            field.encode(errors="surrogateescape"), self.csrf_field(nonce).encode())


def is_loopback(host: str) -> bool:
    """Whether an address (a listen address, or a Host header's host) names this machine
    only: `localhost`, or any loopback IP (127.0.0.0/8, ::1), bracketed or not. A name
    that may resolve anywhere is not."""
    host = host.strip().lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def is_loopback_host(host_header: str) -> bool:
    """Whether a Host header names this machine by a loopback address (port ignored): the
    same test `kiqbeat web` applies to its listen address (`is_loopback`)."""
    host = host_header.strip()
    if host.startswith("["):
        host = host[:host.find("]") + 1]
    elif host.count(":") == 1:
        host = host.split(":")[0]
    return is_loopback(host)
