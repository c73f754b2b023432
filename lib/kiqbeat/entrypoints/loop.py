"""`kiqbeat run`: invoke at every minute (or second) boundary until told to stop.

The loop only paces invocations; which ticks are due still comes from the Redis clock
and the watermarks, so a late, doubled or skipped wake-up is harmless. It wakes at the
boundary *by the Redis clock* (the offset to the host clock is learnt from each report),
so a host clock running ahead does not make every tick a period late. With `--json` each
invocation's report is one JSON line on stdout, for a log pipeline (the Kubernetes
Deployment's logs).
"""

from __future__ import annotations

import json
import math
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from kiqbeat.core.report import Report

# Wake this long after the boundary, so the Redis clock has surely passed it.
WAKE_AFTER_BOUNDARY_S = 0.01


def seconds_to_boundary(redis_now_s: float, period_s: float) -> float:
    """Seconds from `redis_now_s` to just after the next multiple of `period_s`."""
    boundary = math.floor(redis_now_s / period_s) * period_s + period_s
    return boundary - redis_now_s + WAKE_AFTER_BOUNDARY_S


def print_report(report: Report, as_json: bool, *, jobs: bool = False,
                 quiet: bool = True) -> None:
    """Print what an invocation did on stdout: with `as_json`, its report (warnings included)
    as one compact JSON line for every invocation, a log line to parse, with each pushed job
    listed if `jobs`; else the summary line (when `quiet`, only if it pushed, missed or met
    new schedules), the warnings being the caller's to print on stderr."""
    if as_json:
        document = report.as_dict()
        if jobs:
            document["jobs"] = [{"schedule": j.schedule, "tick": j.tick.isoformat(),
                                 "jid": j.jid, "queue": j.queue} for j in report.jobs]
        print(json.dumps(document, separators=(",", ":")), flush=True)
    elif not quiet or report.pushed or report.missed or report.new_schedules:
        print(report.summary(), flush=True)


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT: the loop finishes its invocation and returns."""
    stop = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop


def run_loop(
    invoke: Callable[[], Report | None],
    period_s: Callable[[], float],
    stop: threading.Event,
) -> None:
    """Call `invoke` at each period boundary until `stop` is set.

    `invoke` returns the report, or None when the invocation failed (it logs why); a
    failed invocation is retried at the next boundary, which catches up what it missed.
    """
    offset_s = 0.0  # Redis clock minus host clock, as last seen
    while not stop.is_set():
        started = time.time()  # the invocation reads the Redis clock right away
        report = invoke()
        if report is not None:
            offset_s = report.now.timestamp() - started
        stop.wait(seconds_to_boundary(time.time() + offset_s, period_s()))
