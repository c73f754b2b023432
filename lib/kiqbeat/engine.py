"""The engine: one deployment's invocations against Redis — read, plan, push, report.

An `Engine` is built from `Settings` (and, in tests or libraries, a ready client). It owns
everything kept from one invocation to the next, so that its meaning is visible here:

- the Redis client, built from the settings' URL (rebuilt when the URL changes, as after a
  secret rotation) and the startup checks done on it (once per client);
- the tick memo (the next tick of each timetable: most schedules are not due in a given
  minute, and a warm process answers that in O(1));
- the last config whose neighbours (sidekiq-scheduler, sidekiq-cron) passed the check;
- the warnings already reported: a config or startup warning is reported once per engine,
  while an invocation's own (a `wait_replicas` shortfall) is reported every time;
- the document sources and their caches.

Round trips: one pipeline (read.lua: TIME and every schedule's mark), then one push-script
call per chunk — two for an ordinary minute, one when nothing is due. Extras, each said
where it happens: the startup checks (one pipelined INFO) and script loads on a new client
or server; the neighbour check rides in the first pipeline whenever the engine meets a new
config, and forgetting removed schedules takes one more then, only when there are any;
`wait_replicas` adds a WAIT per push call; `sidekiq_scheduler_ui` adds the tab's toggles to
the first pipeline and one write after.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import redis

from kiqbeat.core.plan import (
    TickMemo,
    check_shard,
    plan_ticks,
    shard_of,
)
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.document.sources import Sources
from kiqbeat.document.validate import with_window
from kiqbeat.errors import ConfigError
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import connect, redis_errors, startup_warnings
from kiqbeat.redis.neighbours import Neighbours
from kiqbeat.redis.state import (
    ScheduleStatus,
    document_names,
    prune,
    push,
    read_state,
    read_status,
)
from kiqbeat.redis.urls import describe, parse_url
from kiqbeat.settings import DEFAULT_DEADLINE_S, Settings


def select_shard(config: Config, shard: tuple[int, int] | None) -> Config:
    """The config restricted to shard (index, count); schedules split by a hash of their name."""
    if shard is None:
        return config
    index, count = check_shard(*shard)
    mine = tuple(s for s in config.schedules if shard_of(s.name, count) == index)
    return replace(config, schedules=mine, shard=shard,
                   document_names=tuple(s.name for s in config.schedules))


class Engine:
    """One deployment's invocations: builds or holds the client, owns what they share."""

    def __init__(self, settings: Settings | None = None, *, client: redis.Redis | None = None,
                 sources: Sources | None = None) -> None:
        self.settings = settings or Settings()
        self.sources = sources or Sources(self.settings.max_age_s)
        self._given_client = client
        self._client: redis.Redis | None = None  # built from the URL, when none was given
        self._url = ""
        self._unverified_tls = False  # the URL turns TLS verification off (allowed)
        self._checked_client: redis.Redis | None = None  # startup checks done on it
        self._checked_config: Config | None = None  # neighbours passed with it
        self._memo = TickMemo()
        self._reported: set[str] = set()
        self._lua = scripts.Caller(functions=self.settings.redis_functions)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None,
                     flags: Mapping[str, str | None] | None = None) -> Engine:
        """An engine from flags over KIQBEAT_* variables (the process environment by default)."""
        return cls(Settings.load(os.environ if environ is None else environ, flags))

    def config(self) -> Config:
        """The document the settings name, with the window override and the shard applied."""
        config = self.sources.load_config(self.settings.require_config())
        if self.settings.window_s is not None:
            config = with_window(config, self.settings.window_s,
                                 what="KIQBEAT_MISSED_JOBS_WINDOW / --missed-jobs-window")
        return select_shard(config, self.settings.shard)

    @property
    def client(self) -> redis.Redis:
        """The Redis client: the one given, or one built from the settings' current URL."""
        if self._given_client is not None:
            return self._given_client
        url = self.sources.redis_url(self.settings.redis_environ())
        if self._client is None or url != self._url:
            self._close_own_client()
            insecure = self.settings.redis_insecure_tls
            self._client, self._url = connect(url, insecure_tls=insecure), url
            self._unverified_tls = parse_url(url).insecure
        return self._client

    def redis_where(self) -> str:
        """Where Redis is, without any secret, for log lines ("" before the first connect)."""
        return describe(self._url) if self._url else ""

    def run(self, config: Config | None = None, *, now: datetime | None = None,
            deadline_s: float | None = None) -> Report:
        """One invocation: push every due tick exactly once and report what happened.

        `config` defaults to the settings' document; `now` replays an invocation at an
        earlier instant (tests, backfills) and may not be later than the Redis clock.
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
        config = self.config() if config is None else config
        report = self._invoke(config, now, deadline)
        report.duration_s = time.monotonic() - started
        return report

    def status(self, config: Config | None = None) -> tuple[datetime, list[ScheduleStatus]]:
        """The Redis clock and each schedule's stored state and next tick; read-only."""
        config = self.config() if config is None else config
        return read_status(self.client, config, self._lua)

    def load_functions(self) -> str:
        """Load (replace) kiqbeat's function library into Redis: an administrator's step."""
        client = self.client
        with redis_errors(client, "loading kiqbeat's function library"):
            name = client.function_load(scripts.library(), replace=True)
        return name.decode() if isinstance(name, bytes) else str(name)

    def close(self) -> None:
        """Close the client this engine built (a given client stays its owner's)."""
        self._close_own_client()

    def _invoke(self, config: Config, now: datetime | None, deadline: float) -> Report:
        client = self.client
        warnings = list(config.warnings)
        if self._checked_client is not client:
            with redis_errors(client, "running startup checks"):
                warnings += startup_warnings(client)
            self._checked_client, self._checked_config = client, None
        names = [s.name for s in config.schedules]
        last = self._checked_config
        neighbours = Neighbours(config, check=last is not config and last != config)
        def more_reads(pipe: Any) -> None:
            neighbours.queue(pipe)
            # On a new config, also count the stored marks: more than the document has means
            # some schedules left, whose marks may be old enough to forget (bounded state).
            # A shard counts against the whole document, and forgets for every shard.
            if neighbours.check:
                pipe.hlen(keys.watermarks(config.namespace))

        redis_now, marks, more = read_state(client, config.namespace, names, more_reads,
                                            self._lua)
        stored = more.pop() if neighbours.check else 0
        if isinstance(stored, Exception):
            warnings.append(f"removed schedules are not forgotten, so kiqbeat's state keeps "
                            f"growing: counting the stored marks was refused ({stored}); "
                            "grant +hlen +hgetall +hdel")
        config = neighbours.apply(more)
        self._checked_config = neighbours.config
        warnings += neighbours.warnings
        if now is None:
            now = redis_now
        elif now > redis_now:
            raise ConfigError(f"--now {now.isoformat()} is later than the Redis clock "
                              f"{redis_now.isoformat()}: that would push ticks early")
        report = Report(now=now, schedules=len(names), round_trips=1,
                        warnings=self._not_yet_reported(warnings))
        if self._unverified_tls:  # said every time, on purpose
            report.warnings.append(f"TLS to Redis at {describe(self._url)} is not verified "
                                   "(KIQBEAT_REDIS_INSECURE_TLS): anyone on the path can read "
                                   "the password and push jobs")
        plan = plan_ticks(config, marks, now, self._memo)
        push(client, plan, config, report, deadline, self._lua)
        if config.sidekiq_scheduler_ui:
            neighbours.write_tab(client, config, report)
        if isinstance(stored, int) and stored > len(document_names(config)):
            prune(client, config, now, report, self._lua)
        return report

    def _not_yet_reported(self, warnings: Sequence[str]) -> list[str]:
        fresh = [w for w in dict.fromkeys(warnings) if w not in self._reported]
        self._reported.update(fresh)
        return fresh

    def _close_own_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None  # `_url` stays: it names the Redis in a failure's log line
        self._checked_client = None


def run(client: redis.Redis, config: Config, *, now: datetime | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S) -> Report:
    """One invocation by a new engine on `client`: as a cold start (scripts, tests)."""
    return Engine(client=client).run(config, now=now, deadline_s=deadline_s)


def status(client: redis.Redis, config: Config) -> tuple[datetime, list[ScheduleStatus]]:
    """`Engine.status` by a new engine on `client`."""
    return Engine(client=client).status(config)
