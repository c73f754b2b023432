"""One deployment's context: its settings, Redis client, document sources and config.

What every invocation and every command of a deployment stands on, kept from one to the
next: the Redis client, built from the settings' URL (rebuilt when the URL changes, as
after a secret rotation) and the startup checks done on it (once per client); the config
with the settings' overrides applied (the same object while the document is unchanged);
the warnings already reported (a config or startup warning is reported once per
deployment, an invocation's own every time); the document sources and their caches.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import redis

from kiqbeat.alerts.step import AlertStep
from kiqbeat.core.schedule import Config
from kiqbeat.document.sources import Sources
from kiqbeat.errors import ConfigError
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import (
    INFO_SECTIONS,
    connect,
    redis_errors,
    reply_text,
    startup_warnings,
)
from kiqbeat.redis.migrate import migrate_layout, old_layout
from kiqbeat.redis.side import RedisSide
from kiqbeat.redis.urls import describe, parse_url
from kiqbeat.settings import Settings

if TYPE_CHECKING:  # loaded by the commands and invocations that use them
    from kiqbeat.alerts.sinks import Sink
    from kiqbeat.store import Store

NO_DOCUMENT = Config(schedules=())


class Deployment:
    """The settings, the client (given, or built from the URL), the sources and the config
    of one deployment."""

    def __init__(self, settings: Settings, *, client: redis.Redis | None = None,
                 sources: Sources | None = None) -> None:
        self.settings = settings
        self.sources = sources or Sources(settings.max_age_s)
        self.lua = scripts.Caller(functions=settings.redis_functions)
        # Expectations and alerts after the pushes (alerts/step.py), to the settings' sinks.
        self.alerts = AlertStep(_sinks(settings))
        self._given_client = client
        self._client: redis.Redis | None = None  # built from the URL, when none was given
        self._url = ""
        self._unverified_tls = False  # the URL turns TLS verification off (allowed)
        self._checked_client: redis.Redis | None = None  # startup checks done on it
        self._overridden: tuple[Config, Config] | None = None  # loaded -> with the overrides
        self._reported: set[str] = set()

    @property
    def shards(self) -> int:
        """How many shards the store is split into (1: not split)."""
        return self.settings.shard[1] if self.settings.shard else 1

    @property
    def client(self) -> redis.Redis:
        """The Redis client: the one given, or one built from the settings' current URL."""
        if self._given_client is not None:
            return self._given_client
        url = self.sources.redis_url(self.settings.redis_environ())
        if self._client is None or url != self._url:
            self.close()
            insecure = self.settings.redis_insecure_tls
            self._client, self._url = connect(url, insecure_tls=insecure), url
            self._unverified_tls = parse_url(url).insecure
        return self._client

    def redis_where(self) -> str:
        """Where Redis is, without any secret, for log lines ("" before the first connect)."""
        return describe(self._url) if self._url else ""

    def config(self) -> Config:
        """The settings' document with the window and namespace overrides applied; without
        a document, the store's settings alone (a deployment whose schedules are all written
        at runtime)."""
        source = self.settings.config_source
        loaded = self.sources.load_config(source) if source else NO_DOCUMENT
        if self._overridden is not None and self._overridden[0] is loaded:
            return self._overridden[1]  # the same object each time: its document is cached
        config = loaded
        if self.settings.window_s is not None:
            from kiqbeat.document.validate import with_window

            config = with_window(config, self.settings.window_s,
                                 what="KIQBEAT_MISSED_JOBS_WINDOW / --missed-jobs-window")
        namespace = self.settings.namespace
        if namespace is not None and namespace != config.namespace:
            if source and config.namespace:
                raise ConfigError(f"KIQBEAT_NAMESPACE / --namespace {namespace!r} differs from "
                                  f"the document's namespace {config.namespace!r}",
                                  source=source)
            config = replace(config, namespace=namespace)
        self._overridden = (loaded, config)
        return config

    def loaded(self, config: Config) -> Config | None:
        """The config as loaded from the settings' document, when `config` is what
        `config()` made of it (None otherwise)."""
        overridden = self._overridden
        return overridden[0] if overridden is not None and overridden[1] is config else None

    def side(self, config: Config) -> RedisSide:
        """The store invocations of `config` run on (the client, the config's namespace,
        the settings' shard count and way of running scripts)."""
        return RedisSide(self.client, config.namespace, self.shards, self.lua)

    def store(self, config: Config | None = None) -> Store:
        """The schedule store API on this client, with the namespace, window and shard count
        of the settings."""
        from kiqbeat.store import Store

        config = self.config() if config is None else config
        # The deployment's count (--shard, --shard-count), else the one the store records.
        shards = self.settings.shard[1] if self.settings.shard else self.settings.shard_count
        return Store(self.client, namespace=config.namespace, shards=shards,
                     window_s=config.missed_jobs_window_s, history=self.settings.history,
                     lua=self.lua, actor=self.settings.actor or None)

    def load_functions(self) -> str:
        """Load (replace) kiqbeat's function library into Redis: an administrator's step."""
        client = self.client
        with redis_errors(client, "loading kiqbeat's function library"):
            name = client.function_load(scripts.library(), replace=True)
        return reply_text(name)

    def startup_warnings(self, client: redis.Redis, namespace: str) -> list[str] | None:
        """The startup checks' warnings, and the old state layout migrated if any is left
        (redis/migrate.py), in one round trip when none is (INFO and the old keys' TYPEs);
        None: done on this client before. Either failing, both run again on the next
        invocation."""
        if self._checked_client is client:
            return None
        with redis_errors(client, "running startup checks"):
            pipe = client.pipeline(transaction=False)
            for section in INFO_SECTIONS:
                pipe.info(section)
            for key in old_layout(namespace):
                pipe.type(key)
            replies = pipe.execute(raise_on_error=False)
            warnings = startup_warnings(replies[:len(INFO_SECTIONS)])
        warnings += migrate_layout(client, namespace, self.lua, replies[len(INFO_SECTIONS):])
        self._checked_client = client
        return warnings

    def recheck(self) -> None:
        """Run the startup checks again on the next invocation (its warnings reported again)."""
        self._checked_client = None

    def fresh(self, warnings: Sequence[str]) -> list[str]:
        """The warnings not reported before by this deployment, and the TLS one (every time,
        on purpose)."""
        fresh = [w for w in dict.fromkeys(warnings) if w not in self._reported]
        self._reported.update(fresh)
        if self._unverified_tls:
            fresh.append(f"TLS to Redis at {describe(self._url)} is not verified "
                         "(KIQBEAT_REDIS_INSECURE_TLS): anyone on the path can read the "
                         "password and push jobs")
        return fresh

    def check_instant(self, now: datetime | None, redis_now: datetime, window_s: float,
                      replay: bool) -> datetime:
        """The invocation's instant: `now` (--now) if allowed, else the Redis clock."""
        if now is None:
            return redis_now
        if now > redis_now:
            raise ConfigError(f"--now {now.isoformat()} is later than the Redis clock "
                              f"{redis_now.isoformat()}: that would push ticks early")
        if not replay and now < redis_now - timedelta(seconds=window_s):
            raise ConfigError(
                f"--now {now.isoformat()} is more than the missed-jobs window "
                f"({window_s:g} s) before the Redis clock "
                f"{redis_now.isoformat()}: an invocation there would register schedules as "
                "first seen then and record everything since as missed. To replay on "
                "purpose (a test, a rehearsal on a copy), pass --replay or set "
                "KIQBEAT_ALLOW_REPLAY=1; nothing was written")
        return now

    def check_shards(self, namespace: str, indexed_for: Any) -> None:
        """Refuse to run with a shard count other than the one the store records."""
        if indexed_for is None and self.shards > 1:
            raise ConfigError(
                f"this invocation runs {self.shards} shards but the store records no shard "
                f"count ({keys.shards(namespace)}): run `kiqbeat schedules reindex --shard "
                f"0/{self.shards}` once to split it (a Lambda: the event {{\"kiqbeat\": "
                f"\"reindex\", \"shards\": {self.shards}}}; docs/deploy.md, \"Shards\"); "
                "nothing was written")
        if (indexed_for is not None and not isinstance(indexed_for, Exception)
                and reply_text(indexed_for) != str(self.shards)):
            raise ConfigError(
                f"the store's due index is split into {reply_text(indexed_for)} shard(s) "
                f"({keys.shards(namespace)}) but this invocation runs with {self.shards}: it "
                f"would plan the wrong index. Run with --shard I/{reply_text(indexed_for)} "
                "(KIQBEAT_SHARD), or, after changing the shard count, run `kiqbeat schedules "
                f"reindex --shard 0/{self.shards}` once (docs/store.md); nothing was written")

    def close(self) -> None:
        """Close the client this deployment built (a given client stays its owner's)."""
        if self._client is not None:
            self._client.close()
            self._client = None  # `_url` stays: it names the Redis in a failure's log line
        self._checked_client = None


def _sinks(settings: Settings) -> list[Sink]:
    """The alert sinks the settings name; their modules (urllib's, boto3's) are loaded only
    when one is set."""
    if not (settings.alert_webhook or settings.alert_sns_topic):
        return []
    from kiqbeat.alerts.delivery import sinks_of

    return sinks_of(settings.alert_webhook, settings.alert_secret, settings.alert_sns_topic,
                    os.environ)
