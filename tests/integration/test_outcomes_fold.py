"""The fold (redis/lua/fold.lua) against a real Redis, with inbox entries written as the
worker protocol says (docs/store.md, "The worker protocol") by plain commands, as a worker
in another language would."""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from kiqbeat.core.outcomes import Health
from kiqbeat.core.payload import jid_ms
from kiqbeat.core.plan import from_ms
from kiqbeat.document import load_config_text
from kiqbeat.engine import run
from kiqbeat.outcomes import fold_outcomes, read_outcomes
from kiqbeat.outcomes.records import Folded, read_health
from kiqbeat.redis import keys
from kiqbeat.redis.progress import bucket
from kiqbeat.store import Store

T0 = 1_790_000_000_000 - 1_790_000_000_000 % 60_000  # a minute boundary, epoch ms
MIN = 60_000


def define(client: redis.Redis, name: str, **fields: Any) -> None:
    client.hset(keys.definitions(""), name, json.dumps({"class": "W", "cron": "* * * * *",
                                                        **fields}))


def report(client: redis.Redis, name: str, tick: int, event: str, *, attempt: int = 1,
           duration: int | None = None, error: tuple[str, str] | None = None,
           at: int | None = None) -> None:
    entry: dict[str, Any] = {"s": name, "t": tick, "j": jid_ms(name, tick), "e": event,
                             "at": at if at is not None else tick + 500, "a": attempt}
    if duration is not None:
        entry["d"] = duration
    if error:
        entry["x"], entry["m"] = error
    client.lpush(keys.outcomes_inbox(""), json.dumps(entry, separators=(",", ":")))


def fold(client: redis.Redis, *names: str, folded: Folded | None = None) -> list[Health]:
    """Fold the inbox; then the health of `names` (the fold returns no records)."""
    fold_outcomes(client, folded=folded)
    return list(read_health(client, "", names).values())


def test_started_then_succeeded_makes_a_success_with_its_duration(
        redis_client: redis.Redis) -> None:
    define(redis_client, "a")
    report(redis_client, "a", T0, "started", at=T0 + 250)
    (running,) = fold(redis_client, "a")
    assert (running.last_outcome, running.last_tick_ms) == ("running", T0)
    report(redis_client, "a", T0, "succeeded", duration=1234)
    (done,) = fold(redis_client, "a")
    assert done.last_outcome == "succeeded" and done.last_duration_ms == 1234
    assert done.last_success_tick_ms == T0 and done.consecutive_failures == 0
    assert done.last_jid == jid_ms("a", T0)
    assert redis_client.llen(keys.outcomes_inbox("")) == 0
    # It lives in the bucket progress uses, a field of a few bytes.
    assert 0 < redis_client.hstrlen(keys.outcomes_bucket("", bucket("a")), "a") < 20


def test_failures_count_in_a_row_and_a_retry_that_succeeds_resets_them(
        redis_client: redis.Redis) -> None:
    define(redis_client, "f")
    for k in range(3):
        report(redis_client, "f", T0 + k * MIN, "started")
        report(redis_client, "f", T0 + k * MIN, "failed", duration=5,
               error=("RuntimeError", f"boom {k}"))
    (h,) = fold(redis_client, "f")
    assert (h.last_outcome, h.consecutive_failures) == ("failed", 3)
    assert h.last_error == "RuntimeError: boom 2" and h.last_success_tick_ms is None
    # The newest tick's retry starts: still counted as failed; then it succeeds.
    report(redis_client, "f", T0 + 2 * MIN, "started", attempt=2)
    (h,) = fold(redis_client, "f")
    assert (h.last_outcome, h.consecutive_failures) == ("running", 3)
    report(redis_client, "f", T0 + 2 * MIN, "succeeded", attempt=2, duration=7)
    (h,) = fold(redis_client, "f")
    assert (h.last_outcome, h.consecutive_failures, h.last_error) == ("succeeded", 0, None)
    assert h.last_success_tick_ms == T0 + 2 * MIN
    ((record, error),) = read_outcomes(redis_client, "", ["f"]).values()
    assert record is not None and error is None
    assert [(t.tick_ms, t.state, t.attempt) for t in record.ticks] == [
        (T0 + 2 * MIN, "succeeded", 2), (T0 + MIN, "failed", 1), (T0, "failed", 1)]


def test_a_late_failure_of_an_earlier_attempt_never_undoes_a_success(
        redis_client: redis.Redis) -> None:
    define(redis_client, "late")
    report(redis_client, "late", T0, "succeeded", attempt=2, duration=1)
    report(redis_client, "late", T0, "failed", attempt=1, duration=1, error=("E", "m"))
    report(redis_client, "late", T0, "started", attempt=2)
    (h,) = fold(redis_client, "late")
    assert (h.last_outcome, h.consecutive_failures) == ("succeeded", 0)


def test_a_record_keeps_the_history_length_and_a_definition_may_set_its_own(
        redis_client: redis.Redis) -> None:
    define(redis_client, "ten")
    define(redis_client, "three", history=3)
    for k in range(15):
        for name in ("ten", "three"):
            report(redis_client, name, T0 + k * MIN, "failed", duration=1, error=("E", ""))
    fold_outcomes(redis_client, history=10)
    found = read_outcomes(redis_client, "", ["ten", "three"])
    ten, three = found["ten"][0], found["three"][0]
    assert ten is not None and three is not None
    assert [t.tick_ms for t in ten.ticks] == [T0 + k * MIN for k in range(14, 4, -1)]
    assert len(three.ticks) == 3
    # The streak outlives the record: failures dropped off the end are still counted.
    health = read_health(redis_client, "", ["ten", "three"])
    assert health["ten"].consecutive_failures == health["three"].consecutive_failures == 15


def test_garbled_and_unknown_entries_are_dropped_and_the_rest_folded(
        redis_client: redis.Redis) -> None:
    define(redis_client, "ok")
    inbox = keys.outcomes_inbox("")
    for junk in ("not json", '{"s": 5}', '[]', '{"s":"ok","t":-1,"e":"started"}',
                 '{"s":"ok","t":1,"e":"exploded"}'):
        redis_client.lpush(inbox, junk)
    report(redis_client, "nobody", T0, "succeeded", duration=1)
    report(redis_client, "ok", T0, "expired")
    folded = Folded()
    (h,) = fold(redis_client, "ok", folded=folded)
    assert (h.name, h.last_outcome) == ("ok", "expired")
    assert (folded.taken, folded.dropped, folded.left) == (7, 6, 0)
    assert not redis_client.hexists(keys.outcomes_bucket("", bucket("nobody")), "nobody")


def test_a_big_inbox_is_folded_in_bounded_slices_each_entry_once(
        redis_client: redis.Redis) -> None:
    names = [f"s{k}" for k in range(50)]
    for name in names:
        define(redis_client, name)
    pipe = redis_client.pipeline(transaction=False)
    for minute in range(20):
        for name in names:
            entry = {"s": name, "t": T0 + minute * MIN, "e": "succeeded", "a": 1,
                     "d": minute, "j": jid_ms(name, T0 + minute * MIN), "at": T0}
            pipe.lpush(keys.outcomes_inbox(""), json.dumps(entry))
    pipe.execute()
    folded = Folded()
    fold_outcomes(redis_client, slice_size=100, slices=3, folded=folded)
    assert (folded.calls, folded.taken, folded.left) == (3, 300, 700)
    fold_outcomes(redis_client, slice_size=100, slices=100, folded=folded)
    assert folded.taken == 1000 and folded.left == 0
    health = read_health(redis_client, "", names)
    assert {h.last_tick_ms for h in health.values()} == {T0 + 19 * MIN}
    assert {h.last_duration_ms for h in health.values()} == {19}


def test_the_fold_keeps_its_time_per_call_small(redis_client: redis.Redis) -> None:
    # Not a timed assertion: the slowlog's record of the longest call, for the report.
    define(redis_client, "x")
    for k in range(500):
        report(redis_client, "x", T0 + k * MIN, "succeeded", duration=k)
    started = time.monotonic()
    fold_outcomes(redis_client, slice_size=500, slices=1)
    assert time.monotonic() - started < 30  # a generous bound: it finished


def test_an_invocation_folds_after_its_pushes_and_judges_only_the_changed_names(
        redis_client: redis.Redis) -> None:
    config = load_config_text("schedules:\n  inv: {cron: '* * * * *', class: W}\n"
                              "  alerting: {cron: '* * * * *', class: W,"
                              " alert_after_failures: 1}\n")
    run(redis_client, config)  # applies the document
    quiet = run(redis_client, config)
    assert quiet.outcomes_folded == 0 and quiet.changed_health == []
    rounds = quiet.round_trips
    report(redis_client, "inv", T0, "failed", duration=3, error=("KeyError", "k"))
    folded = run(redis_client, config)
    # folded, the changed names read again ("inv" alerts on nothing, so none to judge), and
    # the workers' fold call published (a worker reported: the first time only)
    assert folded.outcomes_folded == 1 and folded.round_trips == rounds + 3
    assert redis_client.get(keys.outcomes_script("")) is not None
    assert folded.changed_health == []
    assert read_health(redis_client, "", ["inv"])["inv"].last_error == "KeyError: k"
    report(redis_client, "alerting", T0, "failed", duration=3, error=("KeyError", "k"))
    # its streak reached alert_after_failures: a changed name
    assert fold_outcomes(redis_client).notified == 1
    assert redis_client.zrange(keys.outcomes_changed(""), 0, -1) == ["alerting"]
    # (rules as a push of it writes them: health is judged once some schedule has any)
    redis_client.hset(keys.expectations(""), "alerting", "0" * 40 + " 0 1 0")
    judged = run(redis_client, config)
    ((h),) = judged.changed_health
    assert (h.name, h.last_outcome, h.consecutive_failures, h.last_error) == (
        "alerting", "failed", 1, "KeyError: k")
    assert redis_client.zcard(keys.outcomes_changed("")) == 0  # judged: taken away
    assert run(redis_client, config).changed_health == []  # nothing new: nothing changed


def test_status_and_get_show_each_schedules_health(redis_client: redis.Redis) -> None:
    config = load_config_text("schedules:\n  h: {cron: '* * * * *', class: W}\n"
                              "  quiet: {cron: '* * * * *', class: W}\n")
    run(redis_client, config)
    report(redis_client, "h", T0, "succeeded", duration=1500)
    report(redis_client, "h", T0 + MIN, "failed", duration=20, error=("IOError", "disk"))
    report(redis_client, "h", T0 + 2 * MIN, "failed", duration=30, error=("IOError", "full"))
    run(redis_client, config)
    store = Store(redis_client)
    row = store.get("h")
    assert row is not None and row.health is not None
    assert row.as_dict()["health"] == {
        "last_outcome": "failed", "last_tick": from_ms(T0 + 2 * MIN).isoformat(),
        "last_success": from_ms(T0).isoformat(), "consecutive_failures": 2,
        "last_duration_ms": 30, "last_error": "IOError: full",
        "last_jid": jid_ms("h", T0 + 2 * MIN)}
    assert "2 failed in a row: IOError: full" in row.line()
    quiet = store.get("quiet")
    assert quiet is not None and quiet.health is not None
    assert quiet.health.last_outcome is None and "failed" not in quiet.line()


def test_removing_a_schedule_forgets_its_outcome_record_and_last_error(
        redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    store.put("gone", {"cron": "* * * * *", "class": "W"})
    report(redis_client, "gone", T0, "failed", duration=1, error=("E", "m"))
    (h,) = fold(redis_client, "gone")
    assert h.consecutive_failures == 1
    assert redis_client.hexists(keys.outcomes_errors(""), "gone")
    store.remove("gone")
    assert not redis_client.hexists(keys.outcomes_bucket("", bucket("gone")), "gone")
    assert not redis_client.hexists(keys.outcomes_errors(""), "gone")
    report(redis_client, "gone", T0 + MIN, "succeeded", duration=1)
    assert fold_outcomes(redis_client).dropped == 1  # no definition: dropped, no record made
    assert not redis_client.hexists(keys.outcomes_bucket("", bucket("gone")), "gone")
