"""An invocation's due reads (`Engine._push_due`) against a real redis-server.

The promise: an invocation that ends without an error has read every index entry due at
its instant that was in the index when it began (unless others moved or removed entries
meanwhile), has pushed each due tick once, and never loops; entries written meanwhile are
read when its reads reach them (always when no entry was left alone); the next batch's read
runs while Python plans the current one, on the pushes' connection, before their pushes.

Facts are read from Redis: distinct jids in the queues, the due index's scores, MONITOR.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis

from kiqbeat import fire_times
from kiqbeat.core.payload import jid
from kiqbeat.core.plan import to_ms
from kiqbeat.core.schedule import Config
from kiqbeat.engine import Engine
from kiqbeat.errors import DeadlineError
from kiqbeat.redis import scripts
from kiqbeat.redis.definitions import DUE_BATCH
from kiqbeat.store import Store
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import Meddling, pushed_jobs

STORE_ONLY = Config(schedules=())
MINUTELY: dict[str, Any] = {"cron": "* * * * *", "class": "MinuteWorker"}
DUE = "kiqbeat:due"
SCHEDULES = "kiqbeat:schedules"
# Three batches and one entry: the last read holds one.
COUNT = 3 * DUE_BATCH + 1
NAMES = [f"m{n:04d}" for n in range(COUNT)]  # index order, for equal scores


def registered(client: redis.Redis) -> tuple[datetime, datetime]:
    """COUNT minutely schedules registered by an invocation three hours back; the instant
    two minutes later (two ticks due for each)."""
    Store(client).import_definitions((name, MINUTELY) for name in NAMES)
    t0 = minute_floor(redis_now(client)) - timedelta(hours=3) + timedelta(seconds=5)
    Engine(client=client).run(STORE_ONLY, now=t0)
    return t0, t0 + timedelta(minutes=2)


def expected(names: list[str], t0: datetime, until: datetime) -> list[str]:
    return sorted(jid(n, t) for n in names for t in fire_times("* * * * *", after=t0,
                                                               until=until))


def jids(client: redis.Redis) -> list[str]:
    """Every job's jid in Redis, duplicates kept, sorted."""
    return sorted(job["jid"] for job in pushed_jobs(client))


def left_due(client: redis.Redis, until: datetime) -> int:
    """Index entries still due at `until` (not read, or read and left alone)."""
    return int(client.zcount(DUE, "-inf", to_ms(until)))


def meddled(client: redis.Redis, before: Any) -> Engine:
    """An engine whose scripts run after `before(script name)`."""
    engine = Engine(client=client)
    engine.deployment.lua = Meddling(before=before)  # the engine's way of running scripts, hooked
    return engine


@pytest.fixture
def monitored(redis_url: str) -> Iterator[list[dict[str, Any]]]:
    """The commands Redis runs, as MONITOR reports them, until the test ends."""
    seen: list[dict[str, Any]] = []
    watcher = redis.Redis.from_url(redis_url)
    ready = threading.Event()

    def watch() -> None:
        with watcher.monitor() as monitor:
            ready.set()
            for command in monitor.listen():
                if "kiqbeat-test-done" in command["command"]:
                    return
                seen.append(command)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    ready.wait(5)
    time.sleep(0.1)
    yield seen
    redis.Redis.from_url(redis_url).echo("kiqbeat-test-done")
    thread.join(10)
    watcher.close()


def test_the_next_batchs_read_runs_before_this_batchs_pushes_on_their_connection(
    client: redis.Redis, redis_url: str, monitored: list[dict[str, Any]],
) -> None:
    """Fails on an engine that reads each batch only after the pushes of the one before."""
    t0, until = registered(client)
    client.echo("kiqbeat-test-start")
    report = Engine(client=client).run(STORE_ONLY, now=until)
    redis.Redis.from_url(redis_url).echo("kiqbeat-test-done")
    for at, command in enumerate(monitored):  # what ran before this invocation: not its
        if "kiqbeat-test-start" in command["command"]:
            del monitored[:at + 1]
            break
    scripts_run = {scripts.DUE.sha: "due", scripts.PUSH.sha: "push"}
    calls = [(scripts_run[c["command"].split()[1]], c["client_port"]) for c in monitored
             if c["command"].startswith("EVALSHA ")
             and c["command"].split()[1] in scripts_run]
    order = [name for name, _ in calls]
    assert order[:2] == ["due", "due"], order[:6]
    first_push = order.index("push")
    # Every read but the first (its pipeline) and the last (after every push) runs on the
    # connection of the push that follows it.
    for at in range(1, len(calls) - 1):
        if order[at] == "due" and order[at + 1] == "push" and at < first_push + 9:
            assert calls[at][1] == calls[at + 1][1], calls
    assert report.pushed == 2 * COUNT
    assert jids(client) == expected(NAMES, t0, until)


def test_three_batches_and_one_entry_are_all_read_and_each_tick_pushed_once(
    client: redis.Redis,
) -> None:
    t0, until = registered(client)
    engine = Engine(client=client)
    report = engine.run(STORE_ONLY, now=until)
    assert report.schedules == COUNT
    assert left_due(client, until) == 0
    assert jids(client) == expected(NAMES, t0, until)
    again = engine.run(STORE_ONLY, now=until)
    assert (again.schedules, again.pushed) == (0, 0)
    assert jids(client) == expected(NAMES, t0, until)


def test_entries_whose_pushes_are_left_alone_are_pushed_by_the_next_invocation_once(
    client: redis.Redis,
) -> None:
    """The first batch's definitions change (a plain HSET, as another language writes)
    once it is read, before its first push: push.lua leaves those entries alone (stale); the
    invocation reads every other entry, ends, and the next one pushes the first batch once
    with the new definition."""
    t0, until = registered(client)
    changed = NAMES[:DUE_BATCH]
    new = json.dumps({"cron": "* * * * *", "class": "Changed"})
    done: list[str] = []

    def change(name: str) -> None:
        if name == "push" and not done:
            done.append(name)
            client.hset(SCHEDULES, mapping=dict.fromkeys(changed, new))

    first = meddled(client, change).run(STORE_ONLY, now=until)
    assert first.stale == DUE_BATCH
    assert left_due(client, until) == DUE_BATCH  # those left alone, nothing unread
    assert jids(client) == expected(NAMES[DUE_BATCH:], t0, until)
    second = Engine(client=client).run(STORE_ONLY, now=until)
    assert second.pushed == 2 * DUE_BATCH
    assert left_due(client, until) == 0
    assert jids(client) == expected(NAMES, t0, until)
    classes = {job["jid"]: job["class"] for job in pushed_jobs(client)}
    assert {classes[j] for j in expected(changed, t0, until)} == {"Changed"}


def test_entries_written_plan_me_during_an_invocation_are_read_by_it(
    client: redis.Redis,
) -> None:
    """A schedule written (score 0, "plan me") before each of the first six push calls,
    while the next batch's read may be in flight: with no entry left alone, the invocation
    reads them all (the read that ends it starts at the first entry) and ends."""
    t0, until = registered(client)
    store = Store(client)
    written: list[str] = []

    def write(name: str) -> None:
        if name == "push" and len(written) < 6:
            written.append(f"late{len(written)}")
            store.put(written[-1], MINUTELY)

    report = meddled(client, write).run(STORE_ONLY, now=until)
    assert len(written) == 6
    assert report.schedules == COUNT + 6
    assert left_due(client, until) == 0
    assert jids(client) == expected(NAMES, t0, until)


def test_a_deadline_passed_mid_way_pushes_nothing_twice_and_the_next_invocation_goes_on(
    client: redis.Redis,
) -> None:
    """The deadline passes during the second batch's pushes, the third batch's read in
    flight: the invocation stops with an error, and the same engine's next invocation
    pushes the rest, each tick once."""
    t0, until = registered(client)
    calls: list[str] = []

    def slow(name: str) -> None:
        calls.append(name)
        if calls.count("push") == 5:
            time.sleep(1.2)

    engine = meddled(client, slow)
    with pytest.raises(DeadlineError) as stopped:
        engine.run(STORE_ONLY, now=until, deadline_s=1.0)
    pushed = jids(client)
    assert 0 < len(pushed) < 2 * COUNT and len(set(pushed)) == len(pushed)
    said = re.search(r"(\d+) jobs pushed", str(stopped.value))
    assert said is not None and int(said[1]) == len(pushed)  # every reply read: none left
    engine.run(STORE_ONLY, now=until)
    assert left_due(client, until) == 0
    assert jids(client) == expected(NAMES, t0, until)


def recorded_calls(client: redis.Redis) -> list[str]:
    """The scripts an invocation of `registered`'s store calls, in order (the call budget
    and the devices decide how many); the store is emptied again."""
    _, until = registered(client)
    names: list[str] = []
    meddled(client, names.append).run(STORE_ONLY, now=until)
    client.flushdb()
    return names


def first_batch_pushes(client: redis.Redis) -> int:
    """How many push calls the first batch of `registered` makes: the pushes sent before
    the first due read sent after a push."""
    names = recorded_calls(client)
    return names[:names.index("due", names.index("push"))].count("push")


def test_a_deadline_passed_after_a_batchs_last_push_reads_its_reply_before_it_stops(
    client: redis.Redis,
) -> None:
    """The deadline passes while the first batch's last push call is in flight: the
    invocation reads that call's reply before it stops (the error counts what Redis holds;
    no connection is left in use with a reply unread)."""
    last = first_batch_pushes(client)
    t0, until = registered(client)
    engine = Engine(client=client)
    calls: list[str] = []

    def slow_after_last(name: str, pending: Any) -> None:
        calls.append(name)
        if name == "push" and calls.count("push") == last:
            time.sleep(1.2)

    engine.deployment.lua = Meddling(before=lambda name: None, after=slow_after_last)
    with pytest.raises(DeadlineError) as stopped:
        engine.run(STORE_ONLY, now=until, deadline_s=1.0)
    pushed = jids(client)
    said = re.search(r"(\d+) jobs pushed", str(stopped.value))
    assert "push calls" not in str(stopped.value)  # stopped between batches, not in a send
    assert said is not None and int(said[1]) == len(pushed) > 0
    assert not client.connection_pool._in_use_connections  # type: ignore[attr-defined]
    engine.run(STORE_ONLY, now=until)
    assert jids(client) == expected(NAMES, t0, until)


def test_an_error_while_a_push_is_in_flight_leaves_no_connection_in_use(
    client: redis.Redis,
) -> None:
    """Something fails while a push call is in flight (here: right after the last is sent,
    when no early read is in flight beside it): the invocation's error reaches the caller,
    and no pooled connection is left with a reply pending (a warm Lambda would keep one per
    such error); the next invocation pushes the rest, each tick once."""
    last = recorded_calls(client).count("push")  # the last batch's: no early read with it
    t0, until = registered(client)
    engine = Engine(client=client)
    pushes: list[str] = []

    def fail_after_a_push(name: str, pending: Any) -> None:
        pushes.append(name)
        if pushes.count("push") == last:
            raise RuntimeError("a fault after the push was sent")

    engine.deployment.lua = Meddling(before=lambda name: None, after=fail_after_a_push)
    with pytest.raises(RuntimeError, match="a fault after the push was sent"):
        engine.run(STORE_ONLY, now=until)
    assert not client.connection_pool._in_use_connections  # type: ignore[attr-defined]
    Engine(client=client).run(STORE_ONLY, now=until)
    assert jids(client) == expected(NAMES, t0, until)


@pytest.mark.parametrize("before", ["due", "push"])
def test_a_connection_lost_between_a_push_and_the_next_batchs_read_loses_and_repeats_nothing(
    client: redis.Redis, redis_url: str, before: str,
) -> None:
    """Before each early read is sent (or each push: the read in flight then loses its
    reply), Redis closes the invocation's connections: a push whose reply is lost is sent
    again (applied once), a read is made again after the pushes, and every entry is read."""
    t0, until = registered(client)
    killer = redis.Redis.from_url(redis_url)
    kills: list[int] = []

    def cut(name: str) -> None:
        if name == before:
            kills.append(int(killer.client_kill_filter(_type="normal", skipme=True)))

    report = meddled(client, cut).run(STORE_ONLY, now=until)
    killer.close()
    assert any(kills)
    assert report.schedules == COUNT
    assert left_due(client, until) == 0
    assert jids(client) == expected(NAMES, t0, until)


def test_an_invocation_ends_when_entries_written_meanwhile_move_those_it_left_alone_past_its_reads(
    client: redis.Redis,
) -> None:
    """The first batch is left alone (its definitions changed before its first push); once
    a read has met it again, 150 "plan me" entries are written before the next read is
    sent: that read meets only entries met before. The invocation still ends (no read
    after it starts at the same place), having pushed every other entry once; the next
    one pushes the first batch and plans the entries written."""
    t0, until = registered(client)
    new = json.dumps({"cron": "* * * * *", "class": "Changed"})
    late = [f"late{n:03d}" for n in range(DUE_BATCH)]
    calls: list[str] = []

    def meddle(name: str) -> None:
        calls.append(name)
        if name == "push" and calls.count("push") == 1:
            client.hset(SCHEDULES, mapping=dict.fromkeys(NAMES[:DUE_BATCH], new))
        if name == "due" and calls.count("due") == 4:
            Store(client).import_definitions((n, MINUTELY) for n in late)

    meddled(client, meddle).run(STORE_ONLY, now=until, deadline_s=10)
    assert calls.count("due") >= 4
    assert jids(client) == expected(NAMES[DUE_BATCH:], t0, until)
    Engine(client=client).run(STORE_ONLY, now=until)
    assert left_due(client, until) == 0
    assert jids(client) == expected(NAMES, t0, until)
