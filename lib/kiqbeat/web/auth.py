"""Who may use the console, and how a browser proves it (docs/security.md, "The console").

- **Tokens.** `KIQBEAT_WEB_TOKEN` holds operators' tokens (read and act),
  `KIQBEAT_WEB_READ_TOKEN` readers' (read only); each may instead name a secret file
  (`KIQBEAT_WEB_TOKEN_FILE`, `KIQBEAT_WEB_READ_TOKEN_FILE`), as a Kubernetes Secret mounts
  them. A value holds one token per line, `TOKEN` or `NAME:TOKEN`; the name is what the
  audit trail records (default "operator" or "reader"). A token has at least
  `MIN_TOKEN_CHARS` characters. A presented token is compared with every configured one in
  constant time (hmac.compare_digest), none skipped.
- **The API** takes `Authorization: Bearer TOKEN` on every request.
- **A browser** signs in at /login (a form field named `token`) and gets a session cookie:
  HttpOnly, SameSite=Strict, Secure over HTTPS, signed with a key derived from the
  configured tokens (so every replica accepts it, and changing the tokens ends every
  session), valid `SESSION_S`. It holds the token's name and role, never the token.
- **CSRF.** Every form carries a field derived from a per-browser nonce cookie (HttpOnly,
  SameSite=Strict); a form posted without both, or with an Origin header of another site,
  is refused. The login form too.
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
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kiqbeat.audit import default_actor
from kiqbeat.errors import ConfigError

MIN_TOKEN_CHARS = 16
SESSION_S = 12 * 3600
SESSION_COOKIE = "kiqbeat_session"
NONCE_COOKIE = "kiqbeat_csrf"
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


def _tokens(text: str, role: str, where: str) -> list[Token]:
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        name, _, secret = line.rpartition(":") if ":" in line else ("", "", line)
        name = name.strip() or role
        if len(secret) < MIN_TOKEN_CHARS or not secret.isprintable() or " " in secret:
            raise ConfigError(f"{where}, line {number}: a token must be at least "
                              f"{MIN_TOKEN_CHARS} printable characters without spaces "
                              "(e.g. from `python3 -c 'import secrets; "
                              "print(secrets.token_urlsafe(32))'`)")
        out.append(Token(name[:100], role, secret))
    return out


class Auth:
    """The configured tokens, sessions and CSRF fields."""

    def __init__(self, tokens: list[Token], *, anonymous: bool = False) -> None:
        if not tokens and not anonymous:
            raise ConfigError("the console needs tokens (KIQBEAT_WEB_TOKEN, "
                              "KIQBEAT_WEB_READ_TOKEN) unless it runs anonymous on loopback")
        self.tokens, self.anonymous = tuple(tokens), anonymous and not tokens
        seed = b"\0".join(t.secret.encode() for t in tokens) if tokens else secrets.token_bytes(
            32)
        self._key = hashlib.sha256(b"kiqbeat-web-session\0" + seed).digest()
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
        mac = hmac.new(self._key, payload, hashlib.sha256).digest()
        return (base64.urlsafe_b64encode(payload).decode().rstrip("=") + "."
                + base64.urlsafe_b64encode(mac).decode().rstrip("="))

    def _verify(self, value: str) -> bytes | None:
        body, _, mac = value.partition(".")
        try:
            payload = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            given = base64.urlsafe_b64decode(mac + "=" * (-len(mac) % 4))
        except ValueError:
            return None
        expected = hmac.new(self._key, payload, hashlib.sha256).digest()
        return payload if hmac.compare_digest(given, expected) else None

    def session(self, principal: Principal, now_s: float | None = None) -> str:
        """A session cookie's value for `principal`."""
        expires = int((time.time() if now_s is None else now_s) + SESSION_S)
        return self._sign(f"{principal.role}\n{expires}\n{principal.name}".encode())

    def from_session(self, value: str, now_s: float | None = None) -> Principal | None:
        """The principal of a session cookie, or the anonymous operator; None when the
        cookie is missing, forged or expired."""
        if self.anonymous:
            return self._anonymous
        payload = self._verify(value) if value else None
        if payload is None:
            return None
        role, expires, name = payload.decode(errors="replace").split("\n", 2)
        if int(expires) < (time.time() if now_s is None else now_s):
            return None
        return Principal(name, role)

    # ------------------------------------------------------------------------ CSRF

    @staticmethod
    def new_nonce() -> str:
        """A browser's CSRF nonce (its cookie)."""
        return secrets.token_urlsafe(24)

    def csrf_field(self, nonce: str) -> str:
        """The hidden field every form of a browser with `nonce` carries."""
        return hmac.new(self._key, b"csrf\0" + nonce.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, nonce: str, field: str) -> bool:
        """Whether a posted form's field belongs to the browser's nonce cookie."""
        return bool(nonce) and hmac.compare_digest(field.encode(),
                                                   self.csrf_field(nonce).encode())


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
