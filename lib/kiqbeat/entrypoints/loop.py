"""`kiqbeat run`: invoke at every minute boundary, and whenever the store next comes due
before it, until told to stop.

Each invocation's report says when the due index next comes due (`next_due_ms`: its lowest
entry above the invocation's now, and the entries its pushes moved); the loop invokes again
just after the earlier of that instant and the next minute boundary, never twice within one
second. So a store's sub-minute schedules (`*/30 * * * * *`), whoever wrote them — a document,
the API, another language — are pushed within about a second of their instant, and a store
of minutely schedules costs one invocation a minute. This reads nothing more: the instant
comes back with the first round trip's due read, so an invocation with nothing due is still
one round trip. A schedule written while the loop sleeps (index entry "plan me") is planned
at the next wake-up, at the latest the next minute boundary.

The loop only paces invocations; which ticks are due still comes from the Redis clock
and the watermarks, so a late, doubled or skipped wake-up is harmless. It wakes *by the
Redis clock* (the offset to the host clock is learnt from each report), so a host clock
running ahead does not make every tick late. With `--json` each invocation's report is one
JSON line on stdout, for a log pipeline (the Kubernetes Deployment's logs).
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from kiqbeat.core.report import Report

# Wake this long after the boundary, so the Redis clock has surely passed it.
WAKE_AFTER_BOUNDARY_S = 0.01
# The loop's slowest and fastest cadences: every minute boundary at the latest (the trigger
# kiqbeat is built for), and at most once a second boundary (cron's finest tick), so that
# index entries still due after an invocation (left for the next one) are no hot loop.
MINUTE_S = 60.0
SECOND_S = 1.0


def seconds_to_boundary(redis_now_s: float, period_s: float) -> float:
    """Seconds from `redis_now_s` to just after the next multiple of `period_s`."""
    boundary = math.floor(redis_now_s / period_s) * period_s + period_s
    return boundary - redis_now_s + WAKE_AFTER_BOUNDARY_S


def seconds_to_wake(redis_now_s: float, next_due_s: float | None) -> float:
    """Seconds from `redis_now_s` to the next invocation: just after the earlier of the next
    minute boundary and `next_due_s` (when the store next comes due; None: nothing more is
    indexed), and not before the next second boundary."""
    minute = seconds_to_boundary(redis_now_s, MINUTE_S)
    if next_due_s is None:
        return minute
    due = next_due_s - redis_now_s + WAKE_AFTER_BOUNDARY_S
    return max(seconds_to_boundary(redis_now_s, SECOND_S), min(minute, due))


def print_report(report: Report, as_json: bool, *, jobs: bool = False,
                 quiet: bool = True) -> None:
    """Print what an invocation did on stdout: with `as_json`, its report (warnings included)
    as one compact JSON line for every invocation, a log line to parse, with each pushed job
    listed if `jobs`; else its warnings on stderr (each new one once; an invocation's own
    each time) and the summary line (when `quiet`, only if it pushed, missed or met new
    schedules)."""
    if as_json:
        document = report.as_dict()
        if jobs:
            document["jobs"] = [{"schedule": j.schedule, "tick": j.tick.isoformat(),
                                 "jid": j.jid, "queue": j.queue} for j in report.jobs]
        print(json.dumps(document, separators=(",", ":")), flush=True)
        return
    for warning in report.warnings:
        print(f"kiqbeat: warning: {warning}", file=sys.stderr, flush=True)
    if not quiet or report.pushed or report.missed or report.new_schedules:
        print(report.summary(), flush=True)


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT: the loop finishes its invocation and returns.

    The handler sets it from another thread: Python runs a signal handler in the main thread
    between two steps of whatever it was doing, which may be `stop.wait` holding the event's
    own (non-reentrant) lock; setting it there would wait for that lock forever, and the
    loop would never stop."""
    stop = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=stop.set, name="kiqbeat-stop", daemon=True).start()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop


def run_loop(invoke: Callable[[], Report | None], stop: threading.Event, *,
             every_s: float | None = None) -> None:
    """Call `invoke` when the store next comes due, or at the next minute boundary if that
    is earlier (`seconds_to_wake`), until `stop` is set; with `every_s`, at each boundary
    of that period instead (the demo races its copies each second).

    `invoke` returns the report, or None when the invocation failed (it logs why); a
    failed invocation is retried at the next boundary of the cadence last seen (the next
    second if the store last came due within the minute, else the next minute), and the
    retry catches up what it missed.
    """
    offset_s = 0.0  # Redis clock minus host clock, as last seen
    retry_s = every_s or MINUTE_S
    while not stop.is_set():
        started = time.time()  # the invocation reads the Redis clock right away
        report = invoke()
        if report is not None:
            offset_s = report.now.timestamp() - started
        redis_now_s = time.time() + offset_s
        if report is None or every_s:
            wait_s = seconds_to_boundary(redis_now_s, retry_s)
        else:
            next_due_ms = report.next_due_ms
            wait_s = seconds_to_wake(redis_now_s, None if next_due_ms is None
                                     else next_due_ms / 1000)
            within_minute = wait_s < seconds_to_boundary(redis_now_s, MINUTE_S)
            retry_s = SECOND_S if within_minute else MINUTE_S
        stop.wait(wait_s)
