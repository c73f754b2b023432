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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from kiqbeat.core.plan import (
    Group,
    Plan,
    TickMemo,
    check_shard,
    from_ms,
    plan_ticks,
    shard_of,
    to_ms,
)
from kiqbeat.core.report import PushedJob, Report
from kiqbeat.core.schedule import Config
from kiqbeat.document.sources import Sources
from kiqbeat.document.validate import with_window
from kiqbeat.errors import ConfigError, DeadlineError, KiqbeatError
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import connect, redis_errors, startup_warnings
from kiqbeat.redis.neighbours import Neighbours
from kiqbeat.redis.urls import describe, parse_url
from kiqbeat.settings import DEFAULT_DEADLINE_S, Settings

PUSH_SHA = scripts.PUSH.sha
# Job bytes one invocation sends at most: a catch-up of big jobs goes on in the next
# invocations (its watermarks only move with what was pushed), and neither kiqbeat's memory
# nor Redis's takes a surprise of gigabytes in one go.
MAX_BYTES_PER_INVOCATION = 64 * 1024 * 1024


def read_state(
    client: redis.Redis,
    namespace: str,
    names: Sequence[str],
    more: Callable[[Any], None] | None = None,
    lua: scripts.Caller = scripts.SCRIPTS,
) -> tuple[datetime, dict[str, int | None], list[Any]]:
    """The Redis clock, every schedule's stored mark and `more`'s replies, in one round trip.

    `more` queues further reads on the pipeline; their replies come back as they are, an
    error reply as an exception object, so an optional read cannot sink the invocation.
    """
    key = keys.watermarks(namespace)
    with redis_errors(client, "reading the clock and watermarks"):
        for attempt in (1, 2):
            pipe = client.pipeline(transaction=False)
            lua.queue(scripts.READ, pipe, [key], ["\n".join(names)])
            if more is not None:
                more(pipe)
            replies = pipe.execute(raise_on_error=False)
            if not lua.needs_reload(replies[0]) or attempt == 2:
                break
            lua.reload(scripts.READ, client)  # a new or restarted server: once
        if isinstance(replies[0], Exception):
            raise lua.explained(replies[0])
    seconds, micros, joined = replies[0]
    now = datetime.fromtimestamp(int(seconds), tz=UTC) + timedelta(microseconds=int(micros))
    if isinstance(joined, bytes):  # a client may decode replies to str
        joined = joined.decode()
    values = joined.split("\n") if names else []
    marks = {name: int(v) if v else None for name, v in zip(names, values, strict=True)}
    return now, marks, replies[1:]


def _push_chunk(
    client: redis.Redis, namespace: str, now_ms: int, chunk: list[Group], lua: scripts.Caller
) -> tuple[list[Any], str]:
    queue_index: dict[str, int] = {}
    parts: list[bytes] = []  # the groups packed in one argument; push.lua's header says how
    for group in chunk:
        queue = next((job.queue for job in group.jobs if job.queue is not None), None)
        target = 0 if queue is None else queue_index.setdefault(queue, len(queue_index) + 1)
        parts.append(f"{group.name}\n{group.mark_ms} {group.missed} {group.skipped} "
                     f"{len(group.jobs)} {target} {int(group.new)}\n".encode())
        for job in group.jobs:
            payload = job.payload.encode()
            tick = job.tick_ms if job.queue is not None else -job.tick_ms
            parts += (b"%d %d\n" % (tick, len(payload)), payload)
    queue_names = list(queue_index)
    script_keys = [keys.watermarks(namespace), keys.first_seen(namespace), keys.queues(namespace),
                   keys.schedule(namespace), *(keys.queue(namespace, q) for q in queue_names)]
    with redis_errors(client, "pushing jobs"):
        reply = lua.call(scripts.PUSH, client, script_keys,
                         [now_ms, len(queue_names), *queue_names, b"".join(parts)])
    counts, flags = reply[:5], reply[5]
    return counts, flags.decode() if isinstance(flags, bytes) else str(flags)


def _wait_for_replicas(client: redis.Redis, config: Config, pushed: int, report: Report) -> None:
    """Block until `wait_replicas` replicas hold what was just pushed, or the timeout passes.

    Redis replicates asynchronously: a master that dies right after a push can take the push
    and its watermark with it, and a failover then re-pushes those ticks (a duplicate only if
    a worker had already taken them from the old master). WAIT narrows that window; it cannot
    undo a push, so a shortfall is a warning, not a failure.
    """
    with redis_errors(client, "waiting for replicas"):
        acked = int(client.wait(config.wait_replicas, int(config.wait_timeout_s * 1000)))
    report.round_trips += 1
    if acked < config.wait_replicas:
        report.unreplicated += pushed
        report.warnings.append(
            f"only {acked} of {config.wait_replicas} replicas acknowledged {pushed} pushed jobs "
            f"within {config.wait_timeout_s:g} s; a failover now could push them again")


def push(client: redis.Redis, plan: Plan, config: Config, report: Report, deadline: float,
         lua: scripts.Caller = scripts.SCRIPTS) -> None:
    """Carry out a plan, one atomic script call per chunk, filling in the report."""
    namespace = config.namespace
    now = from_ms(plan.now_ms)
    sent = 0
    for chunk in plan.chunks():
        size = sum(len(job.payload) for group in chunk for job in group.jobs)
        if sent and sent + size > MAX_BYTES_PER_INVOCATION:
            report.warnings.append(
                f"this invocation sent {sent:,} bytes of jobs, the most one may; the next "
                "invocation pushes the rest (within the missed-jobs window)")
            return
        sent += size
        if time.monotonic() > deadline:
            raise DeadlineError(
                f"invocation deadline passed after {report.chunks} push calls "
                f"({report.pushed} jobs pushed); the next invocation pushes the rest")
        try:
            counts, flags = _push_chunk(client, namespace, plan.now_ms, chunk, lua)
        except KiqbeatError as exc:
            if not report.pushed:
                raise
            raise type(exc)(f"{exc}; before this, {report.pushed} jobs were pushed by "
                            f"{report.chunks} earlier calls, with their watermarks") from exc
        report.chunks += 1
        report.round_trips += 1
        pushed, already, missed, skipped, new = (int(c) for c in counts)
        report.pushed += pushed
        report.already_pushed += already
        report.missed += missed
        report.skipped += skipped
        report.new_schedules += new
        if config.wait_replicas and pushed:
            _wait_for_replicas(client, config, pushed, report)
        jobs = (job for group in chunk for job in group.jobs)
        for job, flag in zip(jobs, flags, strict=True):
            if flag != "1":
                continue
            tick = from_ms(job.tick_ms)
            report.jobs.append(PushedJob(job.schedule, tick, job.jid, job.queue))
            if job.queue is not None:
                report.lag_s = max(report.lag_s, (now - tick).total_seconds())


def _prune(client: redis.Redis, config: Config, now: datetime, report: Report,
           lua: scripts.Caller) -> None:
    """Forget schedules no longer configured whose marks cover nothing still owed.

    Only marks older than the window plus the longest lookahead go: every tick at or below
    such a mark is outside any future window, so a re-added schedule simply starts as new.
    A younger mark stays, and a schedule re-added within the window continues from it.
    """
    lookahead_s = max((s.lookahead_s for s in config.schedules), default=0.0)
    threshold = now - timedelta(seconds=config.missed_jobs_window_s + lookahead_s)
    report.round_trips += 1
    try:
        with redis_errors(client, "forgetting removed schedules"):
            lua.call(scripts.PRUNE, client,
                     [keys.watermarks(config.namespace), keys.first_seen(config.namespace)],
                     [to_ms(threshold), "\n".join(_document_names(config))])
    except KiqbeatError as exc:  # the jobs are pushed; only the bound on state is at stake
        report.warnings.append(f"removed schedules are not forgotten, so kiqbeat's state "
                               f"keeps growing: {exc} (grant +hgetall +hdel)")


def _document_names(config: Config) -> tuple[str, ...]:
    """Every schedule of the document, this shard's and the others'."""
    return config.document_names or tuple(s.name for s in config.schedules)


def select_shard(config: Config, shard: tuple[int, int] | None) -> Config:
    """The config restricted to shard (index, count); schedules split by a hash of their name."""
    if shard is None:
        return config
    index, count = check_shard(*shard)
    mine = tuple(s for s in config.schedules if shard_of(s.name, count) == index)
    return replace(config, schedules=mine, shard=shard,
                   document_names=tuple(s.name for s in config.schedules))


@dataclass(frozen=True)
class ScheduleStatus:
    """Where one schedule stands: for `kiqbeat status`."""

    name: str
    zone: str
    enabled: bool
    covered_through: datetime | None  # every tick up to here was pushed or passed over
    first_seen: datetime | None
    next_tick: datetime
    lag_s: float  # how overdue the next tick is (0 when it is in the future)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        def iso(t: datetime | None) -> str | None:
            return t.isoformat() if t else None
        return {"name": self.name, "zone": self.zone, "enabled": self.enabled,
                "covered_through": iso(self.covered_through), "first_seen": iso(self.first_seen),
                "next_tick": iso(self.next_tick), "lag_s": round(self.lag_s, 3)}


def read_status(client: redis.Redis, config: Config,
                lua: scripts.Caller = scripts.SCRIPTS) -> tuple[datetime, list[ScheduleStatus]]:
    """The Redis clock and each schedule's stored state and next tick; read-only."""
    names = [s.name for s in config.schedules]
    now, marks, _ = read_state(client, config.namespace, names, lua=lua)
    seen: list[bytes | str | None] = []
    if names:
        with redis_errors(client, "reading first-seen marks"):
            seen = client.hmget(keys.first_seen(config.namespace), names)
    rows = []
    for schedule, first in zip(config.schedules, seen or [None] * len(names), strict=True):
        mark_ms = marks[schedule.name]
        mark = from_ms(mark_ms) if mark_ms is not None else None
        after = max(mark, now - timedelta(seconds=config.missed_jobs_window_s)) if mark else now
        nxt = schedule.timetable.next_after(after)
        zone = schedule.timetable.zone_name
        rows.append(ScheduleStatus(
            schedule.name, zone, schedule.enabled, mark,
            from_ms(int(first)) if first is not None and first.isdigit() else None,
            nxt, max(0.0, (now - nxt).total_seconds())))
    return now, rows



class Engine:
    """One deployment's invocations: builds or holds the client, owns what they share."""

    def __init__(self, settings: Settings | None = None, *, client: redis.Redis | None = None,
                 sources: Sources | None = None) -> None:
        self.settings = settings or Settings()
        self.sources = sources or Sources(self.settings.max_age_s)
        self._given_client = client
        self._client: redis.Redis | None = client
        self._url = ""
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
        # On a new config, also count the stored marks: more than the document has means
        # some schedules left, and their marks may be old enough to forget (bounded state).
        # A shard counts against the whole document, and forgets for every shard.
        count_marks = neighbours.check

        def more_reads(pipe: Any) -> None:
            neighbours.queue(pipe)
            if count_marks:
                pipe.hlen(keys.watermarks(config.namespace))

        redis_now, marks, more = read_state(client, config.namespace, names, more_reads,
                                            self._lua)
        stored = more.pop() if count_marks else 0
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
        if self._url and parse_url(self._url).insecure:  # said every time, on purpose
            report.warnings.append(f"TLS to Redis at {describe(self._url)} is not verified "
                                   "(KIQBEAT_REDIS_INSECURE_TLS): anyone on the path can read "
                                   "the password and push jobs")
        plan = plan_ticks(config, marks, now, self._memo)
        push(client, plan, config, report, deadline, self._lua)
        if config.sidekiq_scheduler_ui:
            neighbours.write_tab(client, config, report)
        if isinstance(stored, int) and stored > len(_document_names(config)):
            _prune(client, config, now, report, self._lua)
        return report

    def _not_yet_reported(self, warnings: Sequence[str]) -> list[str]:
        fresh = [w for w in dict.fromkeys(warnings) if w not in self._reported]
        self._reported.update(fresh)
        return fresh

    def _close_own_client(self) -> None:
        if self._client is not None and self._given_client is None:
            self._client.close()
        if self._given_client is None:
            self._client = None  # `_url` stays: it names the Redis in a failure's log line
        self._checked_client = None


def run(client: redis.Redis, config: Config, *, now: datetime | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S) -> Report:
    """One invocation by a new engine on `client`: as a cold start (scripts, tests)."""
    return Engine(client=client).run(config, now=now, deadline_s=deadline_s)


def status(client: redis.Redis, config: Config) -> tuple[datetime, list[ScheduleStatus]]:
    """`Engine.status` by a new engine on `client`."""
    return Engine(client=client).status(config)
