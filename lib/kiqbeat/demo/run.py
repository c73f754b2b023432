"""`kiqbeat demo`: a private Redis, the embedded example schedule, two copies racing.

It shows the promise in a few seconds: two independent copies invoke every second
against the same Redis, each tick is pushed by exactly one of them, and at the end the
queues hold each tick once.

Every way out stops the private redis-server and removes its directory: the end of the
run, an error, and Ctrl-C, SIGTERM or SIGHUP, which end the race early (the tally is still
printed). Should the demo be SIGKILLed, Linux still stops the server (see RedisServer);
its directory is then left in TMPDIR.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from importlib.resources import files
from types import FrameType
from typing import Any

from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.demo.server import DISABLED_COMMANDS, RedisServer
from kiqbeat.document import load_config_text
from kiqbeat.engine import run
from kiqbeat.entrypoints.loop import run_loop
from kiqbeat.errors import KiqbeatError
from kiqbeat.redis import keys
from kiqbeat.redis.connection import connect, reply_text

EXAMPLE = files("kiqbeat.demo").joinpath("example.yaml")


class _Signalled(BaseException):
    """Raised by _Signals out of the demo's sleep, and nowhere else."""


class _Signals:
    """SIGINT, SIGTERM and SIGHUP, noted instead of acted on, so no cleanup is cut short.

    Their default actions would end the process on the spot, leaving redis-server orphaned
    with its directory, and an exception raised anywhere could cut a `finally` short. So
    the handler only notes the signal, and raises (once) only while the main thread sleeps
    through the race, which ends the race early. Everything else the demo does, stopping the
    server included, is bounded by timeouts and runs to its end.
    """

    def __init__(self) -> None:
        self.received: list[str] = []
        self.interruptible = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signal.Signals(signum).name)
        if self.interruptible:
            self.interruptible = False
            raise _Signalled

    def sleep(self, seconds: float) -> None:
        """Sleep `seconds`, or less if a signal comes (or came)."""
        try:  # the outer try also covers the inner `finally`, before it ends the window
            try:
                self.interruptible = True  # from here a signal raises, or is seen just below
                if not self.received:
                    time.sleep(seconds)
            finally:
                self.interruptible = False
        except _Signalled:
            pass


@contextlib.contextmanager
def _noting_signals() -> Iterator[_Signals]:
    """Handle stop signals with _Signals while inside (only the main thread can)."""
    signals = _Signals()
    if threading.current_thread() is not threading.main_thread():
        yield signals
        return
    names = ("SIGINT", "SIGTERM", "SIGHUP")  # no SIGHUP on Windows
    # One ignored stays ignored: `nohup` ignores SIGHUP, a shell script's `&` SIGINT.
    wanted = [getattr(signal, name) for name in names if hasattr(signal, name)
              and signal.getsignal(getattr(signal, name)) is not signal.SIG_IGN]
    previous = {signum: signal.signal(signum, signals.handle) for signum in wanted}
    try:
        yield signals
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def demo(seconds: float, copies: int = 2, out: Callable[[str], None] = print) -> int:
    """Run the example schedule for `seconds` with `copies` racing invokers; 0 if all was once."""
    config = load_config_text(EXAMPLE.read_text(), source="embedded example.yaml")
    # Signals first: from the moment the server exists, its `with` must run to its end.
    with _noting_signals() as signals, RedisServer(private=True) as server:
        payloads = _race(server, config, seconds, copies, signals, out)
    jids = [json.loads(raw)["jid"] for raw in payloads]
    unique = len(set(jids))
    out(f"done: {len(jids)} jobs in Redis, {unique} distinct, {len(jids) - unique} duplicates")
    return 0 if unique == len(jids) else 1


def _race(
    server: RedisServer, config: Config, seconds: float, copies: int, signals: _Signals,
    out: Callable[[str], None],
) -> list[Any]:
    """Let `copies` invokers race for `seconds` (less if signalled); every job they left."""
    stop = threading.Event()
    lock = threading.Lock()

    def copy(number: int) -> None:
        with connect(server.url) as client:

            def invoke() -> Report | None:
                try:
                    report = run(client, config)
                except KiqbeatError as exc:
                    out(f"copy {number}: {exc}")
                    return None
                with lock:
                    for job in report.jobs:
                        where = f"queue:{job.queue}" if job.queue else "schedule (at its instant)"
                        out(f"{report.now:%H:%M:%S.%f}"[:12] + f"  copy {number} pushed "
                            f"{job.schedule} tick {job.tick:%H:%M:%S} -> {where}  jid {job.jid}")
                return report

            run_loop(invoke, stop, every_s=1.0)

    threads = [threading.Thread(target=copy, args=(n + 1,)) for n in range(copies)]
    try:
        out(f"private redis-server on {server.url}; {len(config.schedules)} schedules "
            f"from {EXAMPLE.name}; {copies} copies invoking every second for {seconds:.0f} s")
        out(f"  (its socket is in a 0700 directory; {', '.join(DISABLED_COMMANDS)} disabled)")
        for schedule in config.schedules:
            out(f"  {schedule.name}: {schedule.timing} -> {schedule.job_class} "
                f"on {schedule.queue!r}")
        for thread in threads:
            thread.start()
        signals.sleep(seconds)
        if signals.received:
            out(f"{signals.received[0]}: stopping early")
    finally:
        stop.set()
        for thread in threads:
            if thread.ident is not None:  # started
                thread.join()

    with connect(server.url) as client:
        payloads: list[Any] = []
        for queue in sorted(client.smembers(keys.queues(config.namespace))):
            payloads += client.lrange(keys.queue(config.namespace, reply_text(queue)), 0, -1)
        payloads += client.zrange(keys.schedule(config.namespace), 0, -1)
    return payloads
