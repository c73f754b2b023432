"""The decision step and the gauges with values written by hand (issue 27): a deadline score
that is no instant (inf, -inf) is dropped, never an error nor a scrape without an answer; and
a success already in the outcome record (the copy that folded it died before deciding)
keeps `silent` from opening."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import pytest
import redis

from kiqbeat.alerts.gauges import read_watched
from kiqbeat.alerts.incidents import open_incidents
from kiqbeat.core.outcomes import decode_outcomes
from kiqbeat.core.plan import to_ms
from kiqbeat.engine import Engine
from kiqbeat.entrypoints.metrics import InvocationMetrics
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.progress import bucket
from kiqbeat.settings import Settings
from tests.support.engine import config
from tests.support.servers import load_functions

T0 = datetime(2025, 12, 24, 0, 0, tzinfo=UTC)
SILENT = """
schedules:
  nightly: {cron: "* * * * *", class: N, queue: nobody_reads, expect_success_within: 3m}
  other: {cron: "* * * * *", class: O, queue: nobody_reads, expect_success_within: 3m}
"""


def _success_record(tick_ms: int) -> bytes:
    """One succeeded tick, as fold.lua writes it: NEWEST, SUCCESS 1 + SPAN(0) (= 4),
    BEYOND 0, COUNT 1, then HEAD (D' 0, UNIT 3, STATE 1 = 25), ATTEMPT 1, VALUE 1000 ms."""
    return tick_ms.to_bytes(6, "big") + bytes([4, 0, 1, 25, 1, 0xE8, 0x07])


def test_a_recorded_success_whose_decision_was_lost_keeps_silent_shut(
        client: redis.Redis) -> None:
    cfg = config(SILENT)
    engine = Engine(client=client)
    for minute in range(1, 5):
        engine.run(cfg, now=T0 + timedelta(minutes=minute, seconds=5))
    first = to_ms(T0 + timedelta(minutes=2))  # registered at 00:01:05: 00:02 first pushed
    assert client.zscore(keys.deadlines(""), "nightly") == first + 180_000
    record = _success_record(first)
    assert decode_outcomes(record).last_success_ms == first
    # what a fold leaves when its copy dies before the decision: the record, nothing else
    client.hset(keys.outcomes_bucket("", bucket("nightly")), "nightly", record)
    for minute in range(5, 8):
        engine.run(cfg, now=T0 + timedelta(minutes=minute, seconds=5))
    # nightly's 00:02 tick succeeded: no silent for it; other never reported: silent
    assert [(i.name, i.event) for i in open_incidents(client, "")] == [("other", "silent")]


@pytest.mark.parametrize("score", [math.inf, -math.inf])
def test_a_deadline_that_is_no_instant_costs_nothing(client: redis.Redis, score: float) -> None:
    cfg = config(SILENT)
    engine = Engine(client=client)
    for minute in range(1, 3):
        engine.run(cfg, now=T0 + timedelta(minutes=minute, seconds=5))
    client.zadd(keys.deadlines(""), {"nightly": score})
    # both exposition paths answer: the stdlib server's and read_watched (the console's)
    served = InvocationMetrics(where=lambda: (client, ""))
    text = served.exposition()
    assert 'kiqbeat_schedule_incident{event="silent",schedule="other"} 0.0' in text
    watched = {w.name: w for w in read_watched(client, "")}
    assert set(watched) == {"nightly", "other"}
    assert watched["nightly"].deadline_ms is None
    # the decision step drops it and arms a deadline again
    engine.run(cfg, now=T0 + timedelta(minutes=3, seconds=5))
    again = client.zscore(keys.deadlines(""), "nightly")
    assert again is not None and math.isfinite(again)
    assert open_incidents(client, "") == []


def test_the_function_library_keeps_silent_shut_and_folds_past_a_hostile_record(
        client: redis.Redis) -> None:
    """The same two promises through the function library (Redis 7's functions mode)."""
    load_functions(client, scripts.library())
    cfg = config(SILENT)
    engine = Engine(Settings(redis_functions=True), client=client)
    for minute in range(1, 5):
        engine.run(cfg, now=T0 + timedelta(minutes=minute, seconds=5))
    first = to_ms(T0 + timedelta(minutes=2))
    client.hset(keys.outcomes_bucket("", bucket("nightly")), "nightly", _success_record(first))
    # other's record: a 0xFF run where BEYOND is, and a report of its 00:02 tick to fold
    client.hset(keys.outcomes_bucket("", bucket("other")), "other",
                first.to_bytes(6, "big") + b"\x00" + b"\xff" * 150 + bytes([1, 1, 2, 1, 0]))
    client.lpush(keys.outcomes_inbox(""), json.dumps(
        {"s": "other", "t": first, "j": "x", "e": "succeeded", "at": first + 500, "a": 1,
         "d": 1000}))
    for minute in range(5, 8):
        engine.run(cfg, now=T0 + timedelta(minutes=minute, seconds=5))
    assert open_incidents(client, "") == []
    assert decode_outcomes(client.hget(keys.outcomes_bucket("", bucket("other")), "other")
                           ).last_success_ms == first


# deadline.lua's own reader of an incident record, run alone: what the decision step sees.
READ_INCIDENT = """
local open, record = read_incident(KEYS[1], ARGV[1])
return {open and open.e or '', record.t or 0}
"""


@pytest.mark.parametrize("record", [
    b'{"e": null, "t": 5}', b'{"e": 7, "t": 5}', b"[1]", b"not json", b'"silent"',
    b'{"e": "silent", "t": -5}', b'{"e": "paused"}', b'{"e": "silent", "t": 1e300}',
    b'{"e": "failing", "t": 60000, "n": 3}', b'{"e": "", "t": 60000}', b"",
    b'{"e": "late", "t": true}', b'{"e": "late", "t": "1e3"}', b'{"e": "late", "t": " 12 "}',
    b'{"e": "late", "t": "0x10"}', b'{"e": "late", "t": "1_0"}', b'{"e": "late", "t": 90.5}',
    b'{"e": "late", "t": "inf"}', b'{"e": "late", "t": "nan"}', b'{"e": "late", "t": [1]}',
    '{"e": "late", "t": "\u0661\u0662"}'.encode(), '{"e": "late", "t": "\u00a012"}'.encode()])
def test_an_incident_record_written_by_hand_reads_as_the_decision_step_reads_it(
        client: redis.Redis, record: bytes) -> None:
    """The console's open incidents and the gauges read each record as deadline.lua's
    `read_incident` does (not JSON, not an object or an event that is no string: an open
    `failing`; a tick that is no instant: 0), so they show what the decision step acts on."""
    client.hset(keys.incidents(""), "nightly", record)
    client.hset(keys.expectations(""), "nightly", "0" * 40 + " 180000 0 0")
    text = "\n".join([scripts.LIMITS, *((scripts.LUA_FOLDER / f"{part}.lua").read_text()
                                        for part in ("checks", "varints", "outcomes",
                                                     "deadline")), READ_INCIDENT])
    event, tick = client.eval(text, 1, keys.incidents(""), "nightly")
    event = event.decode() if isinstance(event, bytes) else event
    assert [(i.name, i.event, i.tick_ms) for i in open_incidents(client, "")] == (
        [("nightly", event, tick)] if event else [])
    assert [(w.name, w.incident) for w in read_watched(client, "")] == [("nightly", event)]
