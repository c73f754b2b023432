"""Stored definitions read as schedules: a definition that differs from one already checked
only in its name and args is read through that check (document/validate.py's templates),
and gets exactly what a full check gives, schedule or messages."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiqbeat.core.limits import MAX_CHECKED_TEMPLATES
from kiqbeat.core.schedule import Schedule
from kiqbeat.document import validate
from kiqbeat.document.validate import Checks, encode_definition
from kiqbeat.errors import ConfigError

# The checks kept by content that these tests read through, as an engine or a store keeps its
# own (document/validate.py keeps none of its own).
CHECKS = Checks()


def read_definition(name: str, data: bytes, *, window_s: float = 3600.0) -> Schedule:
    return validate.read_definition(name, data, window_s=window_s, checks=CHECKS)


def check_stored(name: str, data: bytes) -> None:
    """A writer's check (store/schedules.py `Schedules.check`): the read, its result unused."""
    validate.read_definition(name, data, checks=CHECKS)


def forget_templates() -> None:
    CHECKS.forget()


BASES: list[dict[str, Any]] = [
    {"cron": "0 9 * * *", "tz": "Asia/Kolkata", "class": "DigestWorker"},
    {"cron": "*/5 * * * *", "class": "Wrapped", "active_job": True, "queue": "low"},
    {"every": "15m", "class": "Tagged", "tags": ["a", "b"], "retry": 3, "enabled": False},
    {"cron": "* * * * *", "class": "Late", "lookahead": "30s", "catch_up": "latest"},
]
TIMINGS: list[dict[str, Any]] = [
    {"cron": "0 9 * * *"}, {"cron": "0 9 * * *", "tz": "Europe/Paris"},
    {"cron": "30 4 * * * America/New_York"}, {"cron": "30 4 * * * America/New_York",
                                              "tz": "Asia/Kolkata"},
    {"cron": "0 0 30 2 *"}, {"cron": "* * *"}, {"cron": 5}, {"cron": "0 9 * * *", "tz": "Mars"},
    {"cron": "*/10 * * * * *"}, {"every": "15m"}, {"every": 900}, {"every": True},
    {"every": "15m", "tz": "UTC"}, {"every": "0s"}, {"cron": "0 9 * * *", "every": "1h"}, {},
    {"tz": "UTC"}, {"cron": "@daily"},
    # Life fields (document/lifecycle.py) and those checked against the timetable.
    {"cron": "0 9 * * *", "start_at": "2026-01-05T00:00:00Z", "end_at": "2026-03-01T00:00:00Z"},
    {"cron": "0 9 * * *", "start_at": "2026-03-01T00:00:00Z", "end_at": "2026-01-05T00:00:00Z"},
    {"cron": "0 9 * * *", "tz": "Europe/Paris", "except": ["2026-01-03", "hols"],
     "calendars": {"hols": ["2026-01-07", "2026-01-05"]}},
    {"cron": "0 9 * * *", "except": ["nothere"]}, {"every": "1h", "except": ["2026-01-03"]},
    {"at": "2026-01-02T09:00:00Z"}, {"at": "2026-01-02T09:00:00Z", "max_runs": 2},
    {"at": "2026-01-02T09:00:00Z", "end_at": "2026-02-01T00:00:00Z"},
    {"cron": "* * * * *", "jitter": "30s"}, {"cron": "*/10 * * * * *", "jitter": "30s"},
    {"cron": "*/10 * * * * *", "jitter": "5s", "max_runs": 3},
]
def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


HOSTILE_VALUES: list[Any] = [
    2**63, -(2**63) - 1, 2**63 - 1, float("nan"), float("inf"), "\ud800", {"k\udfff": 1},
    nested(97), nested(98), nested(99), nested(120), [0] * 9_998, [0] * 9_999, ["é" * 10],
    {"deep": nested(96)}, 1e15, -0.0,
]
HOSTILE = st.sampled_from(HOSTILE_VALUES)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8) | HOSTILE,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6)
ARGS = st.none() | st.lists(JSON_VALUES, max_size=4) | JSON_VALUES
NAMES = st.sampled_from(["tenant:1", "", "x" * 1000, "x" * 1001, "zero\u200bwidth",
                         "line\nbreak", "with space", "é"]) | st.text(max_size=6)


def outcome(name: str, data: bytes) -> tuple[Schedule | None, object, list[str]]:
    """What reading a definition gives: the schedule and its definition, or the problems."""
    try:
        schedule = read_definition(name, data)
    except ConfigError as exc:
        return None, None, exc.problems
    return schedule, schedule.definition, []


def stored(definition: dict[str, Any], *, canonical: bool = False) -> bytes:
    """As another language may store it (NaN and Infinity are JSON to Python's reader), or,
    `canonical`, in kiqbeat's own form (keys sorted, compact: args first)."""
    return json.dumps(definition, ensure_ascii=False, sort_keys=canonical,
                      separators=(",", ":") if canonical else None).encode(
                          "utf-8", "surrogatepass")


def without_timing(base: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in base.items() if k not in ("cron", "every", "tz")}


@given(base=st.sampled_from(BASES), timing=st.sampled_from(TIMINGS), name=NAMES, args=ARGS,
       canonical=st.booleans(), source=st.sampled_from([None, "doc.yaml", 5]))
def test_a_definition_read_through_a_checked_template_gets_what_a_full_check_gives(
    base: dict[str, Any], timing: dict[str, Any], name: str, args: object, canonical: bool,
    source: object,
) -> None:
    written = {"source": source} if source is not None else {}
    data = stored(without_timing(base) | timing | written | {"args": args}, canonical=canonical)
    forget_templates()
    expected = outcome(name, data)  # checked in full: no template of it yet
    forget_templates()
    read_definition("another", stored(base | {"args": [1, "two"]}))  # the template
    assert outcome(name, data) == expected
    # Its timing known too; and, in kiqbeat's form, all but its args (`_BY_REST`).
    assert outcome(name, data) == expected
    outcome("another", stored(without_timing(base) | timing | written | {"args": [3]},
                              canonical=canonical))
    assert outcome(name, data) == expected


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("timing", TIMINGS, ids=range(len(TIMINGS)))
def test_a_template_checked_at_one_time_gives_another_time_what_a_full_check_gives(
    base: dict[str, Any], timing: dict[str, Any],
) -> None:
    data = stored(without_timing(base) | timing | {"args": [7]})
    forget_templates()
    expected = outcome("tenant:7", data)
    forget_templates()
    read_definition("another", stored(base | {"args": [1, "two"]}))
    assert outcome("tenant:7", data) == expected


HOSTILE_ARGS = [[v] for v in HOSTILE_VALUES] + [nested(99), nested(101), "scalar", {"k": 1}]


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("args", HOSTILE_ARGS, ids=range(len(HOSTILE_ARGS)))
def test_args_at_a_limit_are_refused_or_kept_through_a_template_as_in_a_full_check(
    base: dict[str, Any], args: object,
) -> None:
    data = stored(base | {"args": args})
    forget_templates()
    expected = outcome("tenant:9", data)
    forget_templates()
    read_definition("another", stored(base | {"args": [1, "two"]}))
    assert outcome("tenant:9", data) == expected


@pytest.mark.parametrize("base", BASES)
def test_definitions_of_one_template_keep_their_own_names_args_and_definitions(
    base: dict[str, Any],
) -> None:
    forget_templates()
    first = read_definition("tenant:1", encode_definition(base | {"args": [1]}))
    second = read_definition("tenant:2", encode_definition(base | {"args": [2, {"x": None}]}))
    assert (first.name, first.args, first.definition) == ("tenant:1", (1,), base | {"args": [1]})
    assert (second.name, second.args) == ("tenant:2", (2, {"x": None}))
    assert second.definition == base | {"args": [2, {"x": None}]}
    assert first.timetable == second.timetable and first.job_class == second.job_class


@pytest.mark.parametrize(("checked", "other"), [
    ({"enabled": True}, {"enabled": 1}),  # equal in Python, not the same JSON
    ({"retry": 1}, {"retry": 1.0}),
    ({"retry": 1}, {"retry": True}),
    ({"tags": ["a"]}, {"tags": "a"}),
])
def test_fields_equal_in_python_but_not_in_json_are_not_taken_for_a_checked_one(
    checked: dict[str, Any], other: dict[str, Any],
) -> None:
    base = {"cron": "* * * * *", "class": "W"}
    forget_templates()
    read_definition("one", encode_definition(base | checked))
    data = encode_definition(base | other)
    cached = outcome("two", data)
    forget_templates()
    assert cached == outcome("two", data)


def test_schedules_of_one_template_keep_their_own_timings() -> None:
    forget_templates()
    timings = [("0 9 * * *", "Asia/Kolkata"), ("0 9 * * *", "Europe/Paris"),
               ("0 10 * * *", "Europe/Paris"), ("0 9 * * *", "UTC")] * 2
    for k, (cron, tz) in enumerate(timings):
        schedule = read_definition(f"tenant:{k}", encode_definition(
            {"class": "W", "cron": cron, "tz": tz, "args": [k]}))
        assert (schedule.timing, schedule.timetable.zone_name) == (f"{cron} ({tz})", tz)


@pytest.mark.parametrize("args", [None, [], [1], False, "one", {"k": 1}, 5, [float("nan")]])
def test_a_definition_in_kiqbeats_form_gets_what_a_full_check_gives_after_its_twin(
    args: object,
) -> None:
    """Read right after a definition whose text differs only in its args."""
    rest = {"class": "W", "cron": "*/5 * * * *", "lookahead": "30m", "source": "doc.yaml"}
    data = stored(rest | {"args": args}, canonical=True)
    for window_s in (3600.0, 600.0):  # the lookahead is longer than the second window
        forget_templates()
        expected = outcome("b", data) if window_s == 3600.0 else None
        forget_templates()
        alone = outcome_at("b", data, window_s)
        forget_templates()
        outcome_at("a", stored(rest | {"args": [1]}, canonical=True), 3600.0)
        assert outcome_at("b", data, window_s) == alone
        if expected is not None:
            assert alone == expected


def test_a_definition_giving_its_args_twice_is_read_as_json_reads_it() -> None:
    text = b'{"args":[1],"args":[2],"class":"W","cron":"* * * * *"}'
    forget_templates()
    outcome("a", text)
    schedule = read_definition("b", text)
    assert schedule.args == (2,) and schedule.definition == {
        "args": [2], "class": "W", "cron": "* * * * *"}


def outcome_at(name: str, data: bytes, window_s: float) -> object:
    try:
        schedule = read_definition(name, data, window_s=window_s)
    except ConfigError as exc:
        return None, None, exc.problems
    return schedule, schedule.definition, []


@given(base=st.sampled_from(BASES), name=NAMES, args=ARGS)
def test_a_writers_check_refuses_what_reading_refuses_with_the_same_messages(
    base: dict[str, Any], name: str, args: object,
) -> None:
    data = stored(base | {"args": args}, canonical=True)
    forget_templates()
    read_definition("twin", stored(base | {"args": [1]}, canonical=True))
    try:
        check_stored(name, data)
    except ConfigError as exc:
        checked: list[str] | None = exc.problems
    else:
        checked = None
    forget_templates()
    assert (checked or []) == outcome(name, data)[2]  # read in full: no template


def test_the_checked_definitions_kept_stay_within_their_bound() -> None:
    forget_templates()
    read_definition("first", encode_definition({"class": "W", "every": "1m"}))
    for k in range(MAX_CHECKED_TEMPLATES + 50):
        new_template = encode_definition({"args": [k], "class": f"W{k}", "every": "1m"})
        new_timing = encode_definition({"args": [k], "class": "W", "every": f"{k + 1}m"})
        for data in (new_template, new_timing, new_timing):  # the last through its text
            read_definition(f"s{k}", data)
    kept = (CHECKS.templates, CHECKS.timings, CHECKS.by_rest)
    assert all(0 < len(cache) <= MAX_CHECKED_TEMPLATES for cache in kept)
    forget_templates()


def test_schedules_differing_only_in_their_life_keep_their_own_bounds_and_instants() -> None:
    # start/end, exclusions and one-shot instants shape the timetable: none is taken from a
    # definition read before with the same cron (or from another one-shot).
    lives = [{}, {"end_at": "2026-01-10T00:00:00Z"}, {"start_at": "2026-01-05T00:00:00Z"},
             {"except": ["2026-01-03"]}, {"at": "2026-01-02T09:00:00Z"},
             {"at": "2026-01-07T09:00:00Z"}]
    definitions = [encode_definition({"class": "W", **({} if "at" in life else
                                                       {"cron": "0 9 * * *"}), **life}, "")
                   for life in lives]
    after, until = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 15, tzinfo=UTC)
    alone = []
    for data in definitions:  # each read with nothing cached: a full check
        forget_templates()
        alone.append(read_definition("alone", data).timetable.between(after, until))
    for k, data in enumerate(definitions):  # then each after all the others
        read = read_definition(f"warm{k}", data)
        assert read.timetable.between(after, until) == alone[k], lives[k]
    assert len({tuple(ticks) for ticks in alone}) == len(lives)  # the lives differ


def test_a_jitter_longer_than_the_gap_between_ticks_is_refused_after_a_slower_twin() -> None:
    # Jitter is checked against the timetable: a definition read before with the same fields
    # but a slower cron does not make it pass.
    slow = encode_definition({"class": "W", "cron": "* * * * *", "jitter": "30s"}, "")
    fast = encode_definition({"class": "W", "cron": "*/10 * * * * *", "jitter": "30s"}, "")
    forget_templates()
    with pytest.raises(ConfigError) as alone:
        read_definition("fast", fast)
    read_definition("slow", slow)
    with pytest.raises(ConfigError) as after:
        read_definition("fast", fast)
    assert after.value.problems == alone.value.problems
    assert "shortest gap" in after.value.problems[0]


def test_definitions_with_a_life_are_read_through_their_checked_twin() -> None:
    # Per-tenant schedules with start/end or exclusions share one check of their timing, as
    # any others do: the second is not checked in full (its timetable is the twin's own).
    life = {"class": "W", "cron": "0 9 * * *", "start_at": "2026-01-05T00:00:00Z",
            "except": ["2026-01-07"]}
    forget_templates()
    first = read_definition("tenant:1", encode_definition({**life, "args": [1]}, ""))
    second = read_definition("tenant:2", encode_definition({**life, "args": [2]}, ""))
    assert second.timetable is first.timetable
    assert (second.name, second.args) == ("tenant:2", (2,))


def test_a_stored_phrase_comes_back_as_written_and_is_read_as_its_cron() -> None:
    forget_templates()
    definition = {"class": "W", "cron": "every day at 9am", "tz": "Tokyo"}
    raw = encode_definition(definition)
    schedule = read_definition("digest", raw)
    assert json.loads(raw)["cron"] == "every day at 9am"  # stored as the user wrote it
    assert schedule.definition["cron"] == "every day at 9am"
    assert schedule.timing == "every day at 9am → 0 9 * * * (Tokyo (Asia/Tokyo))"
    # 09:00 in Tokyo is 00:00Z: the next after midnight UTC on 1 January is the 2nd's.
    assert schedule.timetable.next_after(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(
        2026, 1, 2, tzinfo=UTC)


@pytest.mark.parametrize("first", [{"active_job": True}, {"alert_after_failures": 3},
                                   {"active_job": True, "alert_after_failures": 3}, {}])
def test_a_definition_whose_keys_sort_before_args_is_read_through_its_text_too(
    first: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Stored keys are sorted: "active_job" and "alert_after_failures" come before "args".
    # The fast path by text must take them as it takes the rest (it once looked only at
    # definitions starting with `{"args":`), and give what a full check gives.
    forget_templates()
    fields = {**first, "class": "W", "cron": "*/5 * * * *"}
    read_definition("tenant:1", encode_definition({**fields, "args": [1]}, "doc"))
    assert len(CHECKS.by_rest) == 1
    data = encode_definition({**fields, "args": [2, "b"]}, "doc")
    expected = validate.read_definition("tenant:2", data)  # in full: no checks kept
    decoded: list[bytes] = []
    loads = validate.json_text.loads

    def counted(text: bytes) -> Any:
        decoded.append(text)
        return loads(text)

    monkeypatch.setattr(validate.json_text, "loads", counted)
    assert read_definition("tenant:2", data) == expected
    assert decoded == []  # not decoded beyond its args and the keys before them
    forget_templates()


def test_a_definition_with_args_twice_or_out_of_order_is_checked_in_full() -> None:
    forget_templates()
    for data in (b'{"active_job":true,"args":[1],"args":[2],"class":"W","cron":"* * * * *"}',
                 b'{"class":"W","args":[1],"cron":"* * * * *"}',
                 b'{"active_job": true, "args":[1],"class":"W","cron":"* * * * *"}'):
        for _ in range(2):
            assert read_definition("x", data) == validate.read_definition("x", data)
    forget_templates()


def outcome_of_fields(name: str, data: bytes, fields: dict[str, Any]) -> object:
    """What a writer's check gives (store/schedules.py: its definition beside its stored
    form), as `outcome` does."""
    try:
        schedule = validate.read_definition(name, data, checks=CHECKS, fields=fields)
    except ConfigError as exc:
        return None, None, exc.problems
    return schedule, schedule.definition, []


@given(base=st.sampled_from(BASES), timing=st.sampled_from(TIMINGS), name=NAMES, args=ARGS,
       warm=st.booleans())
def test_a_writers_definition_read_beside_its_stored_form_gets_what_a_full_check_gives(
    base: dict[str, Any], timing: dict[str, Any], name: str, args: object, warm: bool,
) -> None:
    """A writer's fields, read in place of their stored form's decode once a template and
    timing of theirs were checked, give the schedule or the messages a full check gives."""
    fields = without_timing(base) | timing | {"args": args}
    try:
        data = encode_definition(fields)
    except ConfigError:
        return  # not storable: never read
    forget_templates()
    expected = outcome(name, data)
    forget_templates()
    read_definition("another", stored(base | {"args": [1, "two"]}))  # the template
    if warm:  # its timing too
        outcome_of_fields("twin", encode_definition(fields | {"args": [1]}), fields | {
            "args": [1]})
    assert outcome_of_fields(name, data, fields) == expected
    assert outcome_of_fields(name, data, fields) == expected
