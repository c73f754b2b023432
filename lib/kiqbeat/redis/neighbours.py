"""Living beside sidekiq-scheduler and sidekiq-cron: the engine's reads and writes for them.

`scheduler_ui` holds the pure rules (which keys, which formats, what conflicts); this module
queues the reads on the engine's first pipeline, applies what they say to the config, and
writes the Recurring Jobs tab after a push. Round trips: none for the reads; one after the
push when `sidekiq_scheduler_ui` is on.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import redis

from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.errors import ConfigError, KiqbeatError, StateError
from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors, reply_text


class Neighbours:
    """Reads for the sidekiq-scheduler / sidekiq-cron check and the Recurring Jobs tab.

    Queued on the first pipeline; see `scheduler_ui` for what each key means. The check runs
    when a client meets a config it has not passed with (so on every cold start and config
    change); the tab's toggles are read on every invocation when the tab is on.
    """

    def __init__(self, config: Config, check: bool) -> None:
        self.config, self.check = config, check
        self.names = [s.name for s in config.schedules]
        self.warnings: list[str] = []
        self.stale: list[str] = []

    def queue(self, pipe: Any) -> None:
        ns, names = self.config.namespace, self.names
        if self.check:
            if self.config.sidekiq_scheduler_ui:
                pipe.hgetall(keys.schedules_key(ns))
            elif names:
                pipe.hmget(keys.schedules_key(ns), names)
            for name in names:
                pipe.exists(keys.pushed_key(ns, name))
            for name in names:
                pipe.exists(keys.cron_job_key(ns, name))
        if self.config.sidekiq_scheduler_ui and names:
            pipe.hmget(keys.states_key(ns), names)

    def apply(self, replies: list[Any]) -> Config:
        """The config with the tab's toggles applied; raises ConfigError on a conflict."""
        config, names = self.config, self.names
        if not (config.sidekiq_scheduler_ui or names):
            return config  # nothing read, nothing to check (a store without a document)
        from kiqbeat.redis import scheduler_ui as ui  # the cron core: only with names

        if self.check:  # the `schedules` read (HGETALL or HMGET), then the EXISTS of each name
            size = 1 + 2 * len(names)
            mine, replies = replies[:size], replies[size:]
            if any(isinstance(r, Exception) for r in mine):
                self.warnings.append(
                    "the check for sidekiq-scheduler and sidekiq-cron jobs of the same names "
                    f"was skipped: {next(r for r in mine if isinstance(r, Exception))}")
            else:
                raw: Any = mine[0]
                specs = ({reply_text(k): v for k, v in raw.items()} if config.sidekiq_scheduler_ui
                         else dict(zip(names, raw, strict=True)))
                rest = [bool(r) for r in mine[1:]]
                problems = ui.coexistence_problems(
                    config, specs=specs,
                    pushed_recently=dict(zip(names, rest[:len(names)], strict=True)),
                    cron_jobs=dict(zip(names, rest[len(names):], strict=True)))
                if problems:
                    raise ConfigError(problems, source="beside other schedulers")
                if config.sidekiq_scheduler_ui:
                    self.stale = ui.stale_names(specs, config)
        if config.sidekiq_scheduler_ui and names:
            states = replies[0]
            if isinstance(states, Exception):
                raise StateError(f"reading {keys.states_key(config.namespace)}: {states}")
            toggles, warnings = ui.read_toggles(dict(zip(names, states, strict=True)))
            self.warnings += warnings
            config = ui.with_toggles(config, toggles)
        return config

    def write_tab(self, client: redis.Redis, config: Config, report: Report) -> None:
        """Show this invocation in the tab: specs (on a new config), last and next times."""
        from kiqbeat.redis import scheduler_ui as ui

        last: dict[str, datetime] = {}
        for job in report.jobs:
            last[job.schedule] = max(job.tick, last.get(job.schedule, job.tick))
        shown = config.schedules if self.check else [
            s for s in config.schedules if s.name in last]
        fields = ui.ui_fields(shown, last,
                              {s.name: s.timetable.next_after(report.now) for s in shown})
        ns = config.namespace
        pipe: Any = client.pipeline(transaction=False)
        if self.check and fields.schedules:
            pipe.hset(keys.schedules_key(ns), mapping=fields.schedules)
        if self.stale:
            pipe.hdel(keys.schedules_key(ns), *self.stale)
            pipe.hdel(keys.last_times_key(ns), *self.stale)
            pipe.hdel(keys.next_times_key(ns), *self.stale)
        for key, values in ((keys.last_times_key(ns), fields.last_times),
                            (keys.next_times_key(ns), fields.next_times)):
            if values:
                pipe.hset(key, mapping=values)
        try:
            with redis_errors(client, "updating sidekiq-scheduler's Recurring Jobs tab"):
                pipe.execute()
        except KiqbeatError as exc:  # the jobs are pushed; the tab catches up next time
            report.warnings.append(str(exc))
        report.round_trips += 1
