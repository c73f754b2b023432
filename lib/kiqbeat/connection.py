"""Redis clients with explicit, small timeouts and retries, and the startup checks.

redis-py's defaults retry a command many times per reconnect; against a black-holed
server one LPUSH blocked for 155 s (RECIPES.md). kiqbeat runs once a minute, so it gives
up fast and lets the next invocation catch up: 2 s socket timeouts, 2 retries.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from kiqbeat.errors import ConfigError

DEFAULT_TIMEOUT_S = 2.0
DEFAULT_RETRIES = 2
OLDEST_REDIS = (6, 2)
SAFE_EVICTION = {"noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"}
# No CLIENT SETINFO on connect: one round trip less, and no ACL permission needed for it.
# redis-py 8 spells this `driver_info=None`; older releases `lib_name=None, lib_version=None`.
try:
    import redis.driver_info
    _NO_SETINFO: dict[str, Any] = {"driver_info": None}
except ImportError:
    _NO_SETINFO = {"lib_name": None, "lib_version": None}


def scrub(url: str) -> str:
    """The URL with any password replaced by ***, safe for logs and error messages."""
    return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)


def _tls_options(query: dict[str, list[str]]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs"):
        if name in query:
            options[name] = query[name][-1]
    return options


def connect(
    url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, retries: int = DEFAULT_RETRIES
) -> redis.Redis:
    """A client for `redis://`, `rediss://` (TLS, verified) or `redis+sentinel://` URLs.

    Sentinel form: `redis+sentinel://[user:password@]host:port[,host:port...]/service[/db]`
    (`rediss+sentinel://` for TLS to the master). TLS files go in the query string:
    `?ssl_ca_certs=/path/ca.pem`.
    """
    common: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), retries),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
    } | _NO_SETINFO
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if parts.scheme in ("redis", "rediss", "unix"):
        try:
            base = url.split("?", 1)[0]
            return redis.Redis.from_url(base, **common, **_tls_options(query))
        except ValueError as exc:
            raise ConfigError(f"invalid Redis URL {scrub(url)!r}: {exc}") from exc
    if parts.scheme in ("redis+sentinel", "rediss+sentinel"):
        path = [p for p in parts.path.split("/") if p]
        if not path:
            raise ConfigError(f"Redis Sentinel URL {scrub(url)!r} lacks the service name: "
                              "redis+sentinel://host:port/SERVICE[/DB]")
        hosts = []
        for hostport in parts.netloc.rsplit("@", 1)[-1].split(","):
            host, _, port = hostport.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"Redis Sentinel URL {scrub(url)!r}: expected host:port, "
                                  f"got {hostport!r}")
            hosts.append((host, int(port)))
        auth = {"username": unquote(parts.username) if parts.username else None,
                "password": unquote(parts.password) if parts.password else None}
        db = int(path[1]) if len(path) > 1 and path[1].isdigit() else 0
        tls = _tls_options(query)
        if parts.scheme.startswith("rediss"):
            tls["ssl"] = True
        sentinel_kwargs = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            hosts, sentinel_kwargs=sentinel_kwargs, **common)
        master: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
            path[0], db=db, **auth, **tls)
        return master
    raise ConfigError(f"unsupported Redis URL scheme {parts.scheme!r} in {scrub(url)!r}; "
                      "use redis://, rediss:// or redis+sentinel://")


def startup_warnings(client: redis.Redis) -> list[str]:
    """Risks worth a warning, found once per client: old Redis, eviction, Cluster."""
    try:
        info = client.info("server") | client.info("memory") | client.info("cluster")
    except redis.ResponseError as exc:
        return [f"startup checks skipped: INFO refused ({exc}); grant +info to check "
                "the Redis version and maxmemory-policy"]
    warnings = []
    version = str(info.get("redis_version", "0"))
    parsed = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    if parsed < OLDEST_REDIS:
        warnings.append(f"Redis {version} is older than 6.2, which kiqbeat is tested against")
    policy = str(info.get("maxmemory_policy", "noeviction"))
    if policy not in SAFE_EVICTION:
        warnings.append(f"maxmemory-policy is {policy!r}: Redis may evict kiqbeat's watermarks "
                        "(ticks pushed again) and queued jobs; use 'noeviction' as Sidekiq advises")
    if info.get("cluster_enabled"):
        warnings.append("Redis Cluster is not supported (nor is it by Sidekiq): "
                        "kiqbeat's push script touches keys in several slots")
    return warnings
