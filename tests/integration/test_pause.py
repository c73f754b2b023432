"""A pause with a note and an end (core/pause.py) against a real Redis: the ticks it covers
are passed over (never pushed, never recorded as missed), the schedule resumes by itself
after `until`, racing invokers push each later tick once, and a document changing a paused
schedule leaves it paused. Replayed invocations pause by the documented protocol (an HSET
of the record, as another language writes it), since the API refuses an end before the
Redis clock; the API's own pauses run on the Redis clock."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import redis

from kiqbeat.core.payload import jid
from kiqbeat.core.plan import to_ms
from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text
from kiqbeat.engine import run
from kiqbeat.errors import ConfigError
from kiqbeat.store import Store
from tests.support.clock import advance_clock, redis_now
from tests.support.engine import config, pushed_jobs, race

T0 = datetime(2025, 12, 24, 0, 0, tzinfo=UTC)
PAUSED = "kiqbeat:paused"
HOURLY = """
schedules:
  hourly: {cron: "0 * * * *", class: H}
"""


def pause_record(until: datetime | None, note: str = "INC-7") -> str:
    """A pause record as docs/store.md writes it."""
    return json.dumps({"note": note, "by": "ops@elsewhere", "at": to_ms(T0),
                       "until": None if until is None else to_ms(until)})


def job_jids(client: redis.Redis) -> list[str]:
    return [job["jid"] for job in pushed_jobs(client)]


def test_a_pause_until_an_instant_passes_over_its_ticks_and_resumes_by_itself(
        client: redis.Redis) -> None:
    cfg = config(HOURLY)
    run(client, cfg, now=T0 + timedelta(minutes=1))  # registered
    client.hset(PAUSED, "hourly", pause_record(T0 + timedelta(hours=3, minutes=30)))
    for minutes in (50, 130, 200, 230, 250, 310):
        run(client, cfg, now=T0 + timedelta(minutes=minutes))
    assert job_jids(client) == [jid("hourly", T0 + timedelta(hours=h)) for h in (4, 5)]
    assert client.hget("kiqbeat:missed", "hourly") is None  # the pause owes nothing


def test_racing_invokers_across_the_end_of_a_pause_push_each_later_tick_once(
        redis_url: str) -> None:
    cfg = config(HOURLY)
    client = redis.Redis.from_url(redis_url)
    run(client, cfg, now=T0)
    client.hset(PAUSED, "hourly", pause_record(T0 + timedelta(hours=10, minutes=30)))
    race(redis_url, cfg, [T0 + timedelta(minutes=20 * k) for k in range(1, 3 * 24 + 1)])  # a day
    pushed = job_jids(client)
    assert len(pushed) == len(set(pushed))  # none twice
    assert set(pushed) == {jid("hourly", T0 + timedelta(hours=h)) for h in range(11, 25)}
    assert client.hget("kiqbeat:missed", "hourly") is None
    client.close()


def test_a_paused_document_schedule_stays_paused_when_the_document_changes_it(
        client: redis.Redis) -> None:
    source = "s3://bucket/schedules.yaml"

    def doc(job_class: str) -> Config:
        return load_config_text(json.dumps({"schedules": {
            "x": {"every": "1s", "class": job_class}}}), source=source)

    run(client, doc("X"))
    store = Store(client)
    assert store.pause("x", note="the mailer is down") is True
    changed = run(client, doc("Y"))  # the document changes x while it is paused
    assert changed.documents_applied == 1
    advance_clock(client, 1.2)
    assert run(client, doc("Y")).pushed == 0
    row = store.get("x")
    assert row is not None and not row.enabled and row.pause is not None
    assert row.pause.note == "the mailer is down"
    assert not any(job["class"] == "Y" for job in pushed_jobs(client))


def test_the_apis_pause_ends_at_until_with_nothing_of_it_pushed_or_owed(
        client: redis.Redis) -> None:
    store = Store(client).acting("alice", note="")
    store.put("x", {"every": "1s", "class": "X"})
    run(client, Config(schedules=()))
    paused_at = redis_now(client)
    until = paused_at + timedelta(seconds=2)
    assert store.pause("x", note="deploy", until=until) is True
    row = store.get("x")
    assert row is not None and row.pause is not None and row.pause.by == "alice"
    assert row.pause.until_ms == to_ms(until) and "deploy" in row.line()
    for _ in range(16):  # 4 s of the Redis clock, an invocation each quarter second
        run(client, Config(schedules=()))
        advance_clock(client, 0.25)
    pushed = job_jids(client)
    assert len(pushed) == len(set(pushed))
    span = {jid("x", datetime.fromtimestamp(s, tz=UTC))
            for s in range(int(paused_at.timestamp()) + 1, int(until.timestamp()) + 1)}
    assert span and not span & set(pushed), "a tick of the pause was pushed"
    after = jid("x", datetime.fromtimestamp(int(until.timestamp()) + 1, tz=UTC))
    assert after in pushed, "it did not resume by itself after until"
    missed = (client.hget("kiqbeat:missed", "x") or b"").decode()
    for line in filter(None, missed.split("\n")):  # only what was owed before the pause
        assert int(line.split()[1]) < to_ms(paused_at) + 1000 and line.endswith("paused")
    resumed = store.get("x")
    assert resumed is not None and resumed.enabled and resumed.pause is None


def test_a_pause_refuses_a_past_end_a_long_note_and_an_unknown_name(
        client: redis.Redis) -> None:
    store = Store(client)
    store.put("x", {"every": "1m", "class": "X"})
    with pytest.raises(ConfigError, match="not in the future"):
        store.pause("x", until=redis_now(client) - timedelta(minutes=1))
    with pytest.raises(ConfigError, match="MAX_PAUSE_NOTE_CHARS"):
        store.pause("x", note="n" * 501)
    with pytest.raises(ConfigError, match="no schedule 'y'"):
        store.pause("y", note="typo")
    assert not client.exists(PAUSED)


def test_removing_a_paused_schedule_forgets_its_pause(client: redis.Redis) -> None:
    store = Store(client)
    store.put("x", {"every": "1m", "class": "X"})
    store.pause("x", note="n")
    assert store.remove("x")
    store.put("x", {"every": "1m", "class": "X"})
    row = store.get("x")
    assert row is not None and row.enabled and not client.hexists(PAUSED, "x")


def test_resume_still_ends_a_pause_written_into_the_definition(client: redis.Redis) -> None:
    """Pauses of the previous release wrote `enabled: false` into the definition."""
    store = Store(client)
    store.put("x", {"every": "1m", "class": "X", "enabled": False})
    assert store.resume("x") is True
    row = store.get("x")
    assert row is not None and row.enabled
