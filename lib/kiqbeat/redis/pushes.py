"""Pushes: every way kiqbeat puts a job into a queue, one atomic script each.

- an invocation's (`Pusher`, push.lua): `core.plan` decides what is due; each chunk pushes
  its jobs, advances the watermarks it covers and moves the schedules' due index entries,
  in one step. `redis.due` reads what is due; the invocation (`kiqbeat.invocation`) strings
  them together;
- a backfill's (`push_backfill`, backfill.lua): recorded missed ticks, pushed while still
  recorded and taken out of the record in the same step;
- a manual run's (`push_manual`, trigger.lua): one job now, once even when re-sent.

`kiqbeat.store` (backfill.py, operations.py) decides what a backfill or a manual run pushes;
this carries it out.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis

from kiqbeat.core.limits import (
    DEFAULT_HISTORY,
    HELD_RECHECK_MS,
    MAX_MISSED_COUNTED,
    MAX_REASON_CHARS,
)
from kiqbeat.core.plan import Group
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.errors import DeadlineError, KiqbeatError, shown, shown_text
from kiqbeat.redis import frames, keys, scripts
from kiqbeat.redis.connection import redis_errors, reply_text

# Job bytes one invocation sends at most: a catch-up of big jobs goes on in the next
# invocations (its watermarks only move with what was pushed), and neither kiqbeat's memory
# nor Redis's takes a surprise of gigabytes in one go.
MAX_BYTES_PER_INVOCATION = 64 * 1024 * 1024


def _push_args(namespace: str, due_key: str, now_ms: int, chunk: Sequence[Group],
               history: int) -> tuple[list[str], list[scripts.Arg]]:
    """push.lua's KEYS and ARGV for one chunk (its header names them)."""
    body, names = frames.push_request(chunk)
    script_keys = [keys.progress_bucket(namespace, 0), keys.queues(namespace),
                   keys.schedule(namespace), due_key, keys.definitions(namespace),
                   keys.rejected(namespace), keys.missed(namespace),
                   keys.runs(namespace), keys.skips(namespace), keys.last_jobs(namespace),
                   keys.held(namespace), *(keys.queue(namespace, q) for q in names)]
    return script_keys, [now_ms, history, len(names), *names, body,
                         keys.running_prefix(namespace)]


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
           now_ms: int, by_reason: str, applied: str, released: Sequence[Any]) -> None:
    """Add one push call's outcome to the report: its counts, split by reason (the script's
    own `by_reason`, and the groups whose mark was `applied`), and which jobs it pushed
    (kept as the groups' lists; `Report.jobs` builds objects only when asked).

    `released` holds the held jobs the call pushed (push.lua: NAME TICK RELEASE QUEUE...).
    They are pushed runs like the others, each ahead of its schedule's own (so the alerts
    arm a deadline for it: `alerts.incidents.decide`), and listed by `Report.jobs`; they do
    not count towards `lag_s`, which measures kiqbeat's delay: a held tick waited on
    purpose, for its previous job to end (DESIGN §8), and its history keeps that wait."""
    pushed, already, missed, skipped, new, stale, recorded = counts
    report.chunks += 1
    report.round_trips += 1
    n_skip, n_limit, n_overlap, recorded_window, n_holding = (int(n) for n in by_reason.split())
    if n_holding:
        # Their index entries say "plan again within HELD_RECHECK_MS" (push.lua): the
        # loop comes back that soon to release the held ticks.
        report.next_due_ms = min(report.next_due_ms or now_ms + HELD_RECHECK_MS,
                                 now_ms + HELD_RECHECK_MS)
    reasons = report.skipped_by_reason
    reasons["skip"] += n_skip
    reasons["max_runs"] += n_limit
    reasons["overlap"] += n_overlap
    for group, mark in zip(chunk, applied, strict=True):
        if mark == "1":
            if group.skipped:
                reasons[group.skip_reason] += group.skipped
            if group.excepted:
                reasons["except"] += group.excepted
                skipped += group.excepted
    report.missed_recorded += recorded_window
    report.skipped_recorded += recorded - recorded_window
    report.stale += stale
    report.pushed += pushed
    report.already_pushed += already
    report.missed += missed
    if missed and any(group.missed >= MAX_MISSED_COUNTED for group in chunk):
        report.missed_capped = True  # that schedule's count stopped at the cap
    report.skipped += skipped
    report.new_schedules += new
    if not pushed:
        return
    for at in range(0, len(released) - 3, 4):
        name, tick, release, queue = released[at:at + 4]
        report.pushed_runs.append((reply_text(name), reply_text(queue), (int(tick),),
                                   (int(release),), "1"))
    lag_ms = report.lag_s * 1000
    at = 0
    for group in chunk:
        n = len(group.ticks)
        mine = flags[at:at + n]
        at += n
        if "1" not in mine:
            continue
        report.pushed_runs.append((group.name, group.queue, group.ticks, group.releases, mine))
        if n == 1:  # a minute's usual group (one tick, pushed): no loop
            if not group.releases[0] and now_ms - group.ticks[0] > lag_ms:
                lag_ms = now_ms - group.ticks[0]
            continue
        for tick, release, flag in zip(group.ticks, group.releases, mine, strict=True):
            if flag == "1" and not release and now_ms - tick > lag_ms:
                lag_ms = now_ms - tick
    report.lag_s = lag_ms / 1000


def set_aside(report: Report, aside: Sequence[bytes | str]) -> None:
    """Warn of each schedule a push call set aside for a life counter it could not count on
    (push.lua: name, reason, name, reason...)."""
    for at in range(0, len(aside) - 1, 2):
        report.set_aside += 1
        report.warnings.append(f"schedule {shown(reply_text(aside[at]))} set aside: "
                               f"{shown_text(reply_text(aside[at + 1]), MAX_REASON_CHARS)}")


class Pusher:
    """Carries out an invocation's plans, one push call (an atomic chunk) at a time, filling
    in the report; each schedule's history keeps its last `history` pushes.

    A call is sent and its reply read only when the next call is ready to go (`send`) or the
    caller must see Redis settled (`wait`): the caller plans and encodes the next call while
    Redis runs this one. One call at most is in flight, so a failed call stops every call
    after it, no two calls of one schedule (the parts of a split catch-up) ever overlap, and
    a later part is sent only once the earlier one is known to be applied. Its calls go on
    one `line` (one connection while replies are pending): a call another caller sends on
    it (the engine's next due read) runs between the calls sent before and after it.
    """

    def __init__(self, client: redis.Redis, namespace: str, config: Config, report: Report,
                 deadline: float, lua: scripts.Caller = scripts.SCRIPTS, *,
                 due_key: str | None = None, history: int = DEFAULT_HISTORY) -> None:
        self.client, self.namespace, self.config = client, namespace, config
        self.report, self.deadline, self.lua, self.history = report, deadline, lua, history
        self.due_key = due_key or keys.due(namespace)
        self.sent = 0  # job bytes this invocation sent (MAX_BYTES_PER_INVOCATION)
        self.stopped = False  # the byte bound stopped the invocation
        # The connection its calls go on, in order: a read sent on it between two calls
        # runs between them (`RedisSide.start_due`).
        self.line = scripts.Line(client)
        self._flight: tuple[scripts.Pending, Sequence[Group], int] | None = None

    def send(self, chunk: Sequence[Group], now_ms: int) -> bool:
        """Send one chunk's call, after reading the reply of the call in flight; False (and
        nothing sent) once the invocation's byte bound is reached."""
        size = sum(len(payload) for group in chunk for payload in group.payloads)
        script_keys, args = _push_args(self.namespace, self.due_key, now_ms, chunk,
                                       self.history)
        self.wait()
        report = self.report
        if self.sent and self.sent + size > MAX_BYTES_PER_INVOCATION:
            report.warnings.append(
                f"this invocation sent {self.sent:,} bytes of jobs, the most one may; the next "
                "invocation pushes the rest (within the missed-jobs window)")
            self.stopped = True
            return False
        if time.monotonic() > self.deadline:
            raise DeadlineError(
                f"invocation deadline passed after {report.chunks} push calls "
                f"({report.pushed} jobs pushed); the next invocation pushes the rest")
        self.sent += size
        with self._errors():
            pending = self.lua.start(scripts.PUSH, self.client, script_keys, args,
                                     line=self.line)
        self._flight = (pending, chunk, now_ms)
        return True

    def wait(self) -> None:
        """Read the reply of the call in flight, if any, into the report."""
        if self._flight is None:
            return
        pending, chunk, now_ms = self._flight
        self._flight = None
        with self._errors():
            reply = pending.result()
        counts = [int(c) for c in reply[:7]]
        settle(self.report, chunk, counts, reply_text(reply[7]), now_ms, reply_text(reply[8]),
               reply_text(reply[9]), reply[11])  # push.lua's reply, as its header names it
        set_aside(self.report, reply[10])
        if self.config.wait_replicas and counts[0]:
            wait_for_replicas(self.client, self.config, counts[0], self.report)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        report = self.report
        try:
            with redis_errors(self.client, "pushing jobs"):
                yield
        except KiqbeatError as exc:
            if not report.pushed:
                raise
            raise type(exc)(f"{exc}; before this, {report.pushed} jobs were pushed by "
                            f"{report.chunks} earlier calls, with their watermarks") from exc


def push_backfill(client: redis.Redis, namespace: str, pieces: Sequence[frames.Piece],
                  history: int, lua: scripts.Caller = scripts.SCRIPTS) -> BackfillCall:
    """One atomic backfill call (backfill.lua)."""
    body, names = frames.backfill_request(pieces)
    script_keys = [keys.missed(namespace), keys.definitions(namespace),
                   keys.progress_bucket(namespace, 0),
                   keys.queues(namespace), keys.runs(namespace), keys.skips(namespace),
                   keys.last_jobs(namespace), keys.schedule(namespace),
                   *(keys.queue(namespace, q) for q in names)]
    with redis_errors(client, "backfilling missed ticks"):
        reply = lua.call(scripts.BACKFILL, client, script_keys,
                         [history, len(names), *names, body, keys.running_prefix(namespace)])
    aside = [reply_text(v) for v in reply[5]]
    return BackfillCall(int(reply[0]), int(reply[1]), int(reply[2]), reply_text(reply[3]),
                        [reply_text(v) for v in reply[4]],
                        list(zip(aside[::2], aside[1::2], strict=True)))


@dataclass(frozen=True)
class BackfillCall:
    """What one backfill call did: jobs pushed, already pushed (or out of the record), left
    alone for a changed definition; flags one "1"/"0" per job in order; the schedules whose
    ticks stay recorded for `overlap: skip`; schedules left alone for a run count that is
    not a number or a progress record that is not one, and why."""

    pushed: int
    already: int
    stale: int
    flags: str
    held: list[str]
    aside: list[tuple[str, str]]


def push_manual(client: redis.Redis, namespace: str, name: str, sha: str, queue: str,
                jid: str, at_ms: int, job: str, history: int,
                lua: scripts.Caller = scripts.SCRIPTS) -> bool:
    """Push one manual job (trigger.lua), once even when the call is re-sent; False when
    the definition changed meanwhile."""
    script_keys = [keys.definitions(namespace), keys.progress_bucket(namespace, 0),
                   keys.queues(namespace),
                   keys.queue(namespace, queue), keys.manual(namespace)]
    with redis_errors(client, f"running schedule {shown(name)} now"):
        done = lua.call(scripts.TRIGGER, client, script_keys,
                        frames.manual_run(name, sha, history, queue, jid, at_ms, job))
    return int(done) > 0
