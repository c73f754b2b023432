"""One invocation against Redis: read the clock and marks, plan, push atomically, report.

Round trips: one pipeline (TIME + HMGET of every schedule's mark), then one push-script
call per chunk — two for an ordinary minute, one when nothing is due. Extras, each said
where it happens: the neighbour check (sidekiq-scheduler, sidekiq-cron) rides in the first
pipeline whenever a client meets a new config; `wait_replicas` adds a WAIT per push call;
`sidekiq_scheduler_ui` adds the tab's toggles to the first pipeline and one write after.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from typing import Any

import redis
from redis.commands.core import Script

from kiqbeat import keys
from kiqbeat import scheduler_ui as ui
from kiqbeat.connection import scrub, startup_warnings
from kiqbeat.errors import (
    ConfigError,
    KiqbeatError,
    RedisRefusedError,
    RedisUnavailableError,
    StateError,
)
from kiqbeat.plan import Group, Plan, TickMemo, from_ms, plan_ticks, shard_of
from kiqbeat.report import PushedJob, Report
from kiqbeat.schedule import Config

PUSH_LUA = files("kiqbeat").joinpath("push.lua").read_text()
DEFAULT_DEADLINE_S = 40.0
# A --now this far past the Redis clock is refused: it would push ticks early.
NOW_TOLERANCE = timedelta(seconds=1)

# Per client: the registered script, and whether the startup checks have run.
_scripts: weakref.WeakKeyDictionary[redis.Redis, Script] = weakref.WeakKeyDictionary()
_memos: weakref.WeakKeyDictionary[redis.Redis, TickMemo] = weakref.WeakKeyDictionary()
# Per client: the last config whose neighbours passed the check (checked again on a change).
_checked: weakref.WeakKeyDictionary[redis.Redis, Config] = weakref.WeakKeyDictionary()


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
        for tag in ("KIQBEAT_GARBLED ", "KIQBEAT_WRONGTYPE "):
            if tag in text:
                detail = text.split(tag, 1)[1].split(" script:", 1)[0]
                raise StateError(f"{detail}; nothing was pushed (fix or delete the key)") from exc
        if "WRONGTYPE" in text:  # a pipeline's error names the command and so the key
            raise StateError(f"a key has the wrong type while {doing}: {text}; "
                             "nothing was pushed (fix or delete the key)") from exc
        raise RedisRefusedError(f"Redis at {_where(client)} refused {doing}: {text}") from exc


def _marks(raw: Sequence[bytes | None], names: Sequence[str], key: str) -> dict[str, int | None]:
    marks: dict[str, int | None] = {}
    for name, value in zip(names, raw, strict=True):
        if value is None:
            marks[name] = None
            continue
        try:
            marks[name] = int(value)
        except ValueError:
            raise StateError(
                f"watermark of schedule {name!r} in {key} is not a number: {value[:40]!r}; "
                "nothing was pushed (fix or delete the field)") from None
    return marks


def read_state(
    client: redis.Redis,
    namespace: str,
    names: Sequence[str],
    more: Callable[[Any], None] | None = None,
) -> tuple[datetime, dict[str, int | None], list[Any]]:
    """The Redis clock, every schedule's stored mark and `more`'s replies, in one round trip.

    `more` queues further reads on the pipeline; their replies come back as they are, an
    error reply as an exception object, so an optional read cannot sink the invocation.
    """
    key = keys.watermarks(namespace)
    with redis_errors(client, "reading the clock and watermarks"):
        pipe = client.pipeline(transaction=False)
        pipe.time()
        if names:
            pipe.hmget(key, list(names))
        if more is not None:
            more(pipe)
        replies = pipe.execute(raise_on_error=False)
        for command, reply in zip(("TIME", f"HMGET {key}"), replies[:2 if names else 1]):
            if isinstance(reply, Exception):
                raise type(reply)(f"{command}: {reply}")
    seconds, micros = replies[0]
    now = datetime.fromtimestamp(seconds, tz=UTC) + timedelta(microseconds=micros)
    start = 2 if names else 1
    return now, _marks(replies[1] if names else [], names, key), replies[start:]


class _Neighbours:
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
                pipe.hgetall(ui.schedules_key(ns))
            elif names:
                pipe.hmget(ui.schedules_key(ns), names)
            for name in names:
                pipe.exists(ui.pushed_key(ns, name))
            for name in names:
                pipe.exists(ui.cron_job_key(ns, name))
        if self.config.sidekiq_scheduler_ui and names:
            pipe.hmget(ui.states_key(ns), names)

    def apply(self, replies: list[Any]) -> Config:
        """The config with the tab's toggles applied; raises ConfigError on a conflict."""
        config, names = self.config, self.names
        if self.check:
            has_specs = config.sidekiq_scheduler_ui or bool(names)
            size = int(has_specs) + 2 * len(names)
            mine, replies = replies[:size], replies[size:]
            if any(isinstance(r, Exception) for r in mine):
                self.warnings.append(
                    "the check for sidekiq-scheduler and sidekiq-cron jobs of the same names "
                    f"was skipped: {next(r for r in mine if isinstance(r, Exception))}")
            else:
                raw: Any = mine[0] if has_specs else []
                specs = ({_text(k): v for k, v in raw.items()} if config.sidekiq_scheduler_ui
                         else dict(zip(names, raw, strict=True)))
                rest = [bool(r) for r in mine[int(has_specs):]]
                problems = ui.coexistence_problems(
                    config, specs=specs,
                    pushed_recently=dict(zip(names, rest[:len(names)], strict=True)),
                    cron_jobs=dict(zip(names, rest[len(names):], strict=True)))
                if problems:
                    raise ConfigError(problems, source="beside other schedulers")
                if config.sidekiq_scheduler_ui and config.shard is None:
                    self.stale = ui.stale_names(specs, config)
        if config.sidekiq_scheduler_ui and names:
            states = replies[0]
            if isinstance(states, Exception):
                raise StateError(f"reading {ui.states_key(config.namespace)}: {states}")
            toggles, warnings = ui.read_toggles(dict(zip(names, states, strict=True)))
            self.warnings += warnings
            config = ui.with_toggles(config, toggles)
        return config

    def write_tab(self, client: redis.Redis, config: Config, report: Report) -> None:
        """Show this invocation in the tab: specs (on a new config), last and next times."""
        last: dict[str, datetime] = {}
        for job in report.jobs:
            last[job.schedule] = max(job.tick, last.get(job.schedule, job.tick))
        shown = config.schedules if self.check else [
            s for s in config.schedules if s.name in last]
        fields = ui.ui_fields(replace(config, schedules=tuple(shown)), last,
                              {s.name: s.timetable.next_after(report.now) for s in shown})
        ns = config.namespace
        pipe: Any = client.pipeline(transaction=False)
        if self.check and fields.schedules:
            pipe.hset(ui.schedules_key(ns), mapping=fields.schedules)
        if self.stale:
            pipe.hdel(ui.schedules_key(ns), *self.stale)
            pipe.hdel(ui.last_times_key(ns), *self.stale)
            pipe.hdel(ui.next_times_key(ns), *self.stale)
        for key, values in ((ui.last_times_key(ns), fields.last_times),
                            (ui.next_times_key(ns), fields.next_times)):
            if values:
                pipe.hset(key, mapping=values)
        try:
            with redis_errors(client, "updating sidekiq-scheduler's Recurring Jobs tab"):
                pipe.execute()
        except KiqbeatError as exc:  # the jobs are pushed; the tab catches up next time
            report.warnings.append(str(exc))
        report.round_trips += 1


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _script(client: redis.Redis) -> Script:
    script = _scripts.get(client)
    if script is None:
        script = _scripts[client] = client.register_script(PUSH_LUA)
    return script


def _push_chunk(
    client: redis.Redis, namespace: str, now_ms: int, chunk: list[Group]
) -> tuple[list[Any], str]:
    queue_index: dict[str, int] = {}
    argv: list[str | int] = []
    for group in chunk:
        argv += [group.name, group.mark_ms, group.missed, group.skipped, len(group.jobs)]
        for job in group.jobs:
            target = (0 if job.queue is None
                      else queue_index.setdefault(job.queue, len(queue_index) + 1))
            argv += [job.tick_ms, target, job.payload]
    queue_names = list(queue_index)
    script_keys = [keys.watermarks(namespace), keys.first_seen(namespace), keys.queues(namespace),
                   keys.schedule(namespace), *(keys.queue(namespace, q) for q in queue_names)]
    with redis_errors(client, "pushing jobs"):
        reply = _script(client)(keys=script_keys,
                                args=[now_ms, len(queue_names), *queue_names, *argv],
                                client=client)
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


def push(client: redis.Redis, plan: Plan, config: Config, report: Report, deadline: float) -> None:
    """Carry out a plan, one atomic script call per chunk, filling in the report."""
    namespace = config.namespace
    now = from_ms(plan.now_ms)
    for chunk in plan.chunks():
        if time.monotonic() > deadline:
            raise RedisUnavailableError(
                f"invocation deadline passed after {report.chunks} push calls "
                f"({report.pushed} jobs pushed); the next invocation pushes the rest")
        counts, flags = _push_chunk(client, namespace, plan.now_ms, chunk)
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


def select_shard(config: Config, shard: tuple[int, int] | None) -> Config:
    """The config restricted to shard (index, count); schedules split by a hash of their name."""
    if shard is None:
        return config
    index, count = shard
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"invalid shard {index}/{count}: "
                          "expected INDEX/COUNT with 0 <= INDEX < COUNT")
    mine = tuple(s for s in config.schedules if shard_of(s.name, count) == index)
    return replace(config, schedules=mine, shard=shard)


def run(
    client: redis.Redis,
    config: Config,
    *,
    now: datetime | None = None,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> Report:
    """One invocation: push every due tick exactly once and report what happened.

    `now` replays an invocation at an earlier instant (tests, backfills); it may not be
    later than the Redis clock. Raises KiqbeatError subclasses; anything pushed before an
    error is pushed with its watermark, anything not pushed is left for the next call.
    """
    started = time.monotonic()
    deadline = started + deadline_s
    warnings = list(config.warnings)
    if client not in _memos:
        with redis_errors(client, "running startup checks"):
            warnings += startup_warnings(client)
        _memos[client] = TickMemo()
    names = [s.name for s in config.schedules]
    neighbours = _Neighbours(config, check=_checked.get(client) != config)
    redis_now, marks, more = read_state(client, config.namespace, names, neighbours.queue)
    config = neighbours.apply(more)
    _checked[client] = neighbours.config
    warnings += neighbours.warnings
    if now is None:
        now = redis_now
    elif now > redis_now + NOW_TOLERANCE:
        raise ConfigError(f"--now {now.isoformat()} is later than the Redis clock "
                          f"{redis_now.isoformat()}: that would push ticks early")
    report = Report(now=now, schedules=len(names), round_trips=1, warnings=warnings)
    plan = plan_ticks(config, marks, now, _memos[client])
    push(client, plan, config, report, deadline)
    if config.sidekiq_scheduler_ui:
        neighbours.write_tab(client, config, report)
    report.duration_s = time.monotonic() - started
    return report


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


def status(client: redis.Redis, config: Config) -> tuple[datetime, list[ScheduleStatus]]:
    """The Redis clock and each schedule's stored state and next tick; read-only."""
    names = [s.name for s in config.schedules]
    now, marks, _ = read_state(client, config.namespace, names)
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
        zone = getattr(schedule.timetable, "zone_name", "UTC")
        rows.append(ScheduleStatus(
            schedule.name, zone, schedule.enabled, mark,
            from_ms(int(first)) if first is not None and first.isdigit() else None,
            nxt, max(0.0, (now - nxt).total_seconds())))
    return now, rows

