"""Pushes: every way kiqbeat puts a job into a queue, one atomic script each.

- an invocation's (`push`, push.lua): `core.plan` decides what is due; each chunk pushes
  its jobs, advances the watermarks it covers and moves the schedules' due index entries,
  in one step. `redis.due` reads what is due; the engine (`kiqbeat.engine`) strings them
  together;
- a backfill's (`push_backfill`, backfill.lua): recorded missed ticks, pushed while still
  recorded and taken out of the record in the same step;
- a manual run's (`push_manual`, trigger.lua): one job now, once even when re-sent.

`kiqbeat.operator` decides what a backfill or a manual run pushes; this carries it out.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis

from kiqbeat.core.plan import MISSED_COUNT_CAP, Group, Plan
from kiqbeat.core.records import DEFAULT_HISTORY
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.errors import DeadlineError, KiqbeatError, shown
from kiqbeat.redis import frames, keys, scripts
from kiqbeat.redis.connection import redis_errors, reply_text

Piece = frames.Piece  # where operator code has always found it
PUSH_SHA = scripts.PUSH.sha
# Job bytes one invocation sends at most: a catch-up of big jobs goes on in the next
# invocations (its watermarks only move with what was pushed), and neither kiqbeat's memory
# nor Redis's takes a surprise of gigabytes in one go.
MAX_BYTES_PER_INVOCATION = 64 * 1024 * 1024


def push_call(client: redis.Redis, namespace: str, due_key: str, now_ms: int,
              chunk: Sequence[Group], history: int,
              lua: scripts.Caller = scripts.SCRIPTS) -> tuple[list[int], str]:
    """One push.lua call (an atomic chunk of a plan): its counts (pushed, already, missed,
    skipped, new, stale, recorded) and flags, one "1"/"0" per job in order."""
    queues = frames.Queues()
    body = frames.push_request(chunk, queues)
    names = queues.names
    script_keys = [keys.watermarks(namespace), keys.first_seen(namespace), keys.queues(namespace),
                   keys.schedule(namespace), due_key, keys.definitions(namespace),
                   keys.rejected(namespace), keys.missed(namespace), keys.history(namespace),
                   *(keys.queue(namespace, q) for q in names)]
    with redis_errors(client, "pushing jobs"):
        reply = lua.call(scripts.PUSH, client, script_keys,
                         [now_ms, history, len(names), *names, body])
    return [int(c) for c in reply[:7]], reply_text(reply[7])


def wait_for_replicas(client: redis.Redis, config: Config, pushed: int, report: Report) -> None:
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


def settle(report: Report, chunk: Sequence[Group], counts: Sequence[int], flags: str,
           now_ms: int) -> None:
    """Add one push call's outcome to the report: its counts, and which jobs it pushed (kept
    as the groups' lists; `Report.jobs` builds objects only when asked)."""
    pushed, already, missed, skipped, new, stale, recorded = counts
    report.chunks += 1
    report.round_trips += 1
    report.missed_recorded += recorded
    report.stale += stale
    report.pushed += pushed
    report.already_pushed += already
    report.missed += missed
    if missed and any(group.missed >= MISSED_COUNT_CAP for group in chunk):
        report.missed_capped = True  # that schedule's count stopped at the cap
    report.skipped += skipped
    report.new_schedules += new
    if not pushed:
        return
    lag_ms = report.lag_s * 1000
    at = 0
    for group in chunk:
        n = len(group.ticks)
        mine = flags[at:at + n]
        at += n
        if "1" not in mine:
            continue
        report.pushed_runs.append((group.name, group.queue, group.ticks, group.releases, mine))
        for tick, release, flag in zip(group.ticks, group.releases, mine, strict=True):
            if flag == "1" and not release and now_ms - tick > lag_ms:
                lag_ms = now_ms - tick
    report.lag_s = lag_ms / 1000


def push(client: redis.Redis, namespace: str, plan: Plan, config: Config, report: Report,
         deadline: float, lua: scripts.Caller = scripts.SCRIPTS, *, due_key: str | None = None,
         sent: int = 0, history: int = DEFAULT_HISTORY) -> int:
    """Carry out a plan, one atomic script call per chunk, filling in the report; each
    schedule's history keeps its last `history` pushes.

    `sent` is the job bytes this invocation already sent (the 64 MiB bound counts them all);
    returns it with this plan's added, or -1 once the bound stopped the plan.
    """
    due_key = due_key or keys.due(namespace)
    for chunk in plan.chunks():
        size = sum(len(payload) for group in chunk for payload in group.payloads)
        if sent and sent + size > MAX_BYTES_PER_INVOCATION:
            report.warnings.append(
                f"this invocation sent {sent:,} bytes of jobs, the most one may; the next "
                "invocation pushes the rest (within the missed-jobs window)")
            return -1
        sent += size
        if time.monotonic() > deadline:
            raise DeadlineError(
                f"invocation deadline passed after {report.chunks} push calls "
                f"({report.pushed} jobs pushed); the next invocation pushes the rest")
        try:
            counts, flags = push_call(client, namespace, due_key, plan.now_ms, chunk, history,
                                      lua)
        except KiqbeatError as exc:
            if not report.pushed:
                raise
            raise type(exc)(f"{exc}; before this, {report.pushed} jobs were pushed by "
                            f"{report.chunks} earlier calls, with their watermarks") from exc
        settle(report, chunk, counts, flags, plan.now_ms)
        if config.wait_replicas and counts[0]:
            wait_for_replicas(client, config, counts[0], report)
    return sent


def push_backfill(client: redis.Redis, namespace: str, pieces: Sequence[Piece],
                  history: int, lua: scripts.Caller = scripts.SCRIPTS) -> tuple[int, int, int, str]:
    """One atomic backfill call: (pushed, already, stale, flags), flags one "1"/"0" per job
    in order."""
    queues = frames.Queues()
    body = frames.backfill_request(pieces, queues)
    names = queues.names
    script_keys = [keys.missed(namespace), keys.definitions(namespace), keys.history(namespace),
                   keys.queues(namespace), *(keys.queue(namespace, q) for q in names)]
    with redis_errors(client, "backfilling missed ticks"):
        pushed, already, stale, flags = lua.call(
            scripts.BACKFILL, client, script_keys, [history, len(names), *names, body])
    return int(pushed), int(already), int(stale), reply_text(flags)


def push_manual(client: redis.Redis, namespace: str, name: str, sha: str, queue: str,
                jid: str, at_ms: int, job: str, history: int,
                lua: scripts.Caller = scripts.SCRIPTS) -> bool:
    """Push one manual job (trigger.lua), once even when the call is re-sent; False when
    the definition changed meanwhile."""
    script_keys = [keys.definitions(namespace), keys.history(namespace), keys.queues(namespace),
                   keys.queue(namespace, queue), keys.manual(namespace)]
    with redis_errors(client, f"running schedule {shown(name)} now"):
        done = lua.call(scripts.TRIGGER, client, script_keys,
                        frames.manual_run(name, sha, history, queue, jid, at_ms, job))
    return int(done) > 0
