"""The engine: one deployment's facade — its context, document sync, invocations and devices.

An `Engine` is built from `Settings` (and, in tests or libraries, a ready client) and keeps,
from one invocation to the next, what each part holds:

- the deployment's context (deployment.py): the settings, the Redis client and its startup
  checks, the document sources, the config with the overrides, the warnings reported;
- document sync (sync.py): the document applied when it changed, and the record of the bytes
  applied, so a new process meeting them does not parse them;
- the invocation (invocation.py): read what is due, decide per schedule, push, report;
- the performance devices (devices.py), each off in the reference mode (`KIQBEAT_REFERENCE`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

import redis

from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.deployment import Deployment
from kiqbeat.devices import Devices
from kiqbeat.document.sources import Sources
from kiqbeat.errors import ConfigError
from kiqbeat.invocation import Invocation
from kiqbeat.settings import DEFAULT_DEADLINE_S, Settings
from kiqbeat.sync import UNNAMED_DOCUMENT, Document, Sync

if TYPE_CHECKING:  # loaded by the commands that use them
    from kiqbeat.store import Status, Store

__all__ = ["UNNAMED_DOCUMENT", "Document", "Engine", "run", "status"]


class Engine:
    """One deployment's invocations: builds or holds the client, owns what they share."""

    def __init__(self, settings: Settings | None = None, *, client: redis.Redis | None = None,
                 sources: Sources | None = None, devices: Devices | None = None) -> None:
        self.settings = settings or Settings()
        self.deployment = Deployment(self.settings, client=client, sources=sources)
        self.sources = self.deployment.sources
        self.devices = devices or Devices(reference=self.settings.reference)
        self.sync = Sync(self.deployment, self.devices)
        self.invocation = Invocation(self.deployment, self.sync, self.devices)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None,
                     flags: Mapping[str, str | None] | None = None) -> Engine:
        """An engine from flags over KIQBEAT_* variables (the process environment by default)."""
        return cls(Settings.load(os.environ if environ is None else environ, flags))

    def config(self) -> Config:
        """`Deployment.config`: the settings' document with the overrides applied."""
        return self.deployment.config()

    @property
    def shards(self) -> int:
        """How many shards the store is split into (1: not split)."""
        return self.deployment.shards

    @property
    def client(self) -> redis.Redis:
        """The Redis client: the one given, or one built from the settings' current URL."""
        return self.deployment.client

    def redis_where(self) -> str:
        """Where Redis is, without any secret, for log lines ("" before the first connect)."""
        return self.deployment.redis_where()

    def run(self, config: Config | None = None, *, now: datetime | None = None,
            deadline_s: float | None = None, replay: bool = True) -> Report:
        """One invocation: apply the document if it changed, push every due tick exactly
        once, and report what happened.

        `config` defaults to the settings' document, which is then not parsed when its
        bytes are those the store records as applied (`Sync.unchanged`); `now` replays
        an invocation at an earlier instant (tests, rehearsals) and may not be later than
        the Redis clock; with `replay` False (the CLI without --replay) nor more than the
        missed-jobs window before it. With more than one shard, the store must record the
        count (`reindex`): an invocation never records it.
        Raises KiqbeatError subclasses; anything pushed before an error is pushed with its
        watermark, anything not pushed is left for the next invocation. The client is kept
        after Redis was unavailable: redis-py reconnects, and behind Sentinel it asks for
        the master on every new connection (a kept client reaches a new master 0.01-0.3 s
        after a failover settles, measured in tests/faults/test_sentinel_client.py).
        """
        if now is not None and now.timestamp() < 0:
            raise ConfigError(f"--now {now.isoformat()} is before 1970: the Redis clock, the "
                              "watermarks and Sidekiq's timestamps count from 1970")
        started = time.monotonic()
        limit_s = self.settings.deadline_s if deadline_s is None else deadline_s
        deadline = started + limit_s
        report = None
        if config is None:
            report = self.sync.unchanged(
                lambda stand_in, probe: self.invocation.run(stand_in, now, deadline, replay,
                                                            probe))
        if report is None:
            config = self.config() if config is None else config
            report = self.invocation.run(config, now, deadline, replay)
            assert report is not None  # only a probe's invocation gives up
        report.duration_s = time.monotonic() - started
        return report

    def store(self, config: Config | None = None) -> Store:
        """The schedule store API on this engine's client, with the namespace, window and
        shard count of its settings."""
        return self.deployment.store(config)

    def document_applied(self, config: Config | None = None) -> tuple[Document, bool] | None:
        """The settings' document (None without one), and whether the store holds it as it
        is now (False: the next invocation applies its changes); one round trip."""
        return self.sync.document_applied(self.config() if config is None else config)

    def load_functions(self) -> str:
        """Load (replace) kiqbeat's function library into Redis: an administrator's step."""
        return self.deployment.load_functions()

    def close(self) -> None:
        """Close the client this engine built (a given client stays its owner's)."""
        self.deployment.close()


def run(client: redis.Redis, config: Config, *, now: datetime | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S) -> Report:
    """One invocation by a new engine on `client`: as a cold start (scripts, tests)."""
    return Engine(client=client).run(config, now=now, deadline_s=deadline_s)


def status(client: redis.Redis, config: Config) -> Status:
    """`Store.status` through a new engine on `client`, with the config's namespace and
    window."""
    return Engine(client=client).store(config).status()
