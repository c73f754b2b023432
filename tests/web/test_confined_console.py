"""The console never stalls Redis with an oversized definition (issue 26, item 4): its sweep
and its reads copy no value over MAX_DEFINITION_BYTES, not even inside a Lua script, and
Redis answers PING promptly while it runs. Oversized definitions are written as another
language would, with a plain HSET.

What Redis ran is seen with MONITOR (which lists the commands a script runs too): every
command on the definitions hash must be one that returns no value (HSTRLEN, HEXISTS, HLEN,
HSCAN ... NOVALUES) or one that reads only names whose definitions are within the limit.
"""

from __future__ import annotations

import json
import statistics
import threading
import time

import redis

from kiqbeat.core.limits import MAX_DEFINITION_BYTES
from kiqbeat.redis import keys
from kiqbeat.store import Store
from kiqbeat.web.names import Sweep
from tests.support.console import Start

BIG_BYTES = 4 * 1024 * 1024  # a few MB shows it: a read of one would be 64x the limit
BIG = [f"big-{i}" for i in range(6)]
SMALL = {"cron": "*/5 * * * *", "class": "DigestWorker", "args": [1]}
NO_VALUE = {"HSTRLEN", "HEXISTS", "HLEN", "TYPE", "EXISTS", "ZSCAN", "ZADD", "ZREM", "HDEL"}


def _write_big(client: redis.Redis) -> None:
    filler = "x" * BIG_BYTES
    for name in BIG:
        client.hset(keys.definitions(""), name, json.dumps(
            {**SMALL, "args": [filler]}))
        client.zadd(keys.due(""), {name: 0})  # the store's protocol: "plan me"


def _commands_during(url: str, work: threading.Thread) -> list[list[str]]:
    """The commands Redis ran (scripts' included) while `work` ran."""
    seen: list[list[str]] = []
    watcher = redis.Redis.from_url(url)
    with watcher.monitor() as monitor:
        work.start()
        while work.is_alive():
            try:
                entry = monitor.next_command()
            except (redis.ConnectionError, ValueError):
                break
            seen.append(entry["command"].split(" "))
            if entry["command"].startswith("ECHO monitor-end"):
                break
    work.join()
    watcher.close()
    return seen


def _definition_reads(commands: list[list[str]]) -> list[list[str]]:
    """Commands on the definitions hash that could return a value of an oversized one."""
    bad = []
    for command in commands:
        if len(command) < 2 or command[1] != keys.definitions(""):
            continue
        verb = command[0].upper()
        if verb in NO_VALUE or (verb == "HSCAN" and "NOVALUES" in
                                (c.upper() for c in command)):
            continue
        if verb in ("HGET", "HMGET") and not set(command[2:]) & set(BIG):
            continue
        bad.append(command[:3] + (["..."] if len(command) > 3 else []))
    return bad


def test_the_sweep_reads_no_oversized_definition_even_inside_redis(
    redis_url: str, store: Store
) -> None:
    store.put("small", SMALL)
    client = redis.Redis.from_url(redis_url)
    _write_big(client)

    def sweep_one_pass() -> None:
        with redis.Redis.from_url(redis_url) as own:
            sweep = Sweep(own, "")
            while not sweep.step():
                pass
            own.echo("monitor-end")

    commands = _commands_during(redis_url, threading.Thread(target=sweep_one_pass))
    assert _definition_reads(commands) == []
    # The sweep did its job: every stored name indexed, the big ones counted, set aside.
    indexed = {n.decode() for n in client.zrange(keys.names(""), 0, -1)}
    assert indexed == {"small", *BIG}
    client.close()


def test_the_consoles_pages_read_no_oversized_definition(
    start_console: Start, redis_url: str, store: Store
) -> None:
    store.put("small", SMALL)
    client = redis.Redis.from_url(redis_url)
    _write_big(client)
    served = start_console(background=False)
    answers: list[int] = []

    def browse() -> None:
        with served.browser() as browser, served.api() as api:
            for path in ("/", "/schedules", "/schedules?prefix=big", "/schedules?state=active",
                         "/schedules?queue=default", "/schedule?name=big-0",
                         "/edit?name=small"):
                answers.append(browser.get(path).status_code)
            for path in ("/api/v1/schedules", "/api/v1/schedules?state=paused",
                         "/api/v1/schedules/big-1", "/api/v1/status", "/metrics"):
                answers.append(api.get(path).status_code)
        with redis.Redis.from_url(redis_url) as own:
            own.echo("monitor-end")

    commands = _commands_during(redis_url, threading.Thread(target=browse))
    assert answers == [200] * len(answers)
    assert _definition_reads(commands) == []
    client.close()


def test_redis_answers_ping_promptly_while_the_console_sweeps_oversized_definitions(
    start_console: Start, redis_url: str, store: Store
) -> None:
    """A measurement with a generous bound (the machine is shared): PING round trips while
    a console sweeps and serves a store of oversized definitions."""
    store.put("small", SMALL)
    with redis.Redis.from_url(redis_url) as client:
        _write_big(client)
    served = start_console()  # its sweep thread runs
    stop, pings = threading.Event(), []

    def ping() -> None:
        with redis.Redis.from_url(redis_url) as own:
            while not stop.is_set():
                began = time.perf_counter()
                own.ping()
                pings.append(time.perf_counter() - began)
                time.sleep(0.005)

    pinger = threading.Thread(target=ping)
    pinger.start()
    try:
        with served.browser() as browser:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                assert browser.get("/schedules").status_code == 200
                assert browser.get("/").status_code == 200
    finally:
        stop.set()
        pinger.join()
    print(f"PING while the console ran: {len(pings)} pings, median "
          f"{statistics.median(pings) * 1000:.2f} ms, max {max(pings) * 1000:.1f} ms")
    assert len(pings) > 50 and max(pings) < 1.0
    assert MAX_DEFINITION_BYTES < BIG_BYTES
