"""Redis URLs, read strictly: what to connect to, and how to name it without its secrets.

A URL holds the Redis password, so every message names Redis by what `RedisUrl.where`
gives — host, port and db, a socket path, or the Sentinel hosts and service — never by the
URL's text. A URL that does not read cleanly is refused as a whole, shown only as
`<unparsable Redis URL>`, before any connection or DNS lookup: a password with an
unencoded `@`, `/`, `?` or `#` would otherwise be split at it, and part of it sent to a
resolver as a host name (`redis://kb:SE@CR/ET@host` looked up `CR`).

TLS (`rediss://`): certificates are verified and the host name checked, always, unless the
caller allows the URL's own opt-outs (`ssl_cert_reqs=none|optional`,
`ssl_check_hostname=false`) with `insecure_tls` — a deliberate setting, warned about on every
invocation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote

from kiqbeat.errors import ConfigError

UNPARSABLE = "<unparsable Redis URL>"
SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel")
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*)://", re.IGNORECASE)
_HOSTPORT = re.compile(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+)(?::([0-9]{1,5}))?")
TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
# Query settings passed through; anything else is refused (a typo must not be ignored).
_SETTINGS = (*TLS_FILES, "ssl_cert_reqs", "ssl_check_hostname", "db", "username", "password")
_FORMAT = ("expected redis[s]://[user:password@]host[:port][/db], unix://[user:password@]"
           "/path.sock[?db=N] or redis[s]+sentinel://[user:password@]host:port[,...]/service"
           "[/db], with any @ / ? # : in the user or password percent-encoded")


@dataclass(frozen=True)
class RedisUrl:
    """A Redis URL, parsed; `where` names it without secrets."""

    scheme: str
    hosts: tuple[tuple[str, int], ...] = ()  # one for redis[s]://, several for Sentinel
    path: str = ""  # unix socket
    service: str = ""  # Sentinel service name
    db: int = 0
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    # The query's settings but the user and password, each at its last value.
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def tls(self) -> bool:
        """True for rediss:// and rediss+sentinel://."""
        return self.scheme.startswith("rediss")

    @property
    def where(self) -> str:
        """Host, port and db (or the socket, or the Sentinels and service): no secrets."""
        if self.scheme == "unix":
            return f"unix:{self.path}/{self.db}"
        hosts = ",".join(f"{h}:{p}" for h, p in self.hosts)
        if self.service:
            return f"sentinel {hosts}/{self.service}/{self.db}"
        return f"{hosts}/{self.db}"

    def tls_options(self, *, insecure_tls: bool) -> dict[str, object]:
        """redis-py's TLS arguments: verified, host name checked, unless allowed otherwise."""
        if not self.tls:
            if any(k in self.settings for k in (*TLS_FILES, "ssl_cert_reqs",
                                                "ssl_check_hostname")):
                raise ConfigError(f"Redis URL for {self.where}: TLS settings on a plain "
                                  "redis:// URL; use rediss://")
            return {}
        reqs, check = self._verification()
        if reqs not in ("required", "optional", "none") or check not in ("true", "false"):
            raise ConfigError(f"Redis URL for {self.where}: ssl_cert_reqs must be required "
                              "(or none/optional) and ssl_check_hostname true (or false)")
        if self.insecure and not insecure_tls:
            raise ConfigError(
                f"Redis URL for {self.where} turns TLS verification off (ssl_cert_reqs="
                f"{reqs}, ssl_check_hostname={check}); anyone on the path could read the "
                "password and push jobs. Remove those settings, or set "
                "KIQBEAT_REDIS_INSECURE_TLS=true (--redis-insecure-tls true) to accept it")
        options: dict[str, object] = {
            "ssl_cert_reqs": reqs, "ssl_check_hostname": check == "true" and reqs != "none"}
        options |= {name: self.settings[name] for name in TLS_FILES if self.settings.get(name)}
        return options

    @property
    def insecure(self) -> bool:
        """True when the URL turns TLS verification off (only with `insecure_tls`)."""
        return self.tls and self._verification() != ("required", "true")

    def _verification(self) -> tuple[str, str]:
        """The URL's ssl_cert_reqs and ssl_check_hostname, lower case, defaults filled in."""
        return ((self.settings.get("ssl_cert_reqs") or "required").lower(),
                (self.settings.get("ssl_check_hostname") or "true").lower())


def parse_url(url: str) -> RedisUrl:
    """The parsed URL; ConfigError naming only `<unparsable Redis URL>` when it is not one."""
    try:
        return _parse(url)
    except (ValueError, IndexError) as exc:
        # Never the URL's text, nor redis-py's or urllib's message, which can quote it.
        raise ConfigError(f"{UNPARSABLE}: {exc if isinstance(exc, ConfigError) else _FORMAT}"
                          ) from None


def describe(url: str) -> str:
    """Where a URL points, without secrets, or `<unparsable Redis URL>`."""
    try:
        return _parse(url).where
    except (ValueError, IndexError):
        return UNPARSABLE


def _parse(url: str) -> RedisUrl:
    match = _SCHEME.match(url)
    scheme = match.group(1).lower() if match else ""
    if not match or scheme not in SCHEMES:
        raise ConfigError(f"the URL must start with {', '.join(s + '://' for s in SCHEMES)}")
    rest = url[match.end():]
    # The authority ends at the first / ? #: an @ after that is a password's, unencoded.
    end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0),
              default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in tail or authority.count("@") > 1 or "#" in tail:
        raise ConfigError(_FORMAT)
    userinfo, at, hostpart = authority.rpartition("@")
    username = password = None
    if at:  # as redis-py reads it: user[:password]
        user, colon, secret = userinfo.partition(":")
        username, password = (unquote(user) or None), (unquote(secret) if colon else None)
    path, _, query_text = tail.partition("?")
    query = tuple(parse_qsl(query_text, keep_blank_values=True, strict_parsing=bool(query_text)))
    if any(k not in _SETTINGS for k, _ in query):
        # Not named: with an unencoded & or = in a password, a "setting" is part of it.
        raise ConfigError(f"the URL has a query setting kiqbeat does not take; it takes "
                          f"{', '.join(_SETTINGS)} (others of redis-py's are not passed on)")
    settings = dict(query)  # the last value of each
    username = settings.pop("username", None) or username
    password = settings.pop("password", None) or password
    db_text = settings.get("db")
    query_db = _db(db_text) if db_text is not None else 0  # checked whatever the scheme
    if scheme == "unix":
        if hostpart or not path.startswith("/"):
            raise ConfigError(_FORMAT)
        return RedisUrl(scheme, path=path, db=query_db, username=username,
                        password=password, settings=settings)
    hosts = tuple(_hostport(h, scheme) for h in hostpart.split(","))
    segments = [p for p in path.split("/") if p]
    if scheme.endswith("sentinel"):
        if not segments or len(segments) > 2:
            raise ConfigError("a Sentinel URL names its service: "
                              "redis+sentinel://host:port[,host:port...]/SERVICE[/DB]")
        db = _db(segments[1]) if len(segments) == 2 else query_db
        return RedisUrl(scheme, hosts=hosts, service=segments[0], db=db, username=username,
                        password=password, settings=settings)
    if len(hosts) != 1 or len(segments) > 1:
        raise ConfigError(_FORMAT)
    db = _db(segments[0]) if segments else query_db
    return RedisUrl(scheme, hosts=hosts, db=db, username=username, password=password,
                    settings=settings)


def _hostport(text: str, scheme: str) -> tuple[str, int]:
    match = _HOSTPORT.fullmatch(text)
    if not match:
        raise ConfigError(_FORMAT)
    port = int(match.group(2) or (26379 if scheme.endswith("sentinel") else 6379))
    if not 0 < port < 65536:
        raise ConfigError(_FORMAT)
    return match.group(1).strip("[]"), port


def _db(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) > 1_000_000:
        raise ConfigError("the database must be a whole number, e.g. /0")
    return int(text)
