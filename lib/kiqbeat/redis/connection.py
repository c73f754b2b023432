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

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.client import NEVER_DECODE
from redis.retry import Retry
from redis.sentinel import Sentinel

from kiqbeat.core.limits import MAX_SHOWN_CHARS
from kiqbeat.errors import (
    ConfigError,
    RedisRefusedError,
    RedisUnavailableError,
    StateError,
    shown,
)
from kiqbeat.redis.urls import TLS_FILES, parse_url

DEFAULT_TIMEOUT_S = 2.0
DEFAULT_RETRIES = 2
OLDEST_REDIS = (6, 2)
INFO_SECTIONS = ("server", "memory", "cluster")  # what `startup_warnings` reads
SAFE_EVICTION = {"noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"}
# No CLIENT SETINFO on connect: one round trip less, and no ACL permission needed for it.
# redis-py 8 spells this `driver_info=None`; older releases `lib_name=None, lib_version=None`.
try:
    import redis.driver_info
    _NO_SETINFO: dict[str, Any] = {"driver_info": None}
except ImportError:
    _NO_SETINFO = {"lib_name": None, "lib_version": None}
# redis-py 7+ sends CLIENT MAINT_NOTIFICATIONS on every new connection (a round trip of its
# own, refused by open-source Redis): off, so a new process's connection costs HELLO alone
# (a maintenance's dropped connection is retried as any other; test_cold_start.py counts).
try:
    from redis.maint_notifications import MaintNotificationsConfig
    _NO_SETINFO["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)
except ImportError:
    pass


def reply_reason(value: bytes | str) -> str:
    """A reply that is text for a person (a set-aside reason), not a name: bytes that are not
    UTF-8 (written by hand) shown as \\xHH, so it is always valid text (JSON, HTML, logs)."""
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


def reply_text(value: bytes | str) -> str:
    """A reply as text: redis-py gives bytes, or str when the client decodes replies.

    Bytes that are not UTF-8 (a name written by another language) never stop a read: each
    becomes a lone surrogate (`surrogateescape`), which `errors.shown` shows escaped and a
    client from `connect` sends back to Redis as the same byte."""
    return value.decode(errors="surrogateescape") if isinstance(value, bytes) else value


def name_bytes(name: str) -> bytes:
    """A name (or a queue, a job) as the bytes stored for it, `reply_text`'s inverse: one
    read from Redis that was not UTF-8 goes back as the same bytes (`surrogateescape`)."""
    return name.encode(errors="surrogateescape")


def reply_bytes(value: bytes | str | None) -> bytes | None:
    """A reply as bytes (None stays None), whether or not the client decodes replies: the
    bytes Redis holds, by `name_bytes`' rule, though they are not UTF-8."""
    return name_bytes(value) if isinstance(value, str) else value


def connect(
    url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, retries: int = DEFAULT_RETRIES,
    insecure_tls: bool = False,
) -> redis.Redis:
    """A client for a `redis://`, `rediss://` (TLS: verified, host name checked), `unix://`
    or `redis[s]+sentinel://` URL, read strictly by `urls.parse_url` (ConfigError)."""
    parsed = parse_url(url)
    tls: dict[str, Any] = parsed.tls_options(insecure_tls=insecure_tls)
    for setting in TLS_FILES:
        if setting in tls:
            check_tls_file(setting, str(tls[setting]))
    auth: dict[str, Any] = {"username": parsed.username, "password": parsed.password}
    common: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), retries),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
        # A name read from Redis that was not UTF-8 (`reply_text`) is written back as the
        # bytes it was read from: `kiqbeat schedules remove` reaches it.
        "encoding_errors": "surrogateescape",
    } | _NO_SETINFO
    if parsed.scheme == "unix":
        return redis.Redis(unix_socket_path=parsed.path, db=parsed.db, **auth, **common)
    if not parsed.service:
        (host, port), = parsed.hosts
        return redis.Redis(host=host, port=port, db=parsed.db, ssl=parsed.tls, **tls, **auth,
                           **common)
    # The Sentinel clients get nothing from `common` (sentinel_kwargs replaces it), so
    # without a retry of their own they take redis-py's default, 10 retries with backoff
    # per Sentinel: three refusing Sentinels made one command fail after 36 s. No retry
    # here: discovery already moves on to the next Sentinel, and the master pool's retry
    # asks them all again.
    sentinel_kwargs = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
                       "retry": Retry(NoBackoff(), 0)} | _NO_SETINFO
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(parsed.hosts), sentinel_kwargs=sentinel_kwargs, **common)
    master: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        parsed.service, db=parsed.db, ssl=parsed.tls, **tls, **auth)
    return master


_TLS_FILE_WHAT = {"ssl_ca_certs": "CA file", "ssl_certfile": "certificate file",
                  "ssl_keyfile": "key file"}


def check_tls_file(setting: str, path: str) -> None:
    """ConfigError, before any connection, when a TLS file a URL names cannot be read:
    otherwise redis-py reports it as a failure to connect ("Error 2 connecting to ...")."""
    what = (f"the {_TLS_FILE_WHAT.get(setting, 'file')} {shown(path, MAX_SHOWN_CHARS)} given "
            f"by {setting}")
    try:
        with open(path, "rb"):
            pass
    except FileNotFoundError:
        raise ConfigError(f"{what} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{what} cannot be read: {exc.strerror or exc}") from None


def startup_warnings(replies: list[Any]) -> list[str]:
    """Risks worth a warning, found once per client from the replies to an INFO of each of
    INFO_SECTIONS (pipelined with `raise_on_error=False`): old Redis, eviction, Cluster."""
    info: dict[str, Any] = {}
    for reply in replies:
        if isinstance(reply, redis.ResponseError):
            return [f"startup checks skipped: INFO refused ({reply}); grant +info to check "
                    "the Redis version and maxmemory-policy"]
        if isinstance(reply, Exception):
            raise reply
        info |= reply
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
    """Host, port and db (or socket, or Sentinel service) from the client: never its repr,
    which holds the password in some redis-py versions."""
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    if "host" in kwargs:
        return f"{kwargs.get('host')}:{kwargs.get('port')}/{kwargs.get('db', 0)}"
    if "path" in kwargs:
        return f"unix:{kwargs.get('path')}/{kwargs.get('db', 0)}"
    service = getattr(pool, "service_name", None)
    return f"Sentinel service {service}/{kwargs.get('db', 0)}" if service else "Redis"


def _clean(text: str, client: redis.Redis) -> str:
    """`text` with the client's password and user name masked, cut to 300 characters
    (redis-py's Sentinel errors carry the repr of every Sentinel client)."""
    kwargs = client.connection_pool.connection_kwargs
    for secret in (str(v) for k in ("password", "username") if (v := kwargs.get(k))):
        text = text.replace(secret, "***")
    return text if len(text) <= 300 else text[:297] + "..."


def _tagged(text: str, tag: str) -> str | None:
    """The detail of a script's refusal tagged `tag` ("TAG detail script: ..."); None when
    `text` holds no such tag."""
    if f"{tag} " not in text:
        return None
    return text.split(f"{tag} ", 1)[1].split(" script:", 1)[0]


@contextmanager
def redis_errors(client: redis.Redis, doing: str) -> Iterator[None]:
    """Turn redis-py's exceptions into kiqbeat's, naming what was being done and where."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        error = RedisUnavailableError(f"Redis at {_where(client)} unavailable while {doing}: "
                                      f"{_clean(str(exc), client)}")
        # The cause stays chained unless its text holds a secret.
        raise error from (None if _clean(str(exc), client) != str(exc) else exc)
    except redis.ResponseError as exc:
        text = str(exc)
        if (detail := _tagged(text, "KIQBEAT_NOPERM")) is not None:
            raise RedisRefusedError(f"Redis at {_where(client)} refused {doing}: {detail}; "
                                    "nothing was pushed by this call") from exc
        if (detail := _tagged(text, "KIQBEAT_FORMAT")) is not None:
            raise RedisRefusedError(
                f"Redis at {_where(client)} refused {doing}: {detail}. With the function "
                "library (KIQBEAT_REDIS_FUNCTIONS), load this version's: `kiqbeat functions "
                "--load`; nothing was written by this call") from exc
        if (detail := _tagged(text, "KIQBEAT_SHARDS")) is not None:
            raise ConfigError(f"{detail}; nothing was written") from None
        # A record that is not one: one field of a hash shared by many schedules.
        if (detail := _tagged(text, "KIQBEAT_GARBLED")) is not None:
            raise StateError(f"{detail}; nothing was pushed by this call (fix that schedule's "
                             "field, or delete it alone: HDEL the key and the schedule's name; "
                             "the key holds other schedules' records too)") from exc
        if (detail := _tagged(text, "KIQBEAT_WRONGTYPE")) is not None:
            raise StateError(f"{detail}; nothing was pushed by this call "
                             "(fix or delete the key)") from exc
        if "WRONGTYPE" in text:  # a pipeline's error names the command and so the key
            raise StateError(f"a key has the wrong type while {doing}: {text}; "
                             "nothing was pushed (fix or delete the key)") from exc
        raise RedisRefusedError(f"Redis at {_where(client)} refused {doing}: {text}") from exc


def hash_pages(client: redis.Redis, key: str, count: int) -> Iterator[dict[bytes, bytes]]:
    """A hash's fields and values, one HSCAN page per round trip, as bytes whatever the
    client decodes (a name another language wrote that is not UTF-8 stays readable)."""
    cursor = 0
    while True:
        with redis_errors(client, f"reading {key}"):
            cursor, page = client.execute_command(  # type: ignore[no-untyped-call]
                "HSCAN", key, cursor, "COUNT", count, **{NEVER_DECODE: True})
        assert isinstance(page, dict)
        yield page
        if not int(cursor):
            return
