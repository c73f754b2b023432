"""The last days kiqbeat plans (DESIGN §3 "Time ends with the year 9999"), through every
front end: an invocation whose `--now` is the last hours of 9998 (the Redis test clock moved
there), `next`, `report`, `status`, `missed` and `backfill` of a record written by hand near
the end, and schedules with `end_at`, `at`, `except`, jitter and L/#/seconds crons in zones
with and without DST. Each answers, never with a traceback, and a zoned schedule costs
nothing: it pushes its ticks like the control, or has ended. Once, a zoned schedule was set
aside as "beyond the year 9999" by every invocation from 2 days before 9999, and `next`,
`report`, `missed` and `backfill` raised 'year 10000 is out of range'."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import redis

from kiqbeat.core.payload import jid
from kiqbeat.redis.connection import connect
from kiqbeat.store import Store
from tests.support.cli import Kiqbeat
from tests.support.clock import advance_clock, redis_now
from tests.support.console import Start

# The last hour of the year 9998, UTC: the zones' offset changes of 9999 are looked up.
NEAR = datetime(9998, 12, 31, 22, 0, 30, tzinfo=UTC)
SCHEDULES = {
    "control": {"class": "W", "cron": "* * * * *", "queue": "control"},
    "new_york": {"class": "W", "cron": "* * * * * America/New_York", "queue": "zoned"},
    "sydney_last": {"class": "W", "cron": "*/5 * L * * Australia/Sydney", "queue": "zoned"},
    "london_nth": {"class": "W", "cron": "0 9 * * 1#1 Europe/London", "queue": "zoned"},
    "kiritimati_s": {"class": "W", "cron": "*/20 * * * * * Pacific/Kiritimati",
                     "queue": "zoned", "jitter": "5s"},
    "berlin_except": {"class": "W", "cron": "0 0 * * * Europe/Berlin", "queue": "zoned",
                      "except": ["9999-01-01"]},
    "ends": {"class": "W", "cron": "0 * * * * America/Los_Angeles", "queue": "zoned",
             "end_at": "9998-12-31T23:30:00Z"},
    "once": {"class": "W", "at": "9998-12-31T17:45:00-05:00", "queue": "zoned"},
}


def jids(client: redis.Redis, queue: str) -> set[str]:
    return {json.loads(raw)["jid"] for raw in client.lrange(f"queue:{queue}", 0, -1)}


def no_traceback(kiqbeat: Kiqbeat, *args: str) -> str:
    done = kiqbeat(*args)
    assert "Traceback" not in done.err and "10000" not in done.out + done.err, (args, done)
    assert done.code in (0, 1), (args, done)
    return done.out + done.err


def test_every_front_end_answers_in_the_last_hours_kiqbeat_plans(
        redis_url: str, kiqbeat: Kiqbeat, start_console: Start) -> None:
    client = connect(redis_url)
    store = Store(client)
    for name, definition in SCHEDULES.items():
        store.put(name, definition)
    advance_clock(client, (NEAR - redis_now(client)).total_seconds())
    first = no_traceback(kiqbeat, "run-once", "--now", NEAR.isoformat())
    later = NEAR + timedelta(minutes=10)
    advance_clock(client, 600)
    ran = no_traceback(kiqbeat, "run-once", "--now", later.isoformat())
    assert client.hgetall("kiqbeat:rejected") == {}, (first, ran)
    minutes = [NEAR.replace(second=0) + timedelta(minutes=m) for m in range(1, 11)]
    assert jids(client, "control") == {jid("control", t) for t in minutes}
    assert {jid("new_york", t) for t in minutes} <= jids(client, "zoned")
    for args in (["next", "--store", "-n", "3"],
                 ["next", "--store", "-n", "3", "--after", "9998-12-31T23:59:00Z"],
                 ["next", "--cron", "0 9 L * *", "--tz", "America/New_York", "-n", "5",
                  "--after", "9998-12-30T00:00:00Z"], ["status"], ["status", "new_york"],
                 ["report", "new_york", "--since", "9998-12-31T00:00:00Z",
                  "--until", "9998-12-31T23:59:59Z"],
                 ["history", "new_york"], ["schedules", "list"]):
        no_traceback(kiqbeat, *args)
    served = start_console()
    with served.browser() as browser, served.api() as api:
        for name in SCHEDULES:
            for path in (f"/schedule?name={name}", f"/api/v1/schedules/{name}"):
                page = (browser if path.startswith("/schedule?") else api).get(path)
                assert page.status_code == 200, (path, page.text[:500])
        for path in ("/", "/schedules"):
            assert browser.get(path).status_code == 200, path
        for path in ("/api/v1/schedules", "/api/v1/status", "/api/v1/missed"):
            assert api.get(path).status_code == 200, path
    client.close()


def test_a_missed_record_near_the_end_is_listed_and_backfilled(
        redis_url: str, kiqbeat: Kiqbeat) -> None:
    client = connect(redis_url)
    store = Store(client)
    for name, definition in SCHEDULES.items():
        store.put(name, definition)
    advance_clock(client, (NEAR - redis_now(client)).total_seconds())
    no_traceback(kiqbeat, "run-once", "--now", NEAR.isoformat())
    start_ms = int(datetime(9998, 12, 31, 12, tzinfo=UTC).timestamp() * 1000)
    end_ms = int(NEAR.replace(second=0).timestamp() * 1000)
    for name in SCHEDULES:
        client.hset("kiqbeat:missed", name, b"%d %d window" % (start_ms, end_ms))
    listed = no_traceback(kiqbeat, "missed")
    assert "new_york" in listed and "kiritimati_s" in listed
    no_traceback(kiqbeat, "backfill", "--all", "--dry-run")
    no_traceback(kiqbeat, "backfill", "--all", "--yes")
    ten_hours = [datetime(9998, 12, 31, 12, tzinfo=UTC) + timedelta(minutes=m)
                 for m in range(1, 10 * 60 + 1)]
    assert {jid("new_york", t) for t in ten_hours} <= jids(client, "zoned")
    client.close()


def test_a_record_of_the_whole_year_9999_is_counted_and_backfilled_to_its_last_tick(
        redis_url: str, kiqbeat: Kiqbeat) -> None:
    """A missed range through the last instant kiqbeat plans (written by hand): `missed`
    counts it, and the backfill pushes each first Monday at 09:00 in London, December's
    included, worked out here with zoneinfo."""
    client = connect(redis_url)
    Store(client).put("london_nth", SCHEDULES["london_nth"])
    advance_clock(client, (NEAR - redis_now(client)).total_seconds())
    no_traceback(kiqbeat, "run-once", "--now", NEAR.isoformat())
    client.hset("kiqbeat:missed", "london_nth", b"253370764800000 253402300799999 window")
    assert "london_nth: 12 tick(s)" in no_traceback(kiqbeat, "missed")
    no_traceback(kiqbeat, "backfill", "london_nth", "--yes")
    london = ZoneInfo("Europe/London")
    first_mondays = [datetime(9999, month, day, 9, tzinfo=london).astimezone(UTC)
                     for month in range(1, 13) for day in range(1, 8)
                     if datetime(9999, month, day).weekday() == 0]  # noqa: DTZ001
    assert len(first_mondays) == 12
    assert jids(client, "zoned") == {jid("london_nth", t) for t in first_mondays}
    client.close()
