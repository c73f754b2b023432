"""Sidekiq job hashes: the keys, units and ids a Sidekiq (6/7/8) or Exq worker reads."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiqbeat.core.cron import parse_cron, parse_every
from kiqbeat.core.limits import MAX_PARSED_DEFINITIONS
from kiqbeat.core.payload import (
    JobTemplates,
    active_job_id,
    jid,
    jid_ms,
    job_json,
    job_payload,
    job_template,
)
from kiqbeat.core.plan import from_ms
from kiqbeat.core.schedule import Schedule

TICK = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
NOW = TICK + timedelta(seconds=1, microseconds=250_000)


def schedule(**fields: object) -> Schedule:
    base: dict[str, object] = {"name": "report", "timetable": parse_cron("* * * * *"),
                               "job_class": "ReportWorker"}
    return Schedule(**(base | fields))  # type: ignore[arg-type]


def test_an_immediate_push_has_sidekiqs_keys_with_float_second_stamps() -> None:
    job = job_payload(schedule(args=(1, "two")), TICK, pushed_at=NOW)
    assert job == {"class": "ReportWorker", "args": [1, "two"], "queue": "default",
                   "jid": jid("report", TICK), "retry": True,
                   "created_at": NOW.timestamp(), "enqueued_at": NOW.timestamp(),
                   "kiqbeat_schedule": "report", "kiqbeat_tick": 1_772_953_200_000}
    assert isinstance(job["created_at"], float)


def test_every_job_names_its_schedule_and_tick_and_an_expiring_one_its_deadline() -> None:
    # The worker protocol (docs/store.md): the middleware records the outcome by these.
    job = job_payload(schedule(name="n", overlap="allow"), TICK, pushed_at=NOW, scheduled=True)
    assert (job["kiqbeat_schedule"], job["kiqbeat_tick"]) == ("n", TICK.timestamp() * 1000)
    assert "kiqbeat_expires_at" not in job
    expiring = job_payload(schedule(expires_after_s=90.5), TICK, pushed_at=NOW)
    assert expiring["kiqbeat_expires_at"] == 1_772_953_200_000 + 90_500
    assert list(expiring)[-3:] == ["kiqbeat_schedule", "kiqbeat_tick", "kiqbeat_expires_at"]
    assert job_template(schedule(expires_after_s=60.0), scheduled=False) is None


@pytest.mark.parametrize(("fmt", "unit"), [("s", 1.0), ("ms", 1000)])
def test_a_scheduled_push_is_enqueued_at_its_tick_and_created_at_the_push(
    fmt: str, unit: float
) -> None:
    # Exq moves a schedule-set job to its queue unchanged and its Telemetry middleware needs
    # `enqueued_at`; Exq's own enqueue_at writes the scheduled instant there.
    job = job_payload(schedule(timestamp_format=fmt), TICK, pushed_at=NOW, scheduled=True)
    assert job["enqueued_at"] == round(TICK.timestamp() * unit, 3)
    assert job["created_at"] == round(NOW.timestamp() * unit, 3)
    assert type(job["enqueued_at"]) is type(job["created_at"]) is (float if fmt == "s" else int)


def test_ms_format_writes_sidekiq_8_integer_milliseconds() -> None:
    job = job_payload(schedule(timestamp_format="ms"), TICK, pushed_at=NOW)
    assert job["created_at"] == job["enqueued_at"] == 1_772_953_201_250
    assert isinstance(job["enqueued_at"], int)


def test_the_payload_never_carries_retry_bookkeeping() -> None:
    job = job_payload(schedule(extra={"retry": 3, "backtrace": True}), TICK, pushed_at=NOW)
    assert job["retry"] == 3 and job["backtrace"] is True
    assert not {"retry_count", "failed_at", "error_message", "error_class"} & job.keys()


def test_include_metadata_appends_the_tick_not_the_push_time() -> None:
    job = job_payload(schedule(args=("a",), include_metadata=True), TICK, pushed_at=NOW)
    assert job["args"] == ["a", {"scheduled_at": TICK.timestamp()}]


def test_active_job_wraps_the_serialized_job_as_the_only_argument() -> None:
    s = schedule(job_class="InvoiceJob", active_job_wrapper="Sidekiq::ActiveJob::Wrapper",
                 args=(7,), queue="billing")
    job = job_payload(s, TICK, pushed_at=NOW)
    assert (job["class"], job["wrapped"], job["queue"]) == (
        "Sidekiq::ActiveJob::Wrapper", "InvoiceJob", "billing")
    (inner,) = job["args"]
    assert set(inner) == {"job_class", "job_id", "provider_job_id", "queue_name", "priority",
                          "arguments", "executions", "exception_executions", "locale",
                          "timezone", "enqueued_at", "scheduled_at"}
    assert inner["job_class"] == "InvoiceJob" and inner["arguments"] == [7]
    assert inner["queue_name"] == "billing" and inner["executions"] == 0
    assert inner["enqueued_at"] == "2026-03-08T07:00:01.250000000Z"
    assert uuid.UUID(inner["job_id"]).version == 4
    assert inner["job_id"] == active_job_id(job["jid"])


def test_jid_is_24_hex_from_name_and_instant_only() -> None:
    a = jid("report", TICK)
    assert re.fullmatch(r"[0-9a-f]{24}", a)
    same_instant = TICK.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert jid("report", same_instant) == a
    assert jid("report", TICK + timedelta(seconds=1)) != a
    assert jid("reports", TICK) != a
    one = job_payload(schedule(args=(1,)), TICK, pushed_at=NOW)["jid"]
    other = job_payload(schedule(args=(2,), queue="x"), TICK, pushed_at=NOW)["jid"]
    assert one == other == a


@given(st.text(min_size=1, max_size=20), st.integers(0, 4_000_000_000),
       st.text(min_size=1, max_size=20), st.integers(0, 4_000_000_000))
def test_distinct_ticks_get_distinct_jids(n1: str, s1: int, n2: str, s2: int) -> None:
    t1, t2 = datetime.fromtimestamp(s1, UTC), datetime.fromtimestamp(s2, UTC)
    assert (jid(n1, t1) == jid(n2, t2)) == ((n1, s1) == (n2, s2))


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        jid("report", datetime(2026, 1, 1))  # noqa: DTZ001


def test_job_json_is_compact_and_round_trips() -> None:
    s = schedule(args=("é", {"k": [1.5, None]}), timetable=parse_every("15m"))
    text = job_json(s, TICK, pushed_at=NOW)
    assert " " not in text and "é" in text
    assert json.loads(text) == job_payload(s, TICK, pushed_at=NOW)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(), lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


@given(args=st.lists(JSON_VALUES, max_size=3), extra=st.sampled_from(
           [{}, {"retry": 5}, {"backtrace": True, "tags": ["a"]}, {"custom": "\x00é"}]),
       fmt=st.sampled_from(["s", "ms"]), scheduled=st.booleans(),
       offset_us=st.integers(0, 10**12), tick_s=st.integers(0, 4_000_000_000),
       name=st.text(min_size=1, max_size=5))
def test_a_template_renders_for_any_name_and_args_exactly_what_job_json_builds(
    args: list[object], extra: dict[str, object], fmt: str, scheduled: bool, offset_us: int,
    tick_s: int, name: str,
) -> None:
    s = schedule(name=name, args=tuple(args), extra=extra, timestamp_format=fmt)
    now = NOW + timedelta(microseconds=offset_us)
    tick = datetime.fromtimestamp(tick_s, UTC)
    # Built from another schedule of the same content: a template ignores name and args.
    template = job_template(schedule(args=("other", 1), extra=extra, timestamp_format=fmt),
                            scheduled=scheduled)
    assert template is not None
    expected = job_json(s, tick, pushed_at=now, scheduled=scheduled)
    args_json = json.dumps(s.args, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert template.render(name, args_json, jid(name, tick), now, tick) == expected


SCHEDULES = st.builds(
    schedule, name=st.sampled_from(["a", "b", "c"]),
    args=st.lists(JSON_VALUES, max_size=2).map(tuple),
    job_class=st.sampled_from(["ReportWorker", "Other"]), queue=st.sampled_from(["q", "r"]),
    timestamp_format=st.sampled_from(["s", "ms"]), include_metadata=st.booleans(),
    active_job_wrapper=st.sampled_from(["", "Sidekiq::ActiveJob::Wrapper"]),
    overlap=st.sampled_from(["allow", "skip"]), expires_after_s=st.sampled_from([0.0, 30.0]),
    extra=st.sampled_from([{}, {"retry": 5}, {"retry": 5}, {"tags": ["x"]}]))


@given(st.lists(st.tuples(SCHEDULES, st.booleans()), min_size=1, max_size=12))
def test_cached_templates_render_each_schedules_own_job_in_any_order(
    jobs: list[tuple[Schedule, bool]],
) -> None:
    templates = JobTemplates()
    for _ in range(2):  # built, then from the cache
        for s, scheduled in jobs:
            expected = job_json(s, TICK, pushed_at=NOW, scheduled=scheduled)
            assert templates.job(s, TICK, jid(s.name, TICK), NOW, scheduled=scheduled) == (
                expected)


def test_schedules_differing_in_any_part_of_their_job_each_get_their_own() -> None:
    retry = {"retry": 5}
    variants = [schedule(), schedule(name="b", args=(1,)), schedule(queue="other"),
                schedule(job_class="Other"), schedule(timestamp_format="ms"),
                schedule(extra=retry), schedule(extra={"retry": 6}), schedule(extra=retry),
                schedule(extra={"tags": ["x"]}), schedule(include_metadata=True),
                schedule(active_job_wrapper="Sidekiq::ActiveJob::Wrapper")]
    templates = JobTemplates()
    for _ in range(2):
        for s in variants:
            for scheduled in (False, True):
                assert templates.job(s, TICK, jid(s.name, TICK), NOW, scheduled=scheduled) == (
                    job_json(s, TICK, pushed_at=NOW, scheduled=scheduled))


def test_tick_dependent_jobs_have_no_template() -> None:
    assert job_template(schedule(include_metadata=True), scheduled=False) is None
    wrapped = schedule(active_job_wrapper="Sidekiq::ActiveJob::Wrapper")
    assert job_template(wrapped, scheduled=True) is None



def test_the_args_kept_for_rendering_stay_within_what_the_engine_keeps_parsed() -> None:
    templates = JobTemplates()
    for k in range(MAX_PARSED_DEFINITIONS + 10):
        s = schedule(args=(k,))
        templates.job(s, TICK, jid(s.name, TICK), NOW, scheduled=False)
    templates.forget_beyond(10 * MAX_PARSED_DEFINITIONS)  # plenty of room for templates
    s = schedule(args=("after",))
    assert templates.job(s, TICK, jid(s.name, TICK), NOW, scheduled=False) == job_json(
        s, TICK, pushed_at=NOW)
    assert len(templates._args) == 1


@given(st.lists(st.tuples(SCHEDULES, st.booleans()), min_size=1, max_size=12),
       st.lists(st.integers(0, 10**13), min_size=0, max_size=3))
def test_queued_jobs_are_job_json_byte_for_byte_for_any_ticks_and_push_instant(
    jobs: list[tuple[Schedule, bool]], ticks_ms: list[int],
) -> None:
    templates = JobTemplates()
    for pushed_at in (NOW, NOW + timedelta(seconds=61), NOW):  # the part after the jid moves
        for s, keep in jobs:
            rendered = templates.queued(s, ticks_ms, pushed_at, keep=keep)
            if rendered is None:  # no template: the caller builds them with job_json
                assert job_template(s, scheduled=False) is None
                continue
            assert rendered == [
                job_json(s, from_ms(t), pushed_at=pushed_at, job_id=jid_ms(s.name, t)).encode()
                for t in ticks_ms]


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text() | st.integers() | st.booleans() | st.none(), inner,
                      max_size=4),
    max_leaves=20)


@given(_JSON_VALUES)
def test_the_payloads_json_encoder_writes_what_the_standard_encoder_writes(value: Any) -> None:
    """payload._encode (the C encoder called directly) writes the text, or raises the error,
    that `json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)`
    does, NaN and infinities (refused) included."""
    from kiqbeat.core import payload

    try:
        expected: Any = payload._JSON.encode(value)
    except ValueError as exc:
        expected = (ValueError, str(exc))
    try:
        got: Any = payload._encode(value)
    except ValueError as exc:
        got = (ValueError, str(exc))
    assert got == expected


def test_the_payloads_json_encoder_refuses_what_the_standard_encoder_refuses() -> None:
    from kiqbeat.core import payload

    looped: list[Any] = []
    looped.append(looped)
    for value in (looped, object(), {1j: 1}):
        errors = []
        for encode in (payload._encode, payload._JSON.encode):
            with pytest.raises((TypeError, ValueError)) as raised:
                encode(value)
            errors.append((raised.type, str(raised.value)))
        assert errors[0] == errors[1]
