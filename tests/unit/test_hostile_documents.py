"""Hostile and broken documents are refused quickly and cleanly: a ConfigError naming the
schedule and field, within bounded time and memory, and never a value that passes
validation and then breaks every run (DESIGN §2 "Nothing half-done")."""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiqbeat.core.payload import job_json
from kiqbeat.document import load_config_text
from kiqbeat.errors import ConfigError

# Generous: the point is "bounded", not "fast" (a regression was 47 s and 718 MB).
TIME_BUDGET_S = 10.0
MEMORY_BUDGET_BYTES = 200 * 1024 * 1024


def refused(text: str) -> ConfigError:
    """The ConfigError the document gets, checked to come within the time and memory budget."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        load_config_text(text)
    except ConfigError as exc:
        error = exc
    else:
        pytest.fail("the document was accepted")
    finally:
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert elapsed < TIME_BUDGET_S and peak < MEMORY_BUDGET_BYTES, (elapsed, peak)
    assert len(str(error)) < 2_000  # never a whole value repeated into a message
    return error


def one_schedule(field: str) -> str:
    worker = "" if field.startswith("class:") else "    class: Worker\n"
    return f"schedules:\n  job:\n    cron: '* * * * *'\n{worker}    {field}\n"


def bomb(levels: int, fanout: int) -> str:
    lines = ["b0: &b0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * fanout)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_505_byte_alias_bomb_is_refused_at_once_with_a_whole_clear_message() -> None:
    for field in ("tags: *b8", "class: *b8"):
        text = bomb(9, 10) + one_schedule(field)
        assert len(text) < 600
        message = str(refused(text))
        assert message.startswith("the document expands to more than 5,000,000 values "
                                  "through YAML aliases"), message
        assert message.endswith("write the values out, or share less")


def test_one_big_string_aliased_into_args_is_refused_before_it_is_written_out() -> None:
    text = "big: &s " + "x" * 10_000 + "\n" + one_schedule(
        "args: [" + ", ".join(["*s"] * 9_999) + "]")
    error = refused(text)
    assert "schedule 'job' (field 'args')" in str(error) and "bytes of JSON" in str(error)


def test_twenty_thousand_schedules_sharing_one_body_validate_in_bounded_time() -> None:
    body = "{class: ReportWorker, cron: '0 * * * *', args: [" + ", ".join(
        f"a{i}" for i in range(40)) + "]}"
    text = "schedules:\n  s0: &b " + body + "\n" + "".join(
        f"  s{i}: *b\n" for i in range(1, 20_000))
    started = time.monotonic()
    assert len(load_config_text(text).schedules) == 20_000
    assert time.monotonic() - started < TIME_BUDGET_S


@pytest.mark.parametrize(("field", "message"), [
    (f"args: [{2**64}]", "outside the 64-bit integers"),
    (f"args: [{-(2**63) - 1}]", "outside the 64-bit integers"),
    (f"args: [{'9' * 5000}]", "cannot be read safely"),
    ("args: " + "[" * 100 + "]" * 100, "nests deeper than the 100 levels"),
    ("payload: {deep: " + "[" * 100 + "]" * 100 + "}", "nests deeper than the 100 levels"),
    ("args: " + "[" * 3000 + "]" * 3000, "nest too deep"),
    ("queue: \"default\\u200b\"", "U+200B"),
    ("queue: \"a\\x1bb\"", "U+001B"),
    ("class: \"Report\\x00Worker\"", "U+0000"),
    ("class: \"report worker\"", "without spaces"),
    ("class: \"Report;Worker\"", "does not look like a worker class"),
    ("description: \"a\\u202eb\"", "U+202E"),
])
def test_values_that_would_break_every_run_are_refused_naming_schedule_and_field(
    field: str, message: str
) -> None:
    error = str(refused(one_schedule(field)))
    assert message in error
    assert "schedule 'job'" in error or "cannot be read safely" in error


@pytest.mark.parametrize("name", ["a\u202eb", "a\x85b", "a\u200bb", "tab\there"])
def test_names_with_invisible_or_control_characters_are_refused(name: str) -> None:
    text = "schedules:\n  " + json.dumps(name) + ": {cron: '* * * * *', class: A}\n"
    assert "schedule name" in str(refused(text))


def test_a_lone_surrogate_from_json_is_refused_naming_the_field() -> None:
    text = '{"schedules": {"job": {"cron": "* * * * *", "class": "A", "args": ["\\ud800"]}}}'
    error = str(refused(text))
    assert "schedule 'job' (field 'args')" in error and "lone surrogate" in error


def test_a_sidekiq_cron_args_string_nested_3000_deep_is_a_problem_not_a_crash() -> None:
    text = json.dumps({"job": {"cron": "* * * * *", "class": "A",
                               "args": "[" * 3000 + "]" * 3000}})
    assert "(field 'args')" in str(refused(text))


def test_payload_keys_other_middlewares_own_are_warned_about() -> None:
    config = load_config_text(one_schedule("payload: {lock: until_executed, bid: x}"))
    (warning,) = [w for w in config.warnings if "another middleware" in w]
    assert "'lock' (sidekiq-unique-jobs)" in warning and "'bid' (Sidekiq Pro batches)" in warning


def test_every_accepted_job_encodes_to_utf8_json_as_pushed() -> None:
    config = load_config_text(one_schedule('args: ["é", 9223372036854775807, {k: [1, [2]]}]'))
    (schedule,) = config.schedules
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert json.loads(job_json(schedule, now, pushed_at=now).encode("utf-8"))["args"][1] == (
        2**63 - 1)


# ---------------------------------------------------------------------------- generated

_TEXT = st.text(st.characters(blacklist_categories=()), max_size=30)
_HOSTILE_VALUE: st.SearchStrategy[str] = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    _TEXT.map(json.dumps),
    st.integers(min_value=95, max_value=110).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 8).map(lambda n: f"*b{n}"),
    st.sampled_from(['"\\u202e"', '"\\x85"', '"\\x00"', ".nan", "!!binary aGk=", "{<<: *b1}",
                     "&x [*x]"]),
)
_FIELDS = ["class", "queue", "args", "tags", "payload", "description", "retry", "cron",
           "every", "tz", "lookahead", "catch_up", "include_metadata", "active_job"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(_FIELDS), value=_HOSTILE_VALUE, levels=st.integers(2, 9),
       fanout=st.integers(2, 10), as_name=st.booleans())
def test_generated_hostile_documents_get_only_config_errors_within_budget(
    field: str, value: str, levels: int, fanout: int, as_name: bool
) -> None:
    # The anchors live in a valid schedule's payload, so that a document whose hostile
    # value is harmless is accepted, and the accepted path is exercised too.
    anchors = "".join(f"      {line}\n" for line in bomb(levels, fanout).splitlines())
    text = ("schedules:\n  base:\n    cron: '* * * * *'\n    class: A\n    payload:\n"
            + anchors)
    if as_name:
        text += f"  {value}: {{cron: '* * * * *', class: A}}\n"
    else:
        text += one_schedule(f"{field}: {value}").removeprefix("schedules:\n")
    _within_budget(lambda: load_config_text(text))


def _within_budget(load: Callable[[], object]) -> None:
    tracemalloc.start()
    started = time.monotonic()
    try:
        load()
    except ConfigError as exc:
        assert len(str(exc)) < 2_000
    finally:
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert elapsed < TIME_BUDGET_S and peak < MEMORY_BUDGET_BYTES, (elapsed, peak)


def test_a_schedule_whose_stored_definition_is_over_the_limit_is_refused_with_the_rest() -> None:
    """An invocation would set such a definition aside unread: the document is refused up
    front, the schedule named with its stored size and the limit, beside its other
    problems (one pass)."""
    from kiqbeat.core.limits import MAX_DEFINITION_BYTES

    text = ("schedules:\n  big:\n    cron: '* * * * *'\n    class: Worker\n"
            f"    description: {'d' * MAX_DEFINITION_BYTES}\n"
            "  typo:\n    cron: '* * * * *'\n    class: Worker\n    quue: x\n")
    error = refused(text)
    assert len(error.problems) == 2
    assert error.problems[0].startswith("schedule 'big': its definition is ")
    assert f"bytes as stored, over the limit of {MAX_DEFINITION_BYTES:,} bytes" in str(error)
    fits = ("schedules:\n  big:\n    cron: '* * * * *'\n    class: Worker\n"
            f"    description: {'d' * (MAX_DEFINITION_BYTES - 100)}\n")
    assert [s.name for s in load_config_text(fits).schedules] == ["big"]
