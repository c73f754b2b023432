"""The harness can fail: it counts duplicates, misses, early and invented jobs it is shown."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import redis

from kiqbeat.core.schedule import Config
from kiqbeat.engine import run
from kiqbeat.redis import keys
from kiqbeat.store import Store
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import config
from tests.support.invariants import (
    Outcome,
    assert_bounded_state,
    assert_clean,
    check,
    cross_shard,
    recorded_ticks,
    stored_schedules,
)

CFG = config("schedules:\n  m: {cron: '* * * * *', class: M}\n")


def test_check_counts_every_kind_of_violation(client: redis.Redis) -> None:
    """A copied job, a removed one, an early one and a foreign one are each counted."""
    start = minute_floor(redis_now(client)) - timedelta(minutes=10)
    for minute in range(0, 11):
        run(client, CFG, now=start + timedelta(minutes=minute))
    clean = check(client, CFG, after=start, until=start + timedelta(minutes=10), scenario="t",
                  runs=11)
    assert (clean.expected, clean.pushed) == (10, 10)
    assert_clean(clean)
    jobs = [json.loads(raw) for raw in client.lrange("queue:default", 0, -1)]
    early = jobs[2] | {"enqueued_at": jobs[2]["enqueued_at"] - 61}
    forged = [jobs[0], jobs[0], early, *jobs[3:]]  # a duplicate, jobs[1] missing, an early one
    client.delete("queue:default")
    client.rpush("queue:default", *(json.dumps(job) for job in forged))
    client.lpush("queue:other", json.dumps(jobs[3] | {"jid": "0" * 24}))  # an invented one
    dirty = check(client, CFG, after=start, until=start + timedelta(minutes=10), scenario="t",
                  runs=11)
    assert (dirty.duplicates, dirty.missed, dirty.early, dirty.unexpected) == (1, 1, 1, 1)
    with pytest.raises(AssertionError, match="duplicates=1, missed=1, early=1, unexpected=1"):
        assert_clean(dirty)


def test_cross_shard_names_each_schedule_pushed_by_another_shards_invocations() -> None:
    """By CRC-32 of the name, of 3 shards: minutely is shard 0's, every_second shard 1's,
    also_every_second shard 2's."""
    pushed = {(0, 3): ["minutely", "every_second", "every_second"], (2, 3): ["also_every_second"],
              (0, 1): ["every_second"]}
    assert cross_shard(pushed) == ["shard 0/3 pushed 'every_second' of shard 1"]
    assert cross_shard({(1, 3): ["every_second"], (2, 3): []}) == []
    with pytest.raises(AssertionError, match="cross_shard=1"):
        assert_clean(Outcome(scenario="t", runs=1, expected=0, pushed=0, duplicates=0,
                             missed=0, early=0, cross_shard=1))


def test_bounded_state_refuses_an_index_entry_in_the_wrong_shard(client: redis.Redis) -> None:
    """A sharded store passes as written; an entry moved to another shard's index, or an
    index of another shard count, fails it."""
    store = Store(client, shards=3)
    for name in ("minutely", "every_second", "also_every_second"):
        store.add(name, {"cron": "* * * * *", "class": "M"})
    assert_bounded_state(client, 3, shards=3)
    with pytest.raises(AssertionError, match="not a due index of 1 shard"):
        assert_bounded_state(client, 3)
    client.zadd(keys.due("", (0, 3)), {"every_second": 0})
    with pytest.raises(AssertionError, match=r"holds other shards' schedules: \['every_second'\]"):
        assert_bounded_state(client, 3, shards=3)


def test_stored_schedules_are_the_expected_ticks_of_a_store_without_a_document(
    client: redis.Redis,
) -> None:
    """Schedules written through the API, run without a document: counted as a document's
    are (a removed job is missed); an invalid definition expects nothing."""
    Store(client).add("m", {"cron": "* * * * *", "class": "M"})
    client.hset(keys.definitions(""), "broken", b'{"cron": "61 * * * *", "class": "B"}')
    start = minute_floor(redis_now(client)) - timedelta(minutes=10)
    for minute in range(0, 11):
        run(client, Config(schedules=()), now=start + timedelta(minutes=minute))
    schedules = stored_schedules(client)
    assert [s.name for s in schedules.schedules] == ["m"]
    clean = check(client, schedules, after=start, until=start + timedelta(minutes=10),
                  scenario="t", runs=11)
    assert (clean.expected, clean.pushed) == (10, 10)
    assert_clean(clean)
    client.rpop("queue:default")
    dirty = check(client, schedules, after=start, until=start + timedelta(minutes=10),
                  scenario="t", runs=11)
    assert (dirty.expected, dirty.pushed, dirty.missed) == (10, 9, 1)


def test_check_counts_backfilled_ticks_and_those_still_recorded(client: redis.Redis) -> None:
    """Ticks passed over by an outage longer than the window are recorded; before the
    backfill they are missed and still recorded, after it backfilled; a backfilled tick
    pushed twice is a duplicate, and a tick put back in the record is counted."""
    start = minute_floor(redis_now(client)) - timedelta(hours=4) + timedelta(seconds=5)
    end = start + timedelta(hours=3)
    run(client, CFG, now=start)
    run(client, CFG, now=end)
    owed = recorded_ticks(client, CFG)
    assert len(owed) == 120 and all(tick <= end - timedelta(hours=1) for _, tick in owed.values())
    before = check(client, CFG, after=start, until=end, scenario="t", runs=2, backfilled=owed)
    assert (before.expected, before.missed, before.backfilled, before.still_recorded) == (
        180, 120, 0, 120)
    with pytest.raises(AssertionError, match="missed=120, still_recorded=120"):
        assert_clean(before)
    assert Store(client).backfill().pushed == 120
    after = check(client, CFG, after=start, until=end, scenario="t", runs=2, backfilled=owed)
    assert (after.pushed, after.backfilled, after.still_recorded) == (180, 120, 0)
    assert_clean(after)
    assert recorded_ticks(client, CFG) == {}
    Store(client).trigger("m")  # a manual run stands for no tick: counted as such
    manual = check(client, CFG, after=start, until=end, scenario="t", runs=2, backfilled=owed)
    assert (manual.manual, manual.unexpected) == (1, 0)
    assert_clean(manual)
    copy = next(raw for raw in client.lrange("queue:default", 0, -1)
                if json.loads(raw)["jid"] in owed)
    client.lpush("queue:default", copy)
    record = f"{int(start.timestamp() * 1000)} {int(start.timestamp() * 1000) + 60_000} window"
    client.hset(keys.missed(""), "m", record)
    dirty = check(client, CFG, after=start, until=end, scenario="t", runs=2, backfilled=owed)
    assert (dirty.duplicates, dirty.still_recorded) == (1, 1)
