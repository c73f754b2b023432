"""Sidekiq job hashes: the keys, units and ids a Sidekiq (6/7/8) or Exq worker reads."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiqbeat.core.cron import parse_cron, parse_every
from kiqbeat.core.payload import active_job_id, jid, job_json, job_payload, job_template
from kiqbeat.core.schedule import Schedule

TICK = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
NOW = TICK + timedelta(seconds=1, microseconds=250_000)


def schedule(**fields: object) -> Schedule:
    base: dict[str, object] = {"name": "report", "timetable": parse_cron("* * * * *"),
                               "job_class": "ReportWorker"}
    return Schedule(**(base | fields))  # type: ignore[arg-type]


def test_an_immediate_push_has_sidekiqs_keys_with_float_second_stamps() -> None:
    job = job_payload(schedule(args=(1, "two")), TICK, enqueued_at=NOW)
    assert job == {"class": "ReportWorker", "args": [1, "two"], "queue": "default",
                   "jid": jid("report", TICK), "retry": True,
                   "created_at": NOW.timestamp(), "enqueued_at": NOW.timestamp()}
    assert isinstance(job["created_at"], float)


def test_a_scheduled_push_has_no_enqueued_at_and_is_created_at_the_push() -> None:
    job = job_payload(schedule(), TICK, enqueued_at=None, created_at=NOW)
    assert "enqueued_at" not in job
    assert job["created_at"] == NOW.timestamp()


def test_a_scheduled_push_needs_its_push_instant() -> None:
    with pytest.raises(ValueError, match="created_at"):
        job_payload(schedule(), TICK, enqueued_at=None)


def test_ms_format_writes_sidekiq_8_integer_milliseconds() -> None:
    job = job_payload(schedule(timestamp_format="ms"), TICK, enqueued_at=NOW)
    assert job["created_at"] == job["enqueued_at"] == 1_772_953_201_250
    assert isinstance(job["enqueued_at"], int)


def test_the_payload_never_carries_retry_bookkeeping() -> None:
    job = job_payload(schedule(extra={"retry": 3, "backtrace": True}), TICK, enqueued_at=NOW)
    assert job["retry"] == 3 and job["backtrace"] is True
    assert not {"retry_count", "failed_at", "error_message", "error_class"} & job.keys()


def test_include_metadata_appends_the_tick_not_the_push_time() -> None:
    job = job_payload(schedule(args=("a",), include_metadata=True), TICK, enqueued_at=NOW)
    assert job["args"] == ["a", {"scheduled_at": TICK.timestamp()}]


def test_active_job_wraps_the_serialized_job_as_the_only_argument() -> None:
    s = schedule(job_class="InvoiceJob", active_job_wrapper="Sidekiq::ActiveJob::Wrapper",
                 args=(7,), queue="billing")
    job = job_payload(s, TICK, enqueued_at=NOW)
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
    one = job_payload(schedule(args=(1,)), TICK, enqueued_at=NOW)["jid"]
    other = job_payload(schedule(args=(2,), queue="x"), TICK, enqueued_at=NOW)["jid"]
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
    text = job_json(s, TICK, enqueued_at=NOW)
    assert " " not in text and "é" in text
    assert json.loads(text) == job_payload(s, TICK, enqueued_at=NOW)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(), lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


@given(args=st.lists(JSON_VALUES, max_size=3), extra=st.sampled_from(
           [{}, {"retry": 5}, {"backtrace": True, "tags": ["a"]}, {"custom": "\x00é"}]),
       fmt=st.sampled_from(["s", "ms"]), scheduled=st.booleans(),
       offset_us=st.integers(0, 10**12))
def test_a_template_renders_exactly_what_job_json_builds(
    args: list[object], extra: dict[str, object], fmt: str, scheduled: bool, offset_us: int
) -> None:
    s = schedule(args=tuple(args), extra=extra, timestamp_format=fmt)
    now = NOW + timedelta(microseconds=offset_us)
    template = job_template(s, scheduled=scheduled)
    assert template is not None
    expected = job_json(s, TICK, enqueued_at=None if scheduled else now, created_at=now)
    assert template.render(jid(s.name, TICK), now) == expected


def test_tick_dependent_jobs_have_no_template() -> None:
    assert job_template(schedule(include_metadata=True), scheduled=False) is None
    wrapped = schedule(active_job_wrapper="Sidekiq::ActiveJob::Wrapper")
    assert job_template(wrapped, scheduled=True) is None

