"""The reference mode (devices.py, KIQBEAT_REFERENCE) against a real redis-server: every
performance device off, the same Redis state, byte for byte.

Two engines, one with its devices on and one in the reference mode, each on its own Redis
database, run the same random sequence from the same start: stores written through the API
and by hand (invalid and oversized definitions among them), pauses, documents changing, and
invocations at instants moving on (`--now`). After every invocation each database holds the
same keys with the same values (every key, read by its type), and both reports name the
same pushed jids. Histories are on (10 pushes): each entry's delay is the push instant by the
Redis clock, which runs on between the two engines' invocations (the test clock is an offset
on TIME, so it cannot stop it), so records are compared with every delay set to 0 — their
watermarks, first-seens, kinds, ticks and jids byte for byte. A write is made once, on the
first database, and copied to the second (its instant then needs no fixing); the
invocations run on each.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from kiqbeat.core.limits import MAX_DEFINITION_BYTES
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.engine import Engine
from kiqbeat.errors import KiqbeatError
from kiqbeat.redis import keys, progress
from kiqbeat.redis.definitions import DUE_BATCH
from kiqbeat.settings import Settings
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import config
from tests.support.history import entries_of, history_bytes
from tests.support.state import state as whole_state

LONG = os.environ.get("KIQBEAT_LONG") == "1"  # the long run: more sequences
NAMES = [f"api{k}" for k in range(5)]
TIMINGS: list[dict[str, Any]] = [
    {"cron": "* * * * *"}, {"cron": "*/5 * * * *"}, {"cron": "0 * * * *"},
    {"cron": "*/10 * * * * *"}, {"every": "7m"}, {"every": "90s"},
    {"cron": "30 4 * * * America/New_York"}, {"at": "AT"},
]
EXTRAS: list[dict[str, Any]] = [
    {}, {"args": [1, "two"]}, {"active_job": True}, {"queue": "low"}, {"catch_up": "latest"},
    {"catch_up": "none"}, {"lookahead": "30s"}, {"max_runs": 2}, {"jitter": "20s"},
    {"alert_after_failures": 2}, {"overlap": "skip"}, {"enabled": False},
]
RAW: list[bytes] = [
    b'{"args":[],"class":"W","cron":"bogus"}', b"not json", b'{"class":"W","every":"0s"}',
    b'{"active_job":true,"args":[3],"class":"W","cron":"* * * * *"}',
    b'{"args":["' + b"x" * MAX_DEFINITION_BYTES + b'"],"class":"W","cron":"* * * * *"}',
]
DOCUMENTS: list[str] = [
    "schedules: {}\n",
    "schedules:\n  doc0: {cron: '* * * * *', class: D}\n",
    "schedules:\n  doc0: {cron: '*/2 * * * *', class: D, args: [1]}\n"
    "  doc1: {every: 5m, class: D, active_job: true}\n",
    "missed_jobs_window: 30m\nschedules:\n  doc1: {every: 5m, class: D, catch_up: latest}\n"
    "  doc2: {cron: '15 * * * *', class: D, lookahead: 1m}\n",
]

definitions = st.builds(lambda t, e, args: {"class": "W", **t, **e, **args},
                        st.sampled_from(TIMINGS), st.sampled_from(EXTRAS),
                        st.sampled_from([{}, {"args": [7]}, {"args": []}]))
steps = st.lists(st.one_of(
    st.tuples(st.just("run"), st.integers(0, 25 * 60)),
    st.tuples(st.just("put"), st.sampled_from(NAMES), definitions),
    st.tuples(st.just("remove"), st.sampled_from(NAMES)),
    st.tuples(st.just("pause"), st.sampled_from(NAMES)),
    st.tuples(st.just("resume"), st.sampled_from(NAMES)),
    st.tuples(st.just("raw"), st.sampled_from(NAMES), st.sampled_from(RAW)),
    st.tuples(st.just("document"), st.sampled_from(range(len(DOCUMENTS)))),
    # Enough schedules for several due batches (DUE_BATCH) and plan slices (PLAN_SLICE): the
    # early read on the push line, and planning a slice at a time, at work.
    st.tuples(st.just("bulk"), st.integers(1, 3 * DUE_BATCH + 20), st.sampled_from(TIMINGS[:6]),
              st.sampled_from(EXTRAS)),
), min_size=1, max_size=14)


def state(client: redis.Redis) -> dict[bytes, Any]:
    """Every key and its value, each progress record's history delays set aside."""
    bucket = keys.progress_bucket("", "").encode()

    def delays_aside(key: bytes, fields: dict[bytes, bytes]) -> dict[bytes, Any]:
        if not key.startswith(bucket):
            return fields
        return {name: without_delays(record) for name, record in fields.items()}

    return whole_state(client, delays_aside)


def without_delays(record: bytes) -> bytes:
    """A progress record with each history entry's delay (the push instant by the running
    Redis clock) set to 0; the rest as it was (docs/store.md "Encodings")."""
    mark, history = progress.decode_record(record)
    entries = entries_of(progress.decode_history("x", history))  # a manual run's jid only
    return progress.encode_record(mark, history_bytes([(k, t, 0, j) for k, t, _, j in entries]))


def copy(source: redis.Redis, target: redis.Redis) -> None:
    """Make `target`'s database a copy of `source`'s."""
    target.flushdb()
    for key in source.scan_iter(count=1000):
        ttl = source.pttl(key)
        target.restore(key, max(ttl, 0), source.dump(key))


def invoke(engine: Engine, cfg: Config, now: datetime) -> Report | str:
    """The invocation's report, or its refusal's message."""
    try:
        return engine.run(cfg, now=now)
    except KiqbeatError as exc:
        return f"{type(exc).__name__}: {exc}"


def same_outcome(normal: Report | str, reference: Report | str) -> None:
    if isinstance(normal, str) or isinstance(reference, str):
        assert normal == reference
        return
    assert sorted(j.jid for j in normal.jobs) == sorted(j.jid for j in reference.jobs)
    for figure in ("pushed", "already_pushed", "missed", "skipped", "set_aside", "schedules",
                   "new_schedules", "stale", "documents_applied"):
        assert getattr(normal, figure) == getattr(reference, figure), figure
    assert normal.warnings == reference.warnings


def write(engine: Engine, raw: redis.Redis, step: tuple[Any, ...], start: datetime) -> None:
    """One write through the store API (or by hand), on the first database."""
    store = engine.store(Config(schedules=()))
    kind, name = step[0], str(step[1])
    try:
        if kind == "bulk":
            store.import_definitions(
                (f"bulk{k}", {"class": "B", "args": [k], **step[2], **step[3]})
                for k in range(step[1]))
        elif kind == "put":
            definition = dict(step[2])
            if definition.get("at") == "AT":
                definition["at"] = (start + timedelta(minutes=37)).isoformat()
            store.put(name, definition, force=True)
        elif kind == "remove":
            store.remove(name, force=True)
        elif kind == "pause":
            store.pause(name)
        elif kind == "resume":
            store.resume(name)
        else:  # by hand, as another language or a typo would: planned at the next read
            raw.hset(keys.definitions(""), name, step[2])
            raw.zadd(keys.due(""), {name: 0})
    except KiqbeatError:
        pass  # refused: nothing written, on either database


def run_both(url: str, sequence: list[tuple[Any, ...]], *, broken: bool = False) -> None:
    """Run `sequence` in both modes, comparing the databases after each invocation."""
    first = redis.Redis.from_url(url)  # database 0 (tests/conftest.py)
    second = redis.Redis.from_url(url.replace("?db=0", "?db=1") if "?db=0" in url
                                  else url.removesuffix("/0") + "/1")
    assert second.connection_pool.connection_kwargs["db"] == 1
    first.flushall()
    normal = Engine(Settings(history=10), client=first)
    reference = Engine(Settings(history=10, reference=True), client=second)
    if broken:  # a device made wrong on purpose: the test must see it
        normal.devices.slices = lambda entries: [  # type: ignore[method-assign]
            entries[first:first + 1] for first in range(0, len(entries), 2)]
    cfg = {"normal": config(DOCUMENTS[0]), "reference": config(DOCUMENTS[0])}
    now = minute_floor(redis_now(first)) - timedelta(hours=6)
    start = now
    try:
        for step in sequence:
            if not broken:
                note(repr(step))  # in Hypothesis' report of a failing sequence
            if step[0] == "run":
                now += timedelta(seconds=step[1])
                same_outcome(invoke(normal, cfg["normal"], now),
                             invoke(reference, cfg["reference"], now))
                assert state(first) == state(second)
            elif step[0] == "document":
                text = DOCUMENTS[step[1]]
                cfg = {"normal": config(text), "reference": config(text)}
            else:
                write(normal, first, step, start)
                copy(first, second)
    finally:
        for client in (first, second):
            client.close()


@pytest.mark.timeout(900)
@settings(max_examples=300 if LONG else 25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(sequence=steps)
def test_the_reference_mode_leaves_the_same_redis_state_as_the_devices(
    redis_url: str, sequence: list[tuple[Any, ...]],
) -> None:
    run_both(redis_url, [*sequence, ("run", 60)])


def test_a_broken_device_is_seen_by_the_comparison(redis_url: str) -> None:
    # Planning in slices made to skip every other entry: the comparison must tell.
    sequence: list[tuple[Any, ...]] = [
        ("put", name, {"class": "W", "cron": "* * * * *"}) for name in NAMES]
    with pytest.raises(AssertionError):
        run_both(redis_url, [*sequence, ("run", 0), ("run", 120)], broken=True)


def test_the_reference_mode_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.load({"KIQBEAT_REFERENCE": "1"}).reference
    assert Engine(Settings.load({"KIQBEAT_REFERENCE": "true"})).devices.reference
    assert not Engine(Settings()).devices.reference
    assert json.dumps(Settings().reference) == "false"
