"""kiqbeat's state in Redis, read and written: the acting half of an invocation.

`core.plan` decides what an invocation pushes; the functions here carry it out against
Redis, each saying its round trips: `read_state` (TIME and every schedule's mark, one
pipelined call), `push` (one atomic script call per chunk, each advancing the watermarks it
covers), `prune` (forgetting schedules gone from the document), `read_status`. The engine
(`kiqbeat.engine`) strings them together.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from kiqbeat.core.plan import Group, Plan, from_ms, to_ms
from kiqbeat.core.report import PushedJob, Report
from kiqbeat.core.schedule import Config
from kiqbeat.errors import DeadlineError, KiqbeatError
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.connection import redis_errors

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


def prune(client: redis.Redis, config: Config, now: datetime, report: Report,
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
                     [to_ms(threshold), "\n".join(document_names(config))])
    except KiqbeatError as exc:  # the jobs are pushed; only the bound on state is at stake
        report.warnings.append(f"removed schedules are not forgotten, so kiqbeat's state "
                               f"keeps growing: {exc} (grant +hgetall +hdel)")



def document_names(config: Config) -> tuple[str, ...]:
    """Every schedule of the document, this shard's and the others'."""
    return config.document_names or tuple(s.name for s in config.schedules)


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



