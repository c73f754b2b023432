"""The console never stalls Redis with an oversized definition (issue 26, item 4): its index
build and its reads copy no value over MAX_DEFINITION_BYTES, not even inside a Lua script, and
Redis answers PING promptly while it runs. Oversized definitions are written as another
language would, with a plain HSET.

What Redis ran is seen with MONITOR (which lists the commands a script runs too): every
command on the definitions hash must be one that returns no value (HSTRLEN, HEXISTS, HLEN,
HKEYS, HSCAN ... NOVALUES) or one that reads only names whose definitions are within the
limit. And the console's list reads no definition but those of the rows it returns (the name
index the write script keeps holds what it filters by: issue 28).
"""

from __future__ import annotations

import json
import statistics
import threading
import time

import redis

from kiqbeat.core.limits import MAX_DEFINITION_BYTES
from kiqbeat.redis import keys
from kiqbeat.redis.names import build
from kiqbeat.store import Store
from tests.support.console import Start
from tests.support.name_index import indexed

BIG_BYTES = 4 * 1024 * 1024  # a few MB shows it: a read of one would be 64x the limit
BIG = [f"big-{i}" for i in range(6)]
SMALL = {"cron": "*/5 * * * *", "class": "DigestWorker", "args": [1]}
NO_VALUE = {"HSTRLEN", "HEXISTS", "HLEN", "HKEYS", "TYPE", "EXISTS", "ZSCAN", "ZADD", "ZREM",
            "HDEL"}


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


def test_the_index_build_reads_no_oversized_definition_even_inside_redis(
    redis_url: str, store: Store
) -> None:
    store.put("small", SMALL)
    client = redis.Redis.from_url(redis_url)
    _write_big(client)

    def build_once() -> None:
        with redis.Redis.from_url(redis_url) as own:
            build(own, "")
            own.echo("monitor-end")

    commands = _commands_during(redis_url, threading.Thread(target=build_once))
    assert _definition_reads(commands) == []
    # The build did its job: every stored name indexed, the big ones without facets read.
    assert set(indexed(client)) == {b"small", *(n.encode() for n in BIG)}
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


def test_redis_answers_ping_promptly_while_the_console_indexes_oversized_definitions(
    start_console: Start, redis_url: str, store: Store
) -> None:
    """A measurement with a generous bound (the machine is shared): PING round trips while
    a console builds its name index and serves a store of oversized definitions."""
    store.put("small", SMALL)
    with redis.Redis.from_url(redis_url) as client:
        _write_big(client)
    served = start_console()  # its thread runs (the index build, the history walk)
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


def test_the_consoles_list_reads_only_the_definitions_of_the_rows_it_returns(
    start_console: Start, redis_url: str, store: Store
) -> None:
    """Filtered or not, a list answers from the name index the write script keeps: MONITOR
    shows no command on the definitions hash but the reads of the rows it returned."""
    for n in range(300):
        store.put(f"s{n:03}", {**SMALL, "queue": "mail" if n % 7 == 0 else "default",
                               "enabled": n % 5 != 0})
    served = start_console(background=False)
    shown: list[str] = []

    def browse() -> None:
        with served.api() as api:
            for params in ({"limit": 5}, {"queue": "mail", "limit": 5},
                           {"state": "paused", "limit": 5}, {"state": "active", "prefix": "s2"},
                           {"source": "api", "limit": 3}):
                answer = api.get("/api/v1/schedules", params=params)
                assert answer.status_code == 200, answer.text
                shown.extend(r["name"] for r in answer.json()["items"])
        with redis.Redis.from_url(redis_url) as own:
            own.echo("monitor-end")

    commands = _commands_during(redis_url, threading.Thread(target=browse))
    on_definitions = [c for c in commands if len(c) > 1 and c[1] == keys.definitions("")
                      and c[0].upper() not in ("TYPE", "EXISTS", "HEXISTS")]  # no value read
    read = {n for c in on_definitions for n in c[2:]}
    assert {c[0].upper() for c in on_definitions} <= {"HSTRLEN", "HMGET", "HGET"}
    assert read == set(shown), "the list read definitions of rows it did not return"
    assert len(shown) == 5 + 5 + 5 + 50 + 3  # a page of 50 of the 80 active s2xx
