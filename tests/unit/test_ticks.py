"""Every tick classified (core/ticks.py): a pure join of the timetable with the history, the
outcome record, the missed ranges and the pause, each tick given exactly one outcome."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiqbeat.core.cron import parse_cron
from kiqbeat.core.lifecycle import Bounded
from kiqbeat.core.outcomes import Outcomes, TickOutcome
from kiqbeat.core.pause import Pause
from kiqbeat.core.payload import jid_ms
from kiqbeat.core.plan import from_ms, to_ms
from kiqbeat.core.records import Push, Range, held_tick_ms
from kiqbeat.core.ticks import TICK_OUTCOMES, classify_ticks

MIN = 60_000
T0 = to_ms(datetime(2026, 5, 4, 12, 0, tzinfo=UTC))
EVERY_MINUTE = parse_cron("* * * * *")


def push(kind: str, k: int) -> Push:
    return Push(kind, from_ms(T0 + k * MIN), jid_ms("s", T0 + k * MIN),
                from_ms(T0 + k * MIN + 5))


def outcome(k: int, state: str, attempt: int = 1, duration: int | None = 10) -> TickOutcome:
    running = state == "running"
    return TickOutcome(T0 + k * MIN, state, attempt, None if running else duration,
                       T0 + k * MIN + 100 if running else None)


def classify(**overrides: object) -> list[tuple[int, str, str | None]]:
    args: dict[str, object] = {
        "since_ms": T0, "until_ms": T0 + 14 * MIN, "now_ms": T0 + 11 * MIN + 30_000,
        "mark_ms": T0 + 10 * MIN, "first_seen_ms": T0, "history": [], "keep": 10,
        "outcomes": None, "last_error": None, "missed": [], "pause": None, "enabled": True,
        "waiting": set(), "jid_of": jid_ms}
    args.update(overrides)
    found = classify_ticks("s", EVERY_MINUTE, **args)  # type: ignore[arg-type]
    return [((t.tick_ms - T0) // MIN, t.outcome, t.reason) for t in found.ticks]


def test_each_tick_gets_the_one_outcome_its_records_say() -> None:
    history = [push("tick", k) for k in (1, 2, 3, 4, 5, 9, 10)] + [push("backfill", 8),
                                                                   push("skipped", 6)]
    record = Outcomes((outcome(4, "running"), outcome(3, "expired"), outcome(2, "failed", 3),
                       outcome(1, "succeeded")), T0 + MIN, 0)
    ticks = classify(
        history=history, outcomes=record, waiting={jid_ms("s", T0 + 10 * MIN)},
        missed=[Range(T0 + 6 * MIN, T0 + 7 * MIN, "window")], keep=100,
        last_error=f"{T0 + 2 * MIN}\tKeyError: k")
    assert ticks == [
        (1, "succeeded", None), (2, "failed", None), (3, "expired", None),
        (4, "running", None), (5, "pushed", None), (6, "skipped", "skip"),
        (7, "missed", "window"), (8, "backfilled", None), (9, "pushed", None),
        (10, "waiting", None), (11, "pending", None), (12, "pending", None),
        (13, "pending", None), (14, "pending", None)]


def test_the_tick_buffer_one_holds_is_held_not_skipped() -> None:
    """Held: at or below the mark, neither pushed nor recorded missed (which, without the
    held record, reads as a pause's); the tick after it, recorded for overlap."""
    ticks = classify(history=[push("tick", 8)], held_ms=T0 + 9 * MIN, since_ms=T0 + 7 * MIN,
                     missed=[Range(T0 + 9 * MIN, T0 + 10 * MIN, "overlap")])
    assert ticks[:4] == [(8, "pushed", None), (9, "held", None), (10, "skipped", "overlap"),
                         (11, "pending", None)]
    assert classify(history=[push("tick", 8)], since_ms=T0 + 8 * MIN)[0] == (
        9, "skipped", "paused")
    assert held_tick_ms(b"%d 0 1\nq{}" % (T0 + 9 * MIN)) == T0 + 9 * MIN
    assert held_tick_ms(b"x 0 1\nq{}") is None and held_tick_ms(None) is None


def test_a_failed_tick_carries_its_error_and_attempts_and_json_has_the_promised_keys() -> None:
    record = Outcomes((outcome(2, "failed", 3, 1234),), None, 0)
    found = classify_ticks(
        "s", EVERY_MINUTE, since_ms=T0 + MIN, until_ms=T0 + 2 * MIN, now_ms=T0 + 3 * MIN,
        mark_ms=T0 + 3 * MIN, first_seen_ms=T0, history=[push("tick", 2)], keep=10,
        outcomes=record, last_error=f"{T0 + 2 * MIN}\tKeyError: k", missed=[], pause=None,
        enabled=True, waiting=set(), jid_of=jid_ms)
    (tick,) = found.ticks
    assert tick.as_dict() == {"tick": from_ms(T0 + 2 * MIN).isoformat(), "outcome": "failed",
                              "jid": jid_ms("s", T0 + 2 * MIN), "attempts": 3,
                              "duration_ms": 1234, "error": "KeyError: k"}
    assert found.as_dict()["counts"] == {"failed": 1}


def test_missed_ranges_read_as_skipped_or_missed_by_reason() -> None:
    ranges = [Range(T0, T0 + MIN, "policy"), Range(T0 + MIN, T0 + 2 * MIN, "overlap"),
              Range(T0 + 2 * MIN, T0 + 3 * MIN, "paused"),
              Range(T0 + 3 * MIN, T0 + 4 * MIN, "window")]
    assert classify(missed=ranges, until_ms=T0 + 4 * MIN) == [
        (1, "skipped", "catch_up"), (2, "skipped", "overlap"), (3, "skipped", "paused"),
        (4, "missed", "window")]


def test_ticks_the_watermark_passed_without_a_record_were_paused_over() -> None:
    # Only a pause (or a disabled schedule) passes ticks over without recording them.
    assert classify(until_ms=T0 + 2 * MIN) == [(1, "skipped", "paused"),
                                              (2, "skipped", "paused")]
    paused = Pause("why", "me", T0 + 10 * MIN, None)
    assert classify(since_ms=T0 + 10 * MIN, until_ms=T0 + 12 * MIN, pause=paused) == [
        (11, "skipped", "paused"), (12, "pending", None)]  # 12 is not due yet


def test_an_excluded_date_is_a_nominal_tick_skipped_for_except() -> None:
    day = datetime(2026, 5, 4, tzinfo=UTC).date()
    timetable = Bounded(parse_cron("0 12 * * *"), excluded=frozenset({day}))
    found = classify_ticks(
        "s", timetable, since_ms=T0 - 2 * 86_400_000, until_ms=T0 + 86_400_000,
        now_ms=T0, mark_ms=T0, first_seen_ms=T0 - 3 * 86_400_000, history=[], keep=10,
        outcomes=None, last_error=None, missed=[], pause=None, enabled=True, waiting=set(),
        jid_of=jid_ms)
    assert [(t.tick_ms, t.outcome, t.reason) for t in found.ticks] == [
        (T0 - 86_400_000, "skipped", "paused"), (T0, "skipped", "except"),
        (T0 + 86_400_000, "pending", None)]


def test_the_list_starts_where_knowledge_starts() -> None:
    history = [push("tick", k) for k in range(5, 10)]
    # A full history of 5: nothing is known before its oldest push.
    ticks = classify(history=history, keep=5, first_seen_ms=T0 - 100 * MIN,
                     until_ms=T0 + 9 * MIN)
    assert [k for k, _, _ in ticks] == [5, 6, 7, 8, 9]
    # Not full: knowledge starts when kiqbeat first saw the schedule.
    assert [k for k, _, _ in classify(history=history, keep=10, first_seen_ms=T0 + 3 * MIN,
                                      until_ms=T0 + 9 * MIN)] == [4, 5, 6, 7, 8, 9]


@given(st.lists(st.sampled_from(["tick", "backfill", "skipped", None]), min_size=12,
                max_size=12),
       st.lists(st.sampled_from([None, *("running", "succeeded", "failed", "expired")]),
                min_size=12, max_size=12),
       st.integers(0, 14), st.integers(0, 14))
def test_every_nominal_tick_is_listed_once_in_order_with_one_known_outcome(
        kinds: list[str | None], states: list[str | None], mark: int, now: int) -> None:
    history = [push(kind, k) for k, kind in enumerate(kinds) if kind]
    record = Outcomes(tuple(outcome(k, state) for k, state in reversed(list(enumerate(states)))
                            if state), None, 0)
    ticks = classify(history=history, outcomes=record, mark_ms=T0 + mark * MIN,
                     now_ms=T0 + now * MIN, keep=100, first_seen_ms=T0)
    assert [k for k, _, _ in ticks] == list(range(1, 15))
    assert all(outcome_word in TICK_OUTCOMES for _, outcome_word, _ in ticks)
    for k, word, _ in ticks:
        recorded = k < 12 and (kinds[k] or states[k])
        if k > now and not recorded:  # a future tick pushed ahead (lookahead) is not pending
            assert word == "pending"


def test_spans_split_anywhere_list_the_same_ticks() -> None:
    base = {"history": [push("tick", k) for k in range(1, 11)], "keep": 100}
    whole = classify(**base)
    for cut in range(0, 15):
        first = classify(**base, until_ms=T0 + cut * MIN) if cut else []
        second = classify(**base, since_ms=T0 + cut * MIN)
        assert first + second == whole
    assert timedelta(minutes=1).total_seconds() * 1000 == MIN


def test_validate_describes_expires_after_and_history_and_refuses_bad_values() -> None:
    from kiqbeat.core.describe import describe_life
    from kiqbeat.document import load_config_text
    from kiqbeat.errors import ConfigError

    (s,) = load_config_text("schedules:\n  n: {cron: '0 2 * * *', class: W, "
                            "expires_after: 30m, history: 50}\n").schedules
    assert (s.expires_after_s, s.history) == (1800.0, 50)
    assert "not started within 30m of its tick is not run" in describe_life(s)
    assert "last 50 ticks kept" in describe_life(s)
    with pytest.raises(ConfigError) as refused:
        load_config_text("schedules:\n  b: {cron: '0 2 * * *', class: W, "
                         "expires_after: 0s, history: 1001}\n")
    text = str(refused.value)
    assert "schedule 'b' (field 'expires_after'): '0s' must be from 1s to 7d" in text
    assert "schedule 'b' (field 'history'): 1001 must be a whole number from 0 to 1000" in text
