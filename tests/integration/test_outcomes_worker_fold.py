"""A worker folds its own report (docs/store.md, "The worker protocol"): by the call kiqbeat
publishes in `kiqbeat:outcomes:script`, the same fold.lua the invocations run on the inbox,
against a real Redis. The worker here is plain redis-py commands, as the protocol says; the
real Sidekiq middleware's runs are in tests/compat/test_outcomes.py."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kiqbeat.core.limits import CHANGED_PER_INVOCATION
from kiqbeat.core.payload import jid, jid_ms
from kiqbeat.core.plan import to_ms
from kiqbeat.outcomes import fold_outcomes
from kiqbeat.outcomes.records import fold_call, publish_fold, read_health
from kiqbeat.redis import keys, scripts
from kiqbeat.redis.progress import bucket
from tests.support.alerts import FAILING, SILENT, T0, engine, events
from tests.support.engine import config

MIN = 60_000
T0_MS = 1_790_000_000_000 - 1_790_000_000_000 % MIN
NAMES = ("plain", "short", "alerting")
DEFINITIONS = {"plain": {}, "short": {"history": 3},
               "alerting": {"alert_after_failures": 2, "history": 4}}


def worker_report(client: redis.Redis, ns: str, entry: dict[str, Any]) -> bool:
    """What Kiqbeat::Middleware does with one report: fold it by the published call, or
    LPUSH it into the inbox when there is none or it fails. Whether it was folded."""
    inbox, text = keys.outcomes_inbox(ns), json.dumps(entry, separators=(",", ":"))
    published = client.get(keys.outcomes_script(ns))
    if published:
        protocol, verb, target, history = published.decode().split(" ")
        assert protocol == "1"
        try:
            client.execute_command(verb, target, 1, inbox, 0, history, text)
            return True
        except redis.ResponseError:
            pass
    client.lpush(inbox, text)
    return False


def first_report(client: redis.Redis) -> None:
    """A worker's first report (no call published yet) goes to the inbox: the invocation that
    finds it publishes the call. Garbled here: dropped by that fold."""
    client.lpush(keys.outcomes_inbox(""), "{}")


def define(client: redis.Redis, ns: str) -> None:
    for name, fields in DEFINITIONS.items():
        client.hset(keys.definitions(ns), name, json.dumps(
            {"class": "W", "cron": "* * * * *", **fields}))


reports = st.lists(st.fixed_dictionaries({
    "s": st.sampled_from(NAMES),
    "t": st.integers(0, 6).map(lambda k: T0_MS + k * MIN),
    "e": st.sampled_from(["started", "succeeded", "failed", "expired"]),
    "a": st.integers(1, 3),
    "d": st.integers(0, 5000),
}), min_size=1, max_size=40)
namespaces = itertools.count()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reports)
# Found by this property: a retry's start grows the streak as a failed end does (the changed
# names judged after each report, not after a slice); a success after an expired end that
# replaced a failure takes the last error away on either path.
@example([{"s": "alerting", "t": T0_MS + MIN, "e": "failed", "a": 1, "d": 0},
          {"s": "alerting", "t": T0_MS + 2 * MIN, "e": "started", "a": 2, "d": 0}])
@example([{"s": "plain", "t": T0_MS + 2 * MIN, "e": e, "a": 1, "d": 0}
          for e in ("failed", "expired", "succeeded")])
def test_a_workers_own_fold_makes_the_records_the_inbox_fold_makes(
        client: redis.Redis, sequence: list[dict[str, Any]]) -> None:
    """Reports in any order (a retry's start before the first attempt's failure, an old
    tick after newer ones), folded one call each as workers do, or pushed into the inbox
    and folded by an invocation in slices: the same records, last errors and changed
    names."""
    n = next(namespaces)
    own, inbox = f"own{n}:", f"inbox{n}:"
    for ns in (own, inbox):
        define(client, ns)
    publish_fold(client, own, 10, scripts.SCRIPTS, None)
    for entry in sequence:
        entry = {**entry, "j": jid_ms(entry["s"], entry["t"]), "at": entry["t"] + 100}
        if entry["e"] == "failed":
            entry |= {"x": "RuntimeError", "m": f"attempt {entry['a']}"}
        assert worker_report(client, own, entry)
        client.lpush(keys.outcomes_inbox(inbox), json.dumps(entry))
    fold_outcomes(client, inbox, history=10, slice_size=7)
    assert client.llen(keys.outcomes_inbox(own)) == client.llen(keys.outcomes_inbox(inbox)) == 0
    for name in NAMES:
        own_record = client.hget(keys.outcomes_bucket(own, bucket(name)), name)
        inbox_record = client.hget(keys.outcomes_bucket(inbox, bucket(name)), name)
        assert own_record == inbox_record, name
        assert (client.hget(keys.outcomes_errors(own), name)
                == client.hget(keys.outcomes_errors(inbox), name)), name
    assert (set(client.zrange(keys.outcomes_changed(own), 0, -1))
            == set(client.zrange(keys.outcomes_changed(inbox), 0, -1)))
    # only a failure of the schedule that alerts on failures is for the decision: a failed
    # end, or a retry's start (the attempt before it failed, whether or not that was reported)
    failed = {e["s"] for e in sequence
              if e["e"] == "failed" or (e["e"] == "started" and e["a"] > 1)}
    assert set(client.zrange(keys.outcomes_changed(own), 0, -1)) <= (
        {b"alerting"} & {s.encode() for s in failed})


def test_an_invocation_publishes_the_fold_call_once_a_worker_reported(
        client: redis.Redis) -> None:
    cfg = config(FAILING)
    e = engine(client)
    e.run(cfg, now=T0 + timedelta(seconds=5))
    assert client.get(keys.outcomes_script("")) is None  # no worker reported: no key
    first_report(client)
    e.run(cfg, now=T0 + timedelta(minutes=1, seconds=5))
    published = client.get(keys.outcomes_script(""))
    assert published == f"1 EVALSHA {scripts.FOLD.sha} 10".encode()
    assert client.script_exists(scripts.FOLD.sha) == [True]
    assert fold_call(10, scripts.Caller(functions=True)) == (
        f"1 FCALL {scripts.FOLD.function} 10")


def test_steady_successes_folded_by_the_worker_cost_the_invocation_nothing(
        client: redis.Redis) -> None:
    cfg = config(SILENT)
    e = engine(client)
    first_report(client)
    e.run(cfg, now=T0 + timedelta(seconds=5))
    for minute in range(1, 9):
        tick = T0 + timedelta(minutes=minute)
        report = e.run(cfg, now=tick + timedelta(seconds=5))
        assert report.changed_health == [] and report.outcomes_folded == 0, minute
        for name in ("nightly", "plain"):
            assert worker_report(client, "", {"s": name, "t": to_ms(tick), "j": jid(name, tick),
                                              "e": "succeeded", "at": to_ms(tick) + 900,
                                              "a": 1, "d": 900})
        # the success took the deadline away (the next push arms the next one)
        assert client.zscore(keys.deadlines(""), "nightly") is None, minute
    assert events(client) == []  # never silent: each tick succeeded within its deadline
    assert client.zcard(keys.outcomes_changed("")) == 0
    health = read_health(client, "", ["nightly"])["nightly"]
    assert health.last_success_tick_ms == to_ms(T0 + timedelta(minutes=8))


def test_a_failure_streak_folded_by_the_worker_is_failing_once_then_recovered_once(
        client: redis.Redis) -> None:
    cfg = config(FAILING)
    e = engine(client)
    first_report(client)
    e.run(cfg, now=T0 + timedelta(seconds=5))
    judged = []
    for minute in range(1, 8):
        tick = T0 + timedelta(minutes=minute)
        judged.append(len(e.run(cfg, now=tick + timedelta(seconds=5)).changed_health))
        event = "failed" if minute <= 4 else "succeeded"
        entry = {"s": "flaky", "t": to_ms(tick), "j": jid("flaky", tick), "e": event,
                 "at": to_ms(tick) + 1000, "a": 1, "d": 1000}
        if event == "failed":
            entry |= {"x": "RuntimeError", "m": "boom"}
        assert worker_report(client, "", entry)
    judged.append(len(e.run(cfg, now=T0 + timedelta(minutes=7, seconds=30)).changed_health))
    third = to_ms(T0 + timedelta(minutes=3))
    assert [(v["e"], v["t"]) for v in events(client)] == [
        ("failing", str(third)), ("recovered", str(to_ms(T0 + timedelta(minutes=5))))]
    # judged: the third failure (alert_after_failures: 3; not the fourth: `failing` stood
    # then, and nothing pauses), and the first success while failing; none before or after
    assert judged == [0, 0, 0, 1, 0, 1, 0, 0]
    assert client.zcard(keys.outcomes_changed("")) == 0


def test_after_script_flush_the_report_reaches_the_inbox_and_the_invocation_folds_it(
        client: redis.Redis) -> None:
    cfg = config(FAILING)
    e = engine(client)
    first_report(client)
    e.run(cfg, now=T0 + timedelta(seconds=5))
    tick = T0 + timedelta(minutes=1)
    e.run(cfg, now=tick + timedelta(seconds=5))
    client.script_flush()
    entry = {"s": "flaky", "t": to_ms(tick), "j": jid("flaky", tick), "e": "succeeded",
             "at": to_ms(tick) + 1000, "a": 1, "d": 1000}
    with pytest.raises(redis.exceptions.NoScriptError):
        published = client.get(keys.outcomes_script("")).decode().split(" ")
        client.execute_command(published[1], published[2], 1, keys.outcomes_inbox(""), 0,
                               published[3], json.dumps(entry))
    assert not worker_report(client, "", entry)  # the inbox instead
    assert client.llen(keys.outcomes_inbox("")) == 1
    report = e.run(cfg, now=tick + timedelta(seconds=30))
    assert report.outcomes_folded == 1 and client.llen(keys.outcomes_inbox("")) == 0
    health = read_health(client, "", ["flaky"])["flaky"]
    assert health.last_success_tick_ms == to_ms(tick)
    assert client.script_exists(scripts.FOLD.sha) == [True]  # loaded again by that fold
    later = T0 + timedelta(minutes=2)
    assert worker_report(client, "", {**entry, "t": to_ms(later), "j": jid("flaky", later)})


def test_a_garbled_published_call_or_changed_score_costs_no_report(client: redis.Redis) -> None:
    cfg = config(FAILING)
    e = engine(client)
    first_report(client)
    e.run(cfg, now=T0 + timedelta(seconds=5))
    client.set(keys.outcomes_script(""), "2 SOMETHING else")
    client.zadd(keys.outcomes_changed(""), {"flaky": float("inf")})
    e.run(cfg, now=T0 + timedelta(minutes=1, seconds=5))  # publishes the call again
    assert client.get(keys.outcomes_script("")) == f"1 EVALSHA {scripts.FOLD.sha} 10".encode()
    assert client.zcard(keys.outcomes_changed("")) == 0  # judged and taken away
    client.zadd(keys.outcomes_changed(""), {"other": float("inf")})
    for minute in (1, 2, 3):  # the third failure in a row reaches alert_after_failures
        at = T0 + timedelta(minutes=minute)
        assert worker_report(client, "", {"s": "flaky", "t": to_ms(at), "j": jid("flaky", at),
                                          "e": "failed", "at": to_ms(at) + 1000, "a": 1,
                                          "d": 1000, "x": "E", "m": "m"})
    assert set(client.zrange(keys.outcomes_changed(""), 0, -1)) == {b"flaky", b"other"}


def test_a_failure_storm_beyond_one_slice_alerts_every_schedule_once(
        client: redis.Redis) -> None:
    """More schedules start failing at once than one slice of changed names holds: each gets
    its one `failing` from the invocation after its failure, and a further failure while
    its incident stands adds nothing to judge (the reviewer's storm: the same first slice
    judged every minute, the rest never)."""
    n = CHANGED_PER_INVOCATION + 150
    names = [f"s{k:05d}" for k in range(n)]
    cfg = config("schedules:\n" + "".join(
        f'  {name}: {{cron: "* * * * *", class: F, alert_after_failures: 1}}\n'
        for name in names))
    e = engine(client)
    first_report(client)
    e.run(cfg, now=T0 + timedelta(seconds=5))
    for minute in (1, 2):
        tick = T0 + timedelta(minutes=minute)
        e.run(cfg, now=tick + timedelta(seconds=5))  # pushes the tick (and publishes)
        pipe = client.pipeline(transaction=False)
        published = client.get(keys.outcomes_script("")).decode().split(" ")
        for name in names:
            pipe.execute_command(published[1], published[2], 1, keys.outcomes_inbox(""), 0,
                                 published[3], json.dumps(
                                     {"s": name, "t": to_ms(tick), "j": jid(name, tick),
                                      "e": "failed", "at": to_ms(tick) + 500, "a": 1,
                                      "d": 10, "x": "E", "m": "down"}))
        pipe.execute()
        if minute == 1:
            assert client.zcard(keys.outcomes_changed("")) == n
        else:  # every incident stands: nothing more to judge
            assert client.zcard(keys.outcomes_changed("")) == 0
        e.run(cfg, now=tick + timedelta(seconds=30))
    failing = [v["s"] for v in events(client) if v["e"] == "failing"]
    assert sorted(failing) == names  # each once
    assert client.zcard(keys.outcomes_changed("")) == 0


def test_a_late_copy_of_an_earlier_attempts_end_changes_nothing(client: redis.Redis) -> None:
    """A worker whose pipeline failed after its call folded `failed` (attempt 1) also writes
    that report to the inbox; the retry's start (attempt 2) folded meanwhile stands when the
    invocation folds the copy (the reviewer's double write)."""
    define(client, "")
    publish_fold(client, "", 10, scripts.SCRIPTS, None)
    tick = T0_MS + MIN
    base = {"s": "plain", "t": tick, "j": jid_ms("plain", tick)}
    failed = base | {"e": "failed", "at": tick + 100, "a": 1, "d": 5, "x": "E", "m": "boom"}
    assert worker_report(client, "", failed)
    assert worker_report(client, "", base | {"e": "started", "at": tick + 9000, "a": 2})
    client.lpush(keys.outcomes_inbox(""), json.dumps(failed))  # the copy
    fold_outcomes(client, "", history=10)
    (health,) = read_health(client, "", ["plain"]).values()
    assert health.last_outcome == "running" and health.consecutive_failures == 1
