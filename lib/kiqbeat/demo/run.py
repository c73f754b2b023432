"""`kiqbeat demo`: a private Redis, the embedded example schedule, two copies racing.

It shows the promise in a few seconds: two independent copies invoke every second
against the same Redis, each tick is pushed by exactly one of them, and at the end the
queues hold each tick once.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from importlib.resources import files
from typing import Any

from kiqbeat.core.report import Report
from kiqbeat.demo.server import RedisServer
from kiqbeat.document import load_config_text
from kiqbeat.engine import run
from kiqbeat.entrypoints.loop import run_loop
from kiqbeat.errors import KiqbeatError
from kiqbeat.redis import keys
from kiqbeat.redis.connection import connect

EXAMPLE = files("kiqbeat.demo").joinpath("example.yaml")


def demo(seconds: float, copies: int = 2, out: Callable[[str], None] = print) -> int:
    """Run the example schedule for `seconds` with `copies` racing invokers; 0 if all was once."""
    config = load_config_text(EXAMPLE.read_text(), source="embedded example.yaml")
    stop = threading.Event()
    lock = threading.Lock()
    with RedisServer() as server:
        out(f"private redis-server on {server.url}; {len(config.schedules)} schedules "
            f"from {EXAMPLE.name}; {copies} copies invoking every second for {seconds:.0f} s")
        for schedule in config.schedules:
            out(f"  {schedule.name}: {schedule.timing} -> {schedule.job_class} "
                f"on {schedule.queue!r}")

        def copy(number: int) -> None:
            client = connect(server.url)

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

            run_loop(invoke, lambda: 1.0, stop)
            client.close()

        threads = [threading.Thread(target=copy, args=(n + 1,)) for n in range(copies)]
        for thread in threads:
            thread.start()
        with contextlib.suppress(KeyboardInterrupt):
            time.sleep(seconds)
        stop.set()
        for thread in threads:
            thread.join()

        client = connect(server.url)
        payloads: list[Any] = []
        for queue in sorted(client.smembers(keys.queues(config.namespace))):
            name = queue.decode() if isinstance(queue, bytes) else queue
            payloads += client.lrange(keys.queue(config.namespace, name), 0, -1)
        payloads += client.zrange(keys.schedule(config.namespace), 0, -1)
        client.close()
    jids = [json.loads(raw)["jid"] for raw in payloads]
    unique = len(set(jids))
    out(f"done: {len(jids)} jobs in Redis, {unique} distinct, {len(jids) - unique} duplicates")
    return 0 if unique == len(jids) else 1
