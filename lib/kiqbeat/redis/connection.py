"""Redis clients with explicit, small timeouts and retries, and the startup checks.

redis-py's defaults retry a command many times per reconnect; against a black-holed
server one LPUSH blocked for 155 s (RECIPES.md). kiqbeat runs once a minute, so it gives
up fast and lets the next invocation catch up: 2 s socket timeouts, 2 retries.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from kiqbeat.errors import ConfigError, RedisRefusedError, RedisUnavailableError, StateError

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
    """The URL with any password replaced by ***, safe for logs and error messages.

    Everything between `//` and the last `@` before the query is credentials, whatever
    characters the password holds; a `password=` query parameter is masked too.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    base, qmark, query = rest.partition("?")
    if "@" in base:
        userinfo, host = base.rsplit("@", 1)
        user, colon, _ = userinfo.partition(":")
        base = f"{user}:***@{host}" if colon else f"***@{host}"
    query = re.sub(r"(^|&)(password=)[^&]*", r"\1\2***", query)
    return f"{scheme}://{base}{qmark}{query}"


_TLS_PARAMS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")


def _tls_options(query: dict[str, list[str]]) -> dict[str, Any]:
    return {name: query[name][-1] for name in _TLS_PARAMS if name in query}


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
        # redis-py reads db, username, password... from the query; the TLS files go as
        # arguments (its URL parser would pass them as strings it does not expect).
        rest = urlencode([(k, v) for k, vs in query.items() if k not in _TLS_PARAMS for v in vs])
        base = url.split("?", 1)[0] + (f"?{rest}" if rest else "")
        try:
            return redis.Redis.from_url(base, **common, **_tls_options(query))
        except ValueError:
            # redis-py's message can quote the password (e.g. as a port): not shown.
            raise ConfigError(f"invalid Redis URL {scrub(url)!r}: expected "
                              "redis[s]://[user:password@]host[:port][/db], with special "
                              "characters in the password percent-encoded") from None
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
        # The Sentinel clients get nothing from `common` (sentinel_kwargs replaces it), so
        # without a retry of their own they take redis-py's default, 10 retries with backoff
        # per Sentinel: three refusing Sentinels made one command fail after 36 s. No retry
        # here: discovery already moves on to the next Sentinel, and the master pool's retry
        # asks them all again.
        sentinel_kwargs = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
                           "retry": Retry(NoBackoff(), 0)} | _NO_SETINFO
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            hosts, sentinel_kwargs=sentinel_kwargs, **common)
        master: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
            path[0], db=db, **auth, **tls)
        return master
    raise ConfigError(f"unsupported Redis URL scheme {parts.scheme!r} in {scrub(url)!r}; "
                      "use redis://, rediss:// or redis+sentinel://")


def startup_warnings(client: redis.Redis) -> list[str]:
    """Risks worth a warning, found once per client (one round trip): old Redis, eviction,
    Cluster."""
    try:
        pipe = client.pipeline(transaction=False)
        for section in ("server", "memory", "cluster"):
            pipe.info(section)
        info: dict[str, Any] = {}
        for reply in pipe.execute():
            info |= reply
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


def _where(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    if "host" in kwargs:
        return f"{kwargs.get('host')}:{kwargs.get('port')}/{kwargs.get('db', 0)}"
    return scrub(repr(client.connection_pool))


@contextmanager
def redis_errors(client: redis.Redis, doing: str) -> Iterator[None]:
    """Turn redis-py's exceptions into kiqbeat's, naming what was being done and where."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailableError(f"Redis at {_where(client)} unavailable while {doing}: "
                                    f"{scrub(str(exc))}") from exc
    except redis.ResponseError as exc:
        text = str(exc)
        if "KIQBEAT_NOPERM " in text:
            detail = text.split("KIQBEAT_NOPERM ", 1)[1].split(" script:", 1)[0]
            raise RedisRefusedError(f"Redis at {_where(client)} refused {doing}: {detail}; "
                                    "nothing was pushed by this call") from exc
        for tag in ("KIQBEAT_GARBLED ", "KIQBEAT_WRONGTYPE "):
            if tag in text:
                detail = text.split(tag, 1)[1].split(" script:", 1)[0]
                raise StateError(f"{detail}; nothing was pushed by this call "
                                 "(fix or delete the key)") from exc
        if "WRONGTYPE" in text:  # a pipeline's error names the command and so the key
            raise StateError(f"a key has the wrong type while {doing}: {text}; "
                             "nothing was pushed (fix or delete the key)") from exc
        raise RedisRefusedError(f"Redis at {_where(client)} refused {doing}: {text}") from exc
