"""The schedule store's promises (DESIGN §7) against a real redis-server.

Cost follows the due work, not the store's size; changes made through the store apply to
ticks after the watermark; racing writers, invokers, documents and shards never push a tick
twice; an upgrade from the layout of the previous release (watermarks and first-seen only)
loses and repeats nothing; an invalid definition written by another language is set aside
without sinking the invocation; the API and documents keep to their own schedules.

Expected ticks come from `kiqbeat.fire_times` (or epoch arithmetic for `every`), expected
jids from (name, tick); invocations replay earlier instants with `now=`, never the wall
clock. Duplicates are found by counting distinct jids in Redis, not by reading reports.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from kiqbeat import fire_times
from kiqbeat.core.payload import jid
from kiqbeat.core.plan import Entry, from_ms, plan_due, to_ms
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text
from kiqbeat.document.validate import encode_definition, read_definition
from kiqbeat.engine import Document, Engine, run
from kiqbeat.errors import ConfigError
from kiqbeat.redis import keys, progress, scripts
from kiqbeat.redis.connection import connect
from kiqbeat.redis.definitions import definition_sha
from kiqbeat.redis.migrate import migrate_layout
from kiqbeat.redis.side import RedisSide
from kiqbeat.settings import Settings
from kiqbeat.store import Store
from tests.support.clock import advance_clock, minute_floor, redis_now, room_before_boundary
from tests.support.engine import cron_jids, push_plan, pushed_jobs
from tests.support.history import history_bytes, history_text, pushes_of
from tests.support.marks import all_marks, stored_mark, write_marks
from tests.support.servers import load_functions

# A deployment without a document: the engine runs the store alone.
STORE_ONLY = Config(schedules=())
MINUTELY: dict[str, Any] = {"cron": "* * * * *", "class": "MinuteWorker"}

SCHEDULES = "kiqbeat:schedules"
DUE = "kiqbeat:due"
WATERMARKS = "kiqbeat:watermarks"
FIRST_SEEN = "kiqbeat:first_seen"
REJECTED = "kiqbeat:rejected"
DOCUMENTS = "kiqbeat:documents"


def start(client: redis.Redis) -> datetime:
    """A replay instant three hours before the Redis clock, 5 s past a minute."""
    return minute_floor(redis_now(client)) - timedelta(hours=3) + timedelta(seconds=5)


def registered(client: redis.Redis) -> tuple[Store, datetime]:
    """A store holding `x` (every minute), registered by an invocation at a replay instant."""
    store = Store(client)
    store.put("x", MINUTELY)
    t0 = start(client)
    run(client, STORE_ONLY, now=t0)
    return store, t0


def jids(client: redis.Redis) -> list[str]:
    """The jid of every job in Redis (queues and the schedule set), duplicates kept."""
    return [job["jid"] for job in pushed_jobs(client)]


def jids_of_class(client: redis.Redis, job_class: str) -> list[str]:
    """The jids of the jobs of one worker class, in push order."""
    return [job["jid"] for job in pushed_jobs(client) if job["class"] == job_class]


def every_ticks(seconds: int, after: datetime, until: datetime) -> list[datetime]:
    """Multiples of `seconds` since the epoch in (after, until]: what `every` promises."""
    first = int(after.timestamp()) // seconds * seconds + seconds
    last = int(until.timestamp())
    return [datetime.fromtimestamp(s, tz=UTC) for s in range(first, last + 1, seconds)]


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def stored(client: redis.Redis, name: str) -> dict[str, Any]:
    """The stored definition of `name`, decoded."""
    raw = client.hget(SCHEDULES, name)
    assert raw is not None, f"no definition of {name!r}"
    value: dict[str, Any] = json.loads(raw)
    return value


def forgotten(client: redis.Redis, name: str) -> bool:
    """Nothing of `name` left: definition, watermark, first-seen, set-aside reason, index."""
    return (not any(client.hexists(key, name) for key in (SCHEDULES, REJECTED))
            and stored_mark(client, name) is None and client.zscore(DUE, name) is None)


class Failures:
    """Exceptions raised in worker threads, re-raised in the test."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()

    def thread(self, target: Callable[[], None]) -> threading.Thread:
        def body() -> None:
            try:
                target()
            except BaseException as exc:
                with self._lock:
                    self.errors.append(exc)
        return threading.Thread(target=body, daemon=True)

    def check(self) -> None:
        if self.errors:
            raise self.errors[0]


def run_all(threads: list[threading.Thread], failures: Failures) -> None:
    """Start the threads, wait for them all, re-raise the first failure."""
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a thread hung"
    failures.check()


# ---------------------------------------------------------------------------- cost


def counting_client(url: str) -> tuple[redis.Redis, list[int]]:
    """A client that counts what it sends: one send is one round trip (a pipeline sends all
    its commands at once). The count is the client's own, independent of the report's."""
    sends = [0]

    class Counting(redis.Connection):
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            sends[0] += 1
            super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    return redis.Redis.from_url(url, connection_class=Counting), sends


def test_nothing_due_is_one_round_trip_among_twenty_thousand_and_only_due_ones_are_read(
    redis_url: str,
) -> None:
    client, sends = counting_client(redis_url)
    store = Store(client)
    t0 = start(client)
    # Yearly, half a year away: not due anywhere near the replayed hours.
    yearly = f"0 3 1 {(t0.month + 5) % 12 + 1} *"
    assert fire_times(yearly, after=t0 - timedelta(days=1), until=t0 + timedelta(days=1)) == []
    idle = store.import_definitions(
        (f"idle:{i}", {"cron": yearly, "class": "IdleWorker", "args": [i]})
        for i in range(20_000))
    busy = store.import_definitions((f"busy:{i}", MINUTELY) for i in range(5))
    assert (idle.written, busy.written) == (20_000, 5)
    engine = Engine(client=client)
    first = engine.run(STORE_ONLY, now=t0)
    assert (first.new_schedules, first.pushed) == (20_005, 0)

    before = sends[0]
    quiet = engine.run(STORE_ONLY, now=t0 + timedelta(seconds=40))
    assert (quiet.round_trips, sends[0] - before) == (1, 1)
    assert (quiet.schedules, quiet.pushed) == (0, 0)

    before = sends[0]
    due = engine.run(STORE_ONLY, now=t0 + timedelta(minutes=5, seconds=10))
    assert due.schedules == 5, "only the five due schedules are read"
    assert (due.round_trips, sends[0] - before) == (2, 2)
    expected = sorted(j for i in range(5) for j in cron_jids(
        f"busy:{i}", "* * * * *", t0, t0 + timedelta(minutes=5, seconds=10)))
    assert sorted(jids(client)) == expected
    client.close()


def test_more_than_a_batch_of_due_schedules_has_each_due_tick_pushed_once(
    client: redis.Redis,
) -> None:
    crons = {n: ("* * * * *" if n % 2 else "*/2 * * * *") for n in range(2_500)}
    store = Store(client)
    store.import_definitions((f"m{n}", {"cron": c, "class": "M"}) for n, c in crons.items())
    t0 = start(client)
    run(client, STORE_ONLY, now=t0)
    until = t0 + timedelta(minutes=3)
    report = run(client, STORE_ONLY, now=until)
    assert report.schedules == 2_500
    again = run(client, STORE_ONLY, now=until + timedelta(seconds=20))
    assert (again.schedules, again.pushed) == (0, 0)
    expected = sorted(j for n, c in crons.items() for j in cron_jids(f"m{n}", c, t0, until))
    assert len(expected) >= 5_000
    assert sorted(jids(client)) == expected


# ---------------------------------------------------------------------------- changes


def test_a_changed_cron_applies_after_the_change_without_backfill(client: redis.Redis) -> None:
    """A schedule registered hours ago whose old cron has not fired since: changed now to
    every 15 minutes, it owes nothing of the new cron before the change — only its ticks
    after it (pushed ahead here, by its lookahead)."""
    store = Store(client)
    t0 = start(client)
    # Daily, six hours ahead of the clock: its last tick was before t0, its next is hours on.
    store.put("x", {"cron": f"0 {(t0 + timedelta(hours=9)).hour} * * *", "class": "X"})
    run(client, STORE_ONLY, now=t0)
    changed_at = redis_now(client)
    assert store.put("x", {"cron": "*/15 * * * *", "lookahead": "20m", "class": "X"}) is True
    assert store.put("x", {"cron": "*/15 * * * *", "lookahead": "20m", "class": "X"}) is False
    report = run(client, STORE_ONLY)
    expected = cron_jids("x", "*/15 * * * *", changed_at, report.now + timedelta(minutes=20))
    assert expected and sorted(jids(client)) == sorted(expected)
    backfill = set(cron_jids("x", "*/15 * * * *", t0, changed_at - timedelta(seconds=1)))
    assert backfill and not backfill & set(jids(client)), "nothing before the change"


def test_a_change_never_drops_a_tick_the_old_cron_still_owed(client: redis.Redis) -> None:
    """The old cron's tick that was due but not yet pushed when the change came is owed
    under the new definition (the watermark stops just before it), and is pushed once."""
    store = Store(client)
    store.put("x", {"cron": "0 * * * *", "class": "X"})
    t0 = start(client)
    run(client, STORE_ONLY, now=t0)
    top = fire_times("0 * * * *", after=t0, until=t0 + timedelta(hours=1))[0]
    assert run(client, STORE_ONLY, now=top + timedelta(seconds=10)).pushed == 1
    store.put("x", {"cron": "*/15 * * * *", "class": "X"})  # the next top came and went
    mark = getattr(stored_mark(client, "x"), "mark_ms", 0)
    assert mark == to_ms(top + timedelta(hours=1)) - 1
    until = top + timedelta(hours=1, minutes=31)
    run(client, STORE_ONLY, now=until)
    assert jids(client) == [jid("x", top), *cron_jids("x", "*/15 * * * *",
                                                       top + timedelta(minutes=59), until)]


def test_a_changed_zone_applies_after_the_change(client: redis.Redis) -> None:
    store = Store(client)
    store.put("z", {"cron": "0 9 * * *", "tz": "UTC", "class": "Z"})
    run(client, STORE_ONLY)
    changed_at = redis_now(client)
    store.put("z", {"cron": "0 9 * * *", "tz": "Asia/Kolkata", "class": "Z"})  # 03:30 UTC
    assert run(client, STORE_ONLY).pushed == 0
    kolkata = fire_times("0 9 * * *", tz="Asia/Kolkata", after=changed_at,
                         until=changed_at + timedelta(days=1))[0]
    got = store.get("z")
    assert got is not None and got.next_tick == kolkata
    assert client.zscore(DUE, "z") == to_ms(kolkata)


def test_a_paused_schedule_keeps_its_watermark_moving_and_resuming_pushes_only_later_ticks(
    client: redis.Redis,
) -> None:
    """Pausing and resuming are changes at the Redis clock: this runs on it (every second)."""
    store = Store(client)
    store.put("x", {"every": "1s", "class": "X"})
    run(client, STORE_ONLY)
    room_before_boundary(client, 1, 1)  # just past a whole second: it comes due, and the
    # next run and the pause share the second that follows
    assert run(client, STORE_ONLY).pushed >= 1
    before = set(jids(client))
    paused_at = redis_now(client)
    assert store.pause("x") is True
    assert store.pause("x") is False
    for _ in range(2):
        advance_clock(client, 1.1)
        paused = run(client, STORE_ONLY)
        assert paused.pushed == 0 and paused.skipped >= 1
    resumed_at = redis_now(client)  # read first: the resume is at or after it
    assert store.resume("x") is True
    advance_clock(client, 1.1)
    assert run(client, STORE_ONLY).pushed >= 1
    new = set(jids(client)) - before
    seconds = range(int(paused_at.timestamp()) - 1, int(redis_now(client).timestamp()) + 1)
    pushed = {t for t in (datetime.fromtimestamp(s, tz=UTC) for s in seconds)
              if jid("x", t) in new}
    assert pushed and min(pushed) > resumed_at  # none from the pause
    assert client.hget("kiqbeat:missed", "x") is None  # nothing was owed at the pause


def test_removal_forgets_the_state_and_a_re_added_schedule_starts_afresh(
    client: redis.Redis,
) -> None:
    store, t0 = registered(client)
    run(client, STORE_ONLY, now=t0 + timedelta(minutes=2))
    assert store.remove("x") is True
    assert forgotten(client, "x")
    assert store.get("x") is None
    assert store.remove("x") is False
    assert run(client, STORE_ONLY, now=t0 + timedelta(minutes=3)).schedules == 0

    store.put("x", MINUTELY)
    again = t0 + timedelta(minutes=10)
    assert run(client, STORE_ONLY, now=again).new_schedules == 1
    assert getattr(stored_mark(client, "x"), "first_seen_ms", None) == to_ms(again)
    run(client, STORE_ONLY, now=again + timedelta(minutes=3))
    # Nothing from between the removal and the new first-seen.
    assert jids(client) == [*cron_jids("x", "* * * * *", t0, t0 + timedelta(minutes=2)),
                            *cron_jids("x", "* * * * *", again, again + timedelta(minutes=3))]


def test_plain_commands_remove_and_re_add_a_schedule(client: redis.Redis) -> None:
    """The protocol for other languages: HDEL + ZADD 0 removes, HSET + ZADD 0 adds."""
    client.hset(SCHEDULES, "x", json.dumps(MINUTELY))
    client.zadd(DUE, {"x": 0})
    t0 = start(client)
    assert run(client, STORE_ONLY, now=t0).new_schedules == 1
    run(client, STORE_ONLY, now=t0 + timedelta(minutes=2))
    client.hdel(SCHEDULES, "x")
    client.zadd(DUE, {"x": 0})
    gone = run(client, STORE_ONLY, now=t0 + timedelta(minutes=3))
    assert gone.pushed == 0
    assert forgotten(client, "x")
    client.hset(SCHEDULES, "x", json.dumps(MINUTELY))
    client.zadd(DUE, {"x": 0})
    again = t0 + timedelta(minutes=10)
    assert run(client, STORE_ONLY, now=again).new_schedules == 1
    run(client, STORE_ONLY, now=again + timedelta(minutes=2))
    assert jids(client) == [*cron_jids("x", "* * * * *", t0, t0 + timedelta(minutes=2)),
                            *cron_jids("x", "* * * * *", again, again + timedelta(minutes=2))]


def test_plain_commands_removing_and_re_adding_before_an_invocation_only_change_it(
    client: redis.Redis,
) -> None:
    """Removed and written again before any invocation saw it gone: merely changed."""
    client.hset(SCHEDULES, "x", json.dumps(MINUTELY))
    client.zadd(DUE, {"x": 0})
    t0 = start(client)
    run(client, STORE_ONLY, now=t0)
    run(client, STORE_ONLY, now=t0 + timedelta(minutes=2))
    client.hdel(SCHEDULES, "x")
    client.zadd(DUE, {"x": 0})
    client.hset(SCHEDULES, "x", json.dumps({**MINUTELY, "args": ["back"]}))
    client.zadd(DUE, {"x": 0})
    until = t0 + timedelta(minutes=5)
    report = run(client, STORE_ONLY, now=until)
    assert report.new_schedules == 0
    assert getattr(stored_mark(client, "x"), "first_seen_ms", None) == to_ms(t0)
    assert jids(client) == cron_jids("x", "* * * * *", t0, until)


# ---------------------------------------------------------------------------- races


def test_racing_writers_and_invokers_push_each_tick_at_most_once_and_a_steady_stretch_once(
    redis_url: str,
) -> None:
    """Writers change `x` and `y` while three engines replay an hour. In the first half
    hour one writer pauses and resumes `x` while the others flip its cron; in the second
    they only change its args. `y`'s args change all along (each change leaves a group
    planned from the old definition stale). `y`, and `x` in the second half hour, never
    paused and their cron unchanged, get each tick exactly once; nothing gets one twice."""
    client = connect(redis_url)
    window = Config(schedules=(), missed_jobs_window_s=7200.0)
    store = Store(client, window_s=7200.0)
    x: dict[str, Any] = {**MINUTELY, "class": "XWorker"}
    y: dict[str, Any] = {**MINUTELY, "class": "YWorker"}
    store.put("x", x)
    store.put("y", y)
    t0 = start(client)
    base = t0 - timedelta(seconds=5)
    run(client, window, now=t0)
    failures = Failures()

    def invoker(seed: int, minutes: range) -> Callable[[], None]:
        def body() -> None:
            rng = random.Random(seed)
            own = connect(redis_url)
            engine = Engine(client=own)
            for minute in minutes:
                for _ in range(3):
                    at = base + timedelta(minutes=minute, seconds=rng.uniform(0, 40))
                    assert engine.run(window, now=at).missed == 0
                    time.sleep(0.001)  # let the writers in
            own.close()
        return body

    def writer(stop: threading.Event, seed: int, pausing: bool, flip_cron: bool
               ) -> Callable[[], None]:
        def body() -> None:
            rng = random.Random(seed)
            own = Store(connect(redis_url), window_s=7200.0)
            n = 0
            while not stop.is_set():
                n += 1
                own.put("y", {**y, "args": [seed, n]})
                if pausing:
                    try:
                        (own.pause if n % 2 else own.resume)("x")
                    except ConfigError as exc:  # the other writers kept winning: allowed
                        assert "kept changing" in str(exc)
                else:
                    flip = flip_cron and rng.random() < 0.5
                    own.put("x", {**x, "cron": "*/2 * * * *" if flip else x["cron"],
                                  "args": [seed, n]})
                own.put("y", {**y, "args": [seed, n]})  # the same again: no change
                time.sleep(rng.uniform(0, 0.003))
            own.client.close()
        return body

    for half, minutes in ((1, range(1, 31)), (2, range(31, 61))):
        stop = threading.Event()
        writers = [failures.thread(writer(stop, 10 * half + k, pausing=half == 1 and k == 0,
                                          flip_cron=half == 1)) for k in range(3)]
        for w in writers:
            w.start()
        run_all([failures.thread(invoker(100 * half + k, minutes)) for k in range(3)],
                failures)
        stop.set()
        for w in writers:
            w.join(timeout=30)
        failures.check()
        store.put("x", x)  # resumed, its cron back to every minute
        if half == 1:  # the change owes ticks after the old cron's next one (no backfill)
            steady_after = from_ms(getattr(stored_mark(client, "x"), "mark_ms", 0))
    end = base + timedelta(minutes=60, seconds=50)
    run(client, window, now=end)  # picks up any group left stale by the last writes

    jobs = pushed_jobs(client)
    pushed = [j["jid"] for j in jobs]
    assert len(pushed) == len(set(pushed)), "a tick was pushed twice"
    x_jids = {j["jid"] for j in jobs if j["class"] == "XWorker"}
    y_jids = [j["jid"] for j in jobs if j["class"] == "YWorker"]
    assert len(x_jids) + len(y_jids) == len(jobs)
    assert sorted(y_jids) == sorted(cron_jids("y", "* * * * *", t0, end))
    assert x_jids <= set(cron_jids("x", "* * * * *", t0, end))
    steady = cron_jids("x", "* * * * *",
                       max(base + timedelta(minutes=30, seconds=59), steady_after), end)
    assert set(steady) <= x_jids, "a tick of x's steady half hour was lost"
    client.close()


def test_a_document_change_racing_an_api_pause_leaves_the_documents_definition_paused(
    redis_url: str,
) -> None:
    """The document changes `x`'s cron while the pause is written: the pause never writes
    the old cron back (the document would believe its change applied), and the document's
    write leaves the schedule paused (the pause is a record of its own)."""
    client = connect(redis_url)
    source = "s3://bucket/schedules.yaml"

    def doc(cron: str) -> Config:
        return load_config_text(json.dumps(
            {"schedules": {"x": {"cron": cron, "class": "X"}}}), source=source)

    v1, v2 = doc("* * * * *"), doc("*/2 * * * *")
    t0 = start(client)
    run(client, v1, now=t0)
    run(client, v1, now=t0 + timedelta(minutes=2))

    class ChangeAfterFirstRead(redis.Redis):
        """A client on which the document changes right after the pause's first read."""

        hook: Callable[[], Any] | None = None

        def execute_command(self, *args: Any, **options: Any) -> Any:
            value = super().execute_command(*args, **options)
            if args[0] != "EVALSHA":  # the first script call: reading the definition
                return value
            hook, ChangeAfterFirstRead.hook = ChangeAfterFirstRead.hook, None
            if hook is not None:
                hook()
            return value

    hooked = ChangeAfterFirstRead.from_url(redis_url)
    ChangeAfterFirstRead.hook = lambda: run(client, v2, now=t0 + timedelta(minutes=3))
    assert Store(hooked).pause("x") is True
    assert ChangeAfterFirstRead.hook is None, "the document change did run in between"
    definition = stored(client, "x")
    assert (definition["cron"], definition["source"]) == ("*/2 * * * *", source)
    assert "enabled" not in definition and client.hexists("kiqbeat:paused", "x")
    assert client.hget(DOCUMENTS, source) == Document.of(v2).digest.encode()

    assert run(client, v2, now=t0 + timedelta(minutes=6)).pushed == 0
    assert Store(client).resume("x") is True
    resumed = Store(client).get("x")
    # Resumed at the Redis clock (after every replayed instant): the pause owes nothing.
    assert resumed is not None and resumed.covered_through is not None
    assert resumed.covered_through >= redis_now(client) - timedelta(seconds=5)
    # Paused before the document's change ran: nothing after t0 + 2 min.
    assert jids(client) == cron_jids("x", "* * * * *", t0, t0 + timedelta(minutes=2))
    hooked.close()
    client.close()


def test_document_changes_racing_api_pauses_stay_consistent_without_duplicates(
    redis_url: str,
) -> None:
    """Each step, a document changes `x`'s cron while the API pauses or resumes it, started
    together, the API after a random delay of about one document application."""
    client = connect(redis_url)
    source = "file:///etc/kiqbeat/schedules.yaml"
    crons = ["* * * * *", "*/2 * * * *", "*/3 * * * *"]

    def doc(cron: str) -> Config:
        return load_config_text(json.dumps(
            {"schedules": {"x": {"cron": cron, "class": "X"}}}), source=source)

    t0 = start(client)
    engine = Engine(client=client)
    engine.run(doc(crons[0]), now=t0)
    api = Store(connect(redis_url))
    rng = random.Random(5)
    failures = Failures()
    steps = 60
    for step in range(1, steps + 1):
        cfg = doc(crons[step % len(crons)])
        gate = threading.Barrier(2)
        delay_s = rng.uniform(0, 0.003)

        def apply_document(cfg: Config = cfg, step: int = step,
                           gate: threading.Barrier = gate) -> None:
            gate.wait()
            engine.run(cfg, now=t0 + timedelta(minutes=step))

        def toggle(step: int = step, gate: threading.Barrier = gate,
                   delay_s: float = delay_s) -> None:
            gate.wait()
            time.sleep(delay_s)
            (api.pause if step % 2 else api.resume)("x")

        run_all([failures.thread(apply_document), failures.thread(toggle)], failures)
        definition = stored(client, "x")
        # The document's cron, whichever write came last; never the one it replaced.
        assert (definition["cron"], definition["source"]) == (crons[step % len(crons)], source)
        assert client.hget(DOCUMENTS, source) == Document.of(cfg).digest.encode()
    api.resume("x")
    end = t0 + timedelta(minutes=steps + 5)
    engine.run(doc(crons[steps % len(crons)]), now=end)
    pushed = jids(client)
    assert len(pushed) == len(set(pushed)), "a tick was pushed twice"
    assert set(pushed) <= set(cron_jids("x", "* * * * *", t0, end))
    api.client.close()
    client.close()


def test_a_definition_changed_between_read_and_push_is_left_alone_and_planned_afresh(
    client: redis.Redis,
) -> None:
    store = Store(client)
    store.put("x", MINUTELY)
    store.put("y", {**MINUTELY, "class": "Other"})
    t0 = start(client)
    run(client, STORE_ONLY, now=t0)
    now = t0 + timedelta(minutes=3)
    batch = RedisSide(client).read_due(None, upto_ms=to_ms(now)).entries
    assert sorted(due.name for due in batch) == ["x", "y"]
    entries = [Entry(read_definition(due.name, due.definition), due.mark_ms,
                     definition_sha(due.definition))
               for due in batch if due.definition is not None]
    plan = plan_due(entries, now, STORE_ONLY.missed_jobs_window_s)

    store.put("x", {"cron": "*/2 * * * *", "class": "NewWorker"})  # between read and push
    report = Report(now=now)
    push_plan(client, plan, STORE_ONLY, report, time.monotonic() + 30)
    assert (report.stale, report.pushed) == (1, 3)
    assert {job.schedule for job in report.jobs} == {"y"}
    assert client.zscore(DUE, "x") == 0, "x's index entry still says 'plan me'"
    # Changing it moved the mark up to just before the old cron's next (unpushed) tick.
    next_tick = minute_floor(t0) + timedelta(minutes=1)
    assert getattr(stored_mark(client, "x"), "mark_ms", None) == to_ms(next_tick) - 1

    again = run(client, STORE_ONLY, now=now)
    assert again.schedules == 1
    x_jobs = [j for j in pushed_jobs(client) if j["class"] != "Other"]
    assert [j["jid"] for j in x_jobs] == cron_jids("x", "*/2 * * * *", t0, now)
    assert {j["class"] for j in x_jobs} == {"NewWorker"}


def test_a_schedule_removed_between_read_and_push_is_not_pushed_nor_brought_back(
    client: redis.Redis,
) -> None:
    store, t0 = registered(client)
    now = t0 + timedelta(minutes=3)
    batch = RedisSide(client).read_due(None, upto_ms=to_ms(now)).entries
    entries = [Entry(read_definition(due.name, due.definition), due.mark_ms,
                     definition_sha(due.definition))
               for due in batch if due.definition is not None]
    plan = plan_due(entries, now, STORE_ONLY.missed_jobs_window_s)
    assert store.remove("x") is True  # between read and push
    report = Report(now=now)
    push_plan(client, plan, STORE_ONLY, report, time.monotonic() + 30)
    assert (report.stale, report.pushed) == (1, 0)
    assert pushed_jobs(client) == []
    assert forgotten(client, "x")


def test_a_schedule_removed_and_added_again_between_read_and_push_starts_afresh(
    client: redis.Redis,
) -> None:
    """The stale plan finds the watermark gone: it is left alone (no catch-up from before
    the re-add, no mark from the stale plan), and the next invocation registers it anew."""
    definition = MINUTELY
    store = Store(client)
    store.put("x", definition)
    t0 = start(client)
    run(client, STORE_ONLY, now=t0)
    now = t0 + timedelta(minutes=3)
    batch = RedisSide(client).read_due(None, upto_ms=to_ms(now)).entries
    entries = [Entry(read_definition(d.name, d.definition), d.mark_ms,
                     definition_sha(d.definition)) for d in batch if d.definition]
    plan = plan_due(entries, now, STORE_ONLY.missed_jobs_window_s)
    store.remove("x")
    store.put("x", definition)  # the same bytes again
    report = Report(now=now)
    push_plan(client, plan, STORE_ONLY, report, time.monotonic() + 30)
    assert (report.pushed, report.new_schedules) == (0, 0)
    assert stored_mark(client, "x") is None and client.zscore(DUE, "x") == 0
    assert run(client, STORE_ONLY, now=now).new_schedules == 1
    later = run(client, STORE_ONLY, now=now + timedelta(minutes=2))
    assert [jid("x", j.tick) for j in later.jobs] == cron_jids(
        "x", "* * * * *", now, now + timedelta(minutes=2))
    assert jids(client) == [jid("x", j.tick) for j in later.jobs], "nothing from before"


def test_every_is_bounded_so_no_tick_lies_beyond_the_representable_years(
    client: redis.Redis,
) -> None:
    with pytest.raises(ConfigError, match="longer than 100 years"):
        Store(client).put("far", {"every": "1000000w", "class": "W"})


def test_a_documents_stored_definitions_mean_what_the_document_means() -> None:
    """Each schedule's stored form, read back alone, is the same schedule (document-wide
    values written in exactly: a 12-day lookahead, a fractional one, the document's zone)."""
    cfg = load_config_text("""
missed_jobs_window: 14d
time_zone: Asia/Kolkata
lookahead: 12d
timestamp_format: ms
schedules:
  weekly: {cron: "0 9 * * 1", class: W}
  odd: {every: 7m, class: O, lookahead: 1234.5678s}
  own_zone: {cron: "0 9 * * * Europe/Paris", class: P}
""")
    for schedule in cfg.schedules:
        data = encode_definition(schedule.definition, "doc")
        assert read_definition(schedule.name, data, window_s=14 * 86_400) == schedule
    own = next(s for s in cfg.schedules if s.name == "own_zone")
    assert "tz" not in own.definition, "a cron's own zone is not written in as tz"


def test_a_document_apply_cut_off_half_way_is_completed_whatever_the_document_says_next(
    client: redis.Redis,
) -> None:
    """A 1,500-name change cut off after its first batch, then the document rolled back:
    the next invocation removes what the cut-off run wrote (no schedule left that no
    document owns), and nothing of it is pushed."""
    v1 = load_config_text("schedules:\n  keep: {cron: '* * * * *', class: K}\n",
                          source="s3://bucket/doc.yml")
    t0 = start(client)
    run(client, v1, now=t0)
    v2 = load_config_text("schedules:\n  keep: {cron: '* * * * *', class: K}\n" + "".join(
        f"  a{i}: {{cron: '* * * * *', class: A}}\n" for i in range(1500)),
        source="s3://bucket/doc.yml")
    doc = Document.of(v2)
    change = RedisSide(client).apply_document(  # only the first batch runs
        doc.source, doc.definitions, doc.digest, deadline=time.monotonic() - 1, now_ms=None)
    assert not change.finished and 1 < client.hlen(SCHEDULES) < 1501
    report = run(client, v1, now=t0 + timedelta(minutes=1))
    assert report.documents_applied == 1
    assert [text(n) for n in client.hkeys(SCHEDULES)] == ["keep"]
    assert client.zcard(DUE) == 1 and {j.schedule for j in report.jobs} == {"keep"}


def test_a_name_that_is_not_utf8_is_set_aside_without_sinking_the_invocation(
    redis_url: str,
) -> None:
    raw = redis.Redis.from_url(redis_url)  # bytes replies: what another language wrote
    raw.hset(SCHEDULES, b"n\xff", json.dumps(MINUTELY))
    raw.zadd(DUE, {b"n\xff": 0})
    Store(raw).put("ok", MINUTELY)
    report = run(raw, STORE_ONLY)
    assert (report.set_aside, report.new_schedules) == (1, 1)
    assert raw.hexists(REJECTED, b"n\xff") and raw.zrange(DUE, 0, -1) == [b"ok"]
    raw.close()


# ---------------------------------------------------------------------------- upgrade

OLD_DOCUMENT = """
missed_jobs_window: 1h
time_zone: Europe/Paris
schedules:
  minutely: {cron: "* * * * *", class: A}
  kolkata: {cron: "*/5 * * * *", tz: Asia/Kolkata, class: B}
  st_johns: {cron: "30 * * * * America/St_Johns", class: C}
  paris: {cron: "7,22,37,52 * * * *", class: D}
  seven: {every: 7m, class: E}
  fast: {cron: "*/10 * * * * *", class: F, lookahead: 60s}
  early: {cron: "* * * * *", class: G, lookahead: 90s}
"""

# What each schedule of OLD_DOCUMENT fires, independently of the engine: (after, until] ->
# instants; and its lookahead.
REFERENCE: dict[str, tuple[Callable[[datetime, datetime], list[datetime]], timedelta]] = {
    "minutely": (lambda a, b: fire_times("* * * * *", after=a, until=b), timedelta(0)),
    "kolkata": (lambda a, b: fire_times("*/5 * * * *", tz="Asia/Kolkata", after=a, until=b),
                timedelta(0)),
    "st_johns": (lambda a, b: fire_times("30 * * * *", tz="America/St_Johns", after=a,
                                         until=b), timedelta(0)),
    "paris": (lambda a, b: fire_times("7,22,37,52 * * * *", tz="Europe/Paris", after=a,
                                      until=b), timedelta(0)),
    "seven": (lambda a, b: every_ticks(7 * 60, a, b), timedelta(0)),
    "fast": (lambda a, b: fire_times("*/10 * * * * *", after=a, until=b), timedelta(seconds=60)),
    "early": (lambda a, b: fire_times("* * * * *", after=a, until=b), timedelta(seconds=90)),
}


@pytest.mark.parametrize("later", [timedelta(seconds=30), timedelta(minutes=17, seconds=41)])
def test_an_upgrade_from_the_old_layout_keeps_every_watermark(
    client: redis.Redis, later: timedelta,
) -> None:
    """A release before the bucketed state left watermarks, first-seen and history in three
    plain hashes (text); the new engine's first invocation migrates them whole into the
    buckets (redis/migrate.py) before it reads anything, then pushes exactly the ticks after
    each old watermark, once, keeping each first-seen and history; migrating again changes
    nothing."""
    cfg = load_config_text(OLD_DOCUMENT, source="schedules.yaml")
    assert {s.name for s in cfg.schedules} == set(REFERENCE)
    t = start(client) + timedelta(seconds=12)
    old_marks = {}
    for name, (ticks, lookahead) in REFERENCE.items():
        # After an invocation at t, the old release's mark was the last tick it covered.
        old_marks[name] = ticks(t - timedelta(hours=2), t + lookahead)[-1]
    seen_before = {n: to_ms(t - timedelta(days=1)) for n in REFERENCE}
    old_history = {n: f"t {to_ms(m)} 15\nm {to_ms(m) - 7000} 3 manual0123456789abcdef"
                   for n, m in old_marks.items()}
    client.hset(WATERMARKS, mapping={n: to_ms(m) for n, m in old_marks.items()})
    client.hset(FIRST_SEEN, mapping=seen_before)
    client.hset(keys.history(""), mapping=old_history)
    assert old_marks["fast"] > t and old_marks["early"] > t, "lookahead marks in the future"

    now = t + later
    report = run(client, cfg, now=now)
    assert (report.new_schedules, report.missed, report.documents_applied) == (0, 0, 1)
    expected = sorted(jid(n, tick) for n, (ticks, look) in REFERENCE.items()
                      for tick in ticks(old_marks[n], now + look))
    assert sorted(jids(client)) == expected
    first_seen = {n: m.first_seen_ms for n, m in all_marks(client, "").items()}
    assert first_seen == seen_before

    then = now + timedelta(seconds=50)
    run(client, cfg, now=then)
    expected = sorted(jid(n, tick) for n, (ticks, look) in REFERENCE.items()
                      for tick in ticks(old_marks[n], then + look))
    assert sorted(jids(client)) == expected
    first_seen = {n: m.first_seen_ms for n, m in all_marks(client, "").items()}
    assert first_seen == seen_before
    histories = progress.read_histories(client, "", list(REFERENCE))
    assert set(histories) == set(REFERENCE)
    for name, pushed in histories.items():  # the old lines under the new pushes, as room allows
        record = history_text(pushed)
        lines, old = record.splitlines(), old_history[name].splitlines()
        kept = [line for line in lines if line in old]
        assert lines[len(lines) - len(kept):] == old[:len(kept)], (name, record)
        assert len(lines) == 10 or kept == old, (name, record)
    # Migrated whole by the first invocation: nothing of the old layout is left, and a
    # second migration changes nothing.
    assert client.exists(WATERMARKS, FIRST_SEEN, keys.history("")) == 0
    jobs = pushed_jobs(client)
    assert len({job["jid"] for job in jobs}) == len(jobs)
    before = {key: client.dump(key) for key in client.scan_iter()}
    assert migrate_layout(client, "") == []
    assert {key: client.dump(key) for key in client.scan_iter()} == before


def test_migrating_the_old_layout_twice_changes_nothing_and_a_garbled_mark_costs_its_schedule(
    client: redis.Redis,
) -> None:
    """redis/migrate.py: each name's old state becomes one bucket record (a record already
    there, written later, is kept); a watermark that is not a whole number is named and not
    carried over; the old hashes are gone after it, and a second run changes nothing."""
    client.hset(WATERMARKS, mapping={"a": 1_700_000_060_000, "b": "12x", "c": 5})
    client.hset(FIRST_SEEN, mapping={"a": 1_700_000_000_000, "b": 7, "only_seen": 9})
    client.hset(keys.history(""), mapping={"a": "t 1700000060000 15\nt 1700000000000 3",
                                            "b": "t 1700000000000 4"})
    write_marks(client, "", {"c": progress.Mark(99, 1)})  # newer than the old "5"
    warnings = migrate_layout(client, "")
    assert len(warnings) == 1 and "schedule b:" in warnings[0] and "kiqbeat:watermarks" in \
        warnings[0], warnings
    assert client.exists(WATERMARKS, FIRST_SEEN, keys.history("")) == 0
    assert progress.read_marks(client, "", ["a", "b", "c", "only_seen"]) == {
        "a": progress.Mark(1_700_000_060_000, 1_700_000_000_000), "c": progress.Mark(99, 1)}
    assert {n: history_text(h) for n, h in progress.read_histories(client, "", ["a", "b"]).items()
            } == {"a": "t 1700000060000 15\nt 1700000000000 3", "b": "t 1700000000000 4"}
    before = {key: client.dump(key) for key in client.scan_iter()}
    assert migrate_layout(client, "") == []
    assert {key: client.dump(key) for key in client.scan_iter()} == before


# ---------------------------------------------------------------------------- set aside

BAD_DEFINITIONS = {
    "bad_cron": (json.dumps({"cron": "61 * * * *", "class": "A"}), "minute field '61'"),
    "not_json": ("{nope", "not JSON"),
    "array": ("[1, 2]", "must be a JSON object"),
    "deep": ("[" * 30_000 + "]" * 30_000, "not JSON"),  # under the size limit
}


def test_an_invalid_definition_written_with_plain_commands_is_set_aside_and_the_rest_run(
    client: redis.Redis,
) -> None:
    store = Store(client)
    store.put("good", MINUTELY)
    t0 = start(client)
    run(client, STORE_ONLY, now=t0)
    for name, (raw, _) in BAD_DEFINITIONS.items():
        client.hset(SCHEDULES, name, raw)
        client.zadd(DUE, {name: 0})
    report = run(client, STORE_ONLY, now=t0 + timedelta(minutes=5))
    assert (report.pushed, report.set_aside) == (5, len(BAD_DEFINITIONS))
    rejected = {text(k): text(v) for k, v in client.hgetall(REJECTED).items()}
    assert set(rejected) == set(BAD_DEFINITIONS)
    for name, (_, why) in BAD_DEFINITIONS.items():
        assert why in rejected[name] and repr(name) in rejected[name]
        assert any(repr(name) in w and "set aside" in w for w in report.warnings)
        assert client.zscore(DUE, name) is None
    later = run(client, STORE_ONLY, now=t0 + timedelta(minutes=6))
    assert (later.pushed, later.set_aside, later.warnings) == (1, 0, [])

    store.put("bad_cron", {"cron": "*/2 * * * *", "class": "A"})  # fixed through the API
    client.hset(SCHEDULES, "not_json", json.dumps(MINUTELY))  # fixed with plain commands
    client.zadd(DUE, {"not_json": 0})
    fixed_at = t0 + timedelta(minutes=7)
    assert run(client, STORE_ONLY, now=fixed_at).new_schedules == 2
    until = t0 + timedelta(minutes=12)
    run(client, STORE_ONLY, now=until)
    pushed = jids(client)
    assert sorted(pushed) == sorted([
        *cron_jids("good", "* * * * *", t0, until),
        *cron_jids("bad_cron", "*/2 * * * *", fixed_at, until),
        *cron_jids("not_json", "* * * * *", fixed_at, until)])
    assert not client.hexists(REJECTED, "bad_cron")


def test_a_definition_fixed_with_plain_commands_is_no_longer_set_aside(
    client: redis.Redis,
) -> None:
    client.hset(SCHEDULES, "x", "{nope")
    client.zadd(DUE, {"x": 0})
    t0 = start(client)
    assert run(client, STORE_ONLY, now=t0).set_aside == 1
    client.hset(SCHEDULES, "x", json.dumps(MINUTELY))
    client.zadd(DUE, {"x": 0})
    assert run(client, STORE_ONLY, now=t0 + timedelta(minutes=1)).new_schedules == 1
    status = Store(client).status()
    assert (status.counts.set_aside, status.set_aside) == (0, [])
    assert not client.hexists(REJECTED, "x")


def test_a_schedule_set_aside_keeps_its_watermark_and_once_fixed_catches_up(
    client: redis.Redis,
) -> None:
    """Broken by a plain write, it is set aside; fixed five minutes later, it catches up
    the ticks of the meantime, as after downtime."""
    client.hset(SCHEDULES, "x", json.dumps(MINUTELY))
    client.zadd(DUE, {"x": 0})
    t0 = start(client)
    run(client, STORE_ONLY, now=t0)
    run(client, STORE_ONLY, now=t0 + timedelta(minutes=1))
    client.hset(SCHEDULES, "x", json.dumps({**MINUTELY, "quue": "critical"}))
    client.zadd(DUE, {"x": 0})
    broken = run(client, STORE_ONLY, now=t0 + timedelta(minutes=2))
    assert (broken.set_aside, broken.pushed) == (1, 0)
    assert "did you mean 'queue'" in text(client.hget(REJECTED, "x") or b"")
    assert run(client, STORE_ONLY, now=t0 + timedelta(minutes=4)).schedules == 0
    client.hset(SCHEDULES, "x", json.dumps({**MINUTELY, "queue": "critical"}))
    client.hdel(REJECTED, "x")
    client.zadd(DUE, {"x": 0})
    until = t0 + timedelta(minutes=6)
    fixed = run(client, STORE_ONLY, now=until)
    assert (fixed.new_schedules, fixed.pushed) == (0, 5)
    assert sorted(jids(client)) == sorted(cron_jids("x", "* * * * *", t0, until))
    assert sorted(j["queue"] for j in pushed_jobs(client)) == ["critical"] * 5 + ["default"]


# ---------------------------------------------------------------------------- shards


def shard_names(names: list[str], index: int, count: int) -> set[str]:
    """The names of shard `index` of `count`, by the documented hash."""
    return {n for n in names if zlib.crc32(n.encode()) % count == index}


def test_three_shards_plan_disjoint_sets_whose_union_is_the_store(client: redis.Redis) -> None:
    names = [f"tenant:{i}" for i in range(30)]
    engines = [Engine(Settings(shard=(i, 3)), client=client) for i in range(3)]
    store = engines[0].store(STORE_ONLY)
    assert store.import_definitions((n, MINUTELY) for n in names).written == len(names)
    t0 = start(client)
    registered: set[str] = set()
    for i, engine in enumerate(engines):
        assert engine.run(STORE_ONLY, now=t0).new_schedules == len(shard_names(names, i, 3))
        now_known = set(all_marks(client, ""))
        assert now_known - registered == shard_names(names, i, 3)
        registered = now_known
    until = t0 + timedelta(minutes=3)
    for i, engine in enumerate(engines):
        report = engine.run(STORE_ONLY, now=until)
        assert {job.schedule for job in report.jobs} == shard_names(names, i, 3)
    assert sorted(jids(client)) == sorted(j for n in names
                                          for j in cron_jids(n, "* * * * *", t0, until))


def test_racing_shard_engines_push_each_tick_once(redis_url: str) -> None:
    """Three engines per shard, all first meeting the store at the same instant, replay a
    quarter of an hour together: each pushes only its shard's schedules, and between
    them every tick of every schedule is pushed once."""
    client = connect(redis_url)
    crons = {f"tenant:{i}": "*/2 * * * *" if i % 3 else "* * * * *" for i in range(40)}
    names = list(crons)
    Store(client, shards=3).import_definitions(
        (n, {"cron": c, "class": "T"}) for n, c in crons.items())
    t0 = start(client)
    base = t0 - timedelta(seconds=5)
    failures = Failures()
    pushed_by: dict[int, set[str]] = {0: set(), 1: set(), 2: set()}
    lock = threading.Lock()

    def engine(index: int, seed: int) -> Callable[[], None]:
        def body() -> None:
            rng = random.Random(seed)
            own = connect(redis_url)
            eng = Engine(Settings(shard=(index, 3)), client=own)
            instants = [t0] + [base + timedelta(minutes=m, seconds=rng.uniform(0, 50))
                               for m in range(1, 16) for _ in range(2)]
            for at in instants:
                report = eng.run(STORE_ONLY, now=at)
                with lock:
                    pushed_by[index].update(job.schedule for job in report.jobs)
            own.close()
        return body

    run_all([failures.thread(engine(i, 7 * i + k)) for i in range(3) for k in range(3)],
            failures)
    until = base + timedelta(minutes=15, seconds=50)
    for i in range(3):
        Engine(Settings(shard=(i, 3)), client=client).run(STORE_ONLY, now=until)
    for i in range(3):
        assert pushed_by[i] == shard_names(names, i, 3)
    assert {m.first_seen_ms for m in all_marks(client, "").values()} == {to_ms(t0)}
    pushed = jids(client)
    assert len(pushed) == len(set(pushed)), "a tick was pushed twice"
    assert set(pushed) == {j for n, c in crons.items() for j in cron_jids(n, c, t0, until)}
    client.close()


# ---------------------------------------------------------------------------- ownership

OWNED = """
schedules:
  x: {cron: "* * * * *", class: DocX}
  y: {cron: "* * * * *", class: DocY, args: [document]}
"""


def test_the_api_may_pause_but_not_change_or_remove_a_documents_schedule(
    client: redis.Redis,
) -> None:
    source = "s3://bucket/schedules.yaml"
    cfg = load_config_text(OWNED, source=source)
    t0 = start(client)
    run(client, cfg, now=t0)
    store = Store(client)
    attempts: list[Callable[[], object]] = [
        lambda: store.update("x", {**MINUTELY, "class": "Api"}),
        lambda: store.put("x", {**MINUTELY, "class": "Api"}),
        lambda: store.remove("x")]
    for attempt in attempts:
        with pytest.raises(ConfigError, match=re.escape(f"belongs to {source}")):
            attempt()
    assert stored(client, "x")["class"] == "DocX"
    assert store.pause("x") is True
    # The unchanged document, met again, leaves the pause alone.
    paused = run(client, cfg, now=t0 + timedelta(minutes=2))
    assert paused.documents_applied == 0 and client.hexists("kiqbeat:paused", "x")
    assert {job.schedule for job in paused.jobs} == {"y"}
    assert store.resume("x") is True
    run(client, cfg, now=t0 + timedelta(minutes=3))
    assert jids_of_class(client, "DocX") == [], "none while paused"
    resumed = store.get("x")  # resumed at the Redis clock: the pause owes nothing
    assert resumed is not None and resumed.enabled and resumed.covered_through is not None
    assert resumed.covered_through >= redis_now(client) - timedelta(seconds=5)


def test_a_document_cannot_take_over_or_remove_an_api_schedule_of_the_same_name(
    client: redis.Redis,
) -> None:
    store = Store(client)
    store.put("y", {**MINUTELY, "class": "ApiWorker", "args": ["api"]})
    cfg = load_config_text(OWNED, source="schedules.yaml")
    t0 = start(client)
    report = run(client, cfg, now=t0)
    assert [w for w in report.warnings if "'y'" in w and "not applied" in w], report.warnings
    assert "source" not in stored(client, "y")
    assert stored(client, "y")["class"] == "ApiWorker"
    run(client, cfg, now=t0 + timedelta(minutes=2))
    without_y = load_config_text(OWNED.replace(
        "  y: {cron: \"* * * * *\", class: DocY, args: [document]}\n", ""),
        source="schedules.yaml")
    assert {s.name for s in without_y.schedules} == {"x"}
    removed = run(client, without_y, now=t0 + timedelta(minutes=3))
    assert removed.documents_applied == 1
    assert stored(client, "y")["class"] == "ApiWorker"
    until = t0 + timedelta(minutes=5)
    run(client, without_y, now=until)
    assert jids_of_class(client, "DocY") == []
    assert jids_of_class(client, "ApiWorker") == cron_jids("y", "* * * * *", t0, until)
    assert {tuple(j["args"]) for j in pushed_jobs(client) if j["class"] == "ApiWorker"} \
        == {("api",)}


@pytest.mark.parametrize("taker", ["another document", "a hand write"])
def test_a_document_that_lost_a_name_still_removes_its_own(
    client: redis.Redis, taker: str,
) -> None:
    """Its removal of the lost name is refused, yet its index is recorded as applied: each
    later version of the document removes the names it dropped (found by the compat suite,
    where a file's schedules left a text document's dropped names ticking forever)."""
    t0 = start(client)
    run(client, load_config_text(OWNED, source="a.yaml"), now=t0)
    if taker == "another document":
        run(client, load_config_text("schedules:\n  x: {cron: \"* * * * *\", class: DocB}\n",
                                     source="b.yaml"), now=t0)
    else:
        client.hset(SCHEDULES, "x", json.dumps({**MINUTELY, "class": "HandX"}))
    for minute, kept in enumerate(["z", "w"], start=1):
        version = f"schedules:\n  {kept}: {{cron: \"* * * * *\", class: Doc}}\n"
        report = run(client, load_config_text(version, source="a.yaml"),
                     now=t0 + timedelta(minutes=minute))
        assert report.documents_applied == 1
    assert sorted(text(n) for n in client.hkeys(SCHEDULES)) == ["w", "x"]
    assert stored(client, "w").get("source") == "a.yaml"
    assert stored(client, "x").get("source") == ("b.yaml" if taker == "another document"
                                                 else None)


def test_a_refusal_in_an_early_batch_of_a_long_diff_still_records_the_document(
    client: redis.Redis,
) -> None:
    """A diff written in several calls, whose first call meets a name another document
    took: the later versions still remove every name they drop."""
    def version(first: int, last: int) -> Config:
        return load_config_text("schedules:\n" + "".join(
            f"  n{i:03d}: {{cron: '0 * * * *', class: W}}\n" for i in range(first, last)),
            source="a.yaml")
    t0 = start(client)
    run(client, version(0, 450), now=t0)
    run(client, load_config_text("schedules:\n  n000: {cron: '0 * * * *', class: B}\n",
                                 source="b.yaml"), now=t0)
    # 200 removals (n000's refused, in the first call) and 200 additions: two calls.
    run(client, version(200, 650), now=t0 + timedelta(minutes=1))
    run(client, version(300, 650), now=t0 + timedelta(minutes=2))
    assert sorted(text(n) for n in client.hkeys(SCHEDULES)) == [
        "n000", *(f"n{i:03d}" for i in range(300, 650))]
    assert stored(client, "n000").get("source") == "b.yaml"


def test_a_documents_schedule_written_over_by_hand_becomes_the_apis(
    client: redis.Redis,
) -> None:
    """A plain write without `source` takes the name from the document; the document's next
    change to it is refused with a warning naming it."""
    cfg = load_config_text(OWNED, source="schedules.yaml")
    t0 = start(client)
    run(client, cfg, now=t0)
    client.hset(SCHEDULES, "x", json.dumps({**MINUTELY, "class": "HandX"}))
    client.zadd(DUE, {"x": 0})
    run(client, cfg, now=t0 + timedelta(minutes=1))
    changed = load_config_text(OWNED.replace("class: DocX", "class: DocX2"),
                               source="schedules.yaml")
    report = run(client, changed, now=t0 + timedelta(minutes=2))
    assert [w for w in report.warnings if "'x'" in w and "not applied" in w], report.warnings
    assert stored(client, "x")["class"] == "HandX"
    assert jids_of_class(client, "DocX2") == []
    assert jids_of_class(client, "HandX") == cron_jids("x", "* * * * *", t0,
                                                       t0 + timedelta(minutes=2))


# ---------------------------------------------------------------------------- validation

BAD_SCHEDULES: list[Mapping[str, Any]] = [
    {"cron": "61 * * * *", "class": "A"},
    {"cron": "* * * * *", "class": "A", "quue": "critical"},
    {"cron": "* * * * *"},
    {"every": "0s", "class": "A"},
    {"cron": "0 9 * * *", "tz": "Mars/Olympus", "class": "A"},
    {"cron": "* * * * *", "every": "5m", "class": "A"},
    {"cron": "* * * * *", "class": "A", "queue": "", "retry": "maybe"},
    {"cron": "* * * * *", "class": "A", "payload": {"jid": "mine"}},
    {"cron": "* * * * *", "class": "A", "catch_up": "sometimes", "args": "one"},
    {"cron": "* * * * *", "class": "A", "lookahead": "2h"},
]


@pytest.mark.parametrize("definition", BAD_SCHEDULES, ids=lambda d: json.dumps(d)[:40])
def test_the_store_api_refuses_a_bad_schedule_with_a_documents_messages(
    client: redis.Redis, definition: Mapping[str, Any],
) -> None:
    with pytest.raises(ConfigError) as from_document:
        load_config_text(json.dumps({"schedules": {"report": definition}}))
    store = Store(client)
    for write in (store.check, store.add, store.put):
        with pytest.raises(ConfigError) as from_api:
            write("report", definition)
        assert from_api.value.problems == from_document.value.problems
    result = store.import_definitions([("report", definition)])
    assert result.invalid == [("report", "; ".join(from_document.value.problems))]
    assert client.exists(SCHEDULES, DUE) == 0, "nothing written"


def test_changing_the_shard_count_is_refused_until_reindexed_and_then_loses_no_tick(
    client: redis.Redis,
) -> None:
    """A store run unsharded, then split in two: invocations and writers with the new count
    are refused (naming the recorded count) until `reindex`, after which each tick is pushed
    once by its shard."""
    names = [f"tenant:{i}" for i in range(20)]
    Store(client).import_definitions((n, MINUTELY) for n in names)
    t0 = start(client)
    run(client, STORE_ONLY, now=t0)
    shards = [Engine(Settings(shard=(i, 2)), client=client) for i in range(2)]
    late = t0 + timedelta(minutes=2)
    for engine in shards:
        with pytest.raises(ConfigError, match=r"split into 1 shard\(s\).*runs with 2"):
            engine.run(STORE_ONLY, now=late)
    with pytest.raises(ConfigError, match="split into 1 shard"):
        Store(client, shards=2).put("late", MINUTELY)
    assert Store(client).shards == 1 and jids(client) == []
    assert Store(client, shards=2).reindex() == len(names)
    assert client.exists(DUE) == 0 and client.get("kiqbeat:shards") == b"2"
    assert Store(client).shards == 2
    after = [engine.run(STORE_ONLY, now=late) for engine in shards]
    assert [{j.schedule for j in r.jobs} for r in after] == [
        shard_names(names, 0, 2), shard_names(names, 1, 2)]
    assert sorted(jids(client)) == sorted(j for n in names
                                          for j in cron_jids(n, "* * * * *", t0, late))
    status = Store(client).status()
    assert (status.counts.schedules, status.counts.indexed) == (20, 20)


def test_every_change_of_a_long_import_takes_the_instant_of_one_clock_read(
    client: redis.Redis,
) -> None:
    """An import of many calls moves each changed schedule's watermark up to the same
    instant, read once before the first write, whatever the time each call runs at."""
    store = Store(client)
    yearly = {"cron": "0 0 1 1 *", "class": "Y"}  # next tick months away: the cut is `now`
    names = [f"y{i:04d}" for i in range(1000)]  # five write calls
    store.import_definitions((n, yearly) for n in names)
    run(client, STORE_ONLY, now=start(client))  # registered hours ago
    before = redis_now(client)
    store.import_definitions((n, {**yearly, "queue": "other"}) for n in names)
    after = redis_now(client)
    marks = {row.covered_through for row in store.rows(names)}
    assert len(marks) == 1
    (mark,) = marks
    # The cut is the instant less 1 ms, and the instant is in whole milliseconds.
    assert mark is not None and before - timedelta(milliseconds=2) <= mark <= after


def test_an_import_stopped_by_its_items_leaves_every_connection_clean_and_calls_whole(
    client: redis.Redis,
) -> None:
    """A write call is in flight while the next definitions are checked: an error there
    must leave no reply unread on a pooled connection, and the calls sent whole."""
    store = Store(client)

    def items() -> Any:
        for i in range(450):
            yield f"s{i:03d}", MINUTELY
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError, match="the source broke"):
        store.import_definitions(items())
    written = client.hlen(SCHEDULES)
    assert written in (300, 400)  # whole calls of WRITE_BATCH (100): the one in flight or not
    assert client.zcard(DUE) == written
    for _ in range(5):  # every pooled connection answers its own command
        assert client.ping() is True
        assert client.hget(SCHEDULES, "s000") is not None and client.hlen(SCHEDULES) == written
    assert store.import_definitions([("late", MINUTELY)]).written == 1


def test_an_import_after_the_server_forgot_its_scripts_loads_them_and_writes_all(
    client: redis.Redis,
) -> None:
    store = Store(client)
    store.import_definitions([("first", MINUTELY)])
    client.script_flush()
    result = store.import_definitions((f"s{i:03d}", MINUTELY) for i in range(450))
    assert result.written == 450 and client.hlen(SCHEDULES) == 451


def test_an_import_through_the_function_library_writes_all(client: redis.Redis) -> None:
    load_functions(client, scripts.library())
    store = Store(client, lua=scripts.Caller(functions=True))
    result = store.import_definitions((f"s{i:03d}", MINUTELY) for i in range(450))
    assert result.written == 450 and client.zcard(DUE) == 450


def test_an_import_after_the_server_closed_its_idle_connections_writes_all(
    client: redis.Redis, redis_url: str,
) -> None:
    store = Store(client)
    store.import_definitions((f"a{i:03d}", MINUTELY) for i in range(450))
    admin = redis.Redis.from_url(redis_url)
    assert admin.client_kill_filter(_type="normal", skipme=True) >= 1  # the pool's, idle
    admin.close()
    result = store.import_definitions((f"b{i:03d}", MINUTELY) for i in range(450))
    assert result.written == 450 and client.hlen(SCHEDULES) == 900


def test_a_started_script_call_is_read_once_or_abandoned_leaving_no_reply_on_the_pool(
    client: redis.Redis,
) -> None:
    """scripts.Pending, the one "send now, read later" (pushes and imports): its reply is
    read once (a second read is refused, never a second run), and an abandoned call's
    connection never goes back to the pool with its reply unread."""
    client.hset(SCHEDULES, "x", "{}")
    pending = scripts.SCRIPTS.start(scripts.READ, client, [SCHEDULES], ["x"])
    assert pending.result()[0] == [b"{}"]
    with pytest.raises(RuntimeError, match="read once"):
        pending.result()
    abandoned = scripts.SCRIPTS.start(scripts.READ, client, [SCHEDULES], ["x"])
    abandoned.abandon()
    with pytest.raises(RuntimeError, match="read once"):
        abandoned.result()
    for _ in range(5):  # every pooled connection answers its own command
        assert client.hget(SCHEDULES, "x") == b"{}"


def test_an_old_layout_of_many_schedules_is_migrated_whole(client: redis.Redis) -> None:
    """More names than a scan restarted at 0 reaches over emptied buckets (Redis gives up
    after COUNT x 10 of them): the migration follows each cursor to its end."""
    names = [f"s{i}" for i in range(25_000)]
    client.hset(WATERMARKS, mapping={n: 1_700_000_000_000 + i for i, n in enumerate(names)})
    client.hset(FIRST_SEEN, mapping={n: 1_600_000_000_000 for n in names})
    assert migrate_layout(client, "") == []
    assert client.exists(WATERMARKS, FIRST_SEEN) == 0
    marks = progress.read_marks(client, "", names)
    assert marks == {n: progress.Mark(1_700_000_000_000 + i, 1_600_000_000_000)
                     for i, n in enumerate(names)}


def test_a_history_written_before_the_migration_keeps_the_old_watermark(
    client: redis.Redis,
) -> None:
    """A run-now (or backfill) before the first invocation writes a record with a history and
    no watermark: the migration puts the old watermark and first-seen beside that history, so
    the ticks owed since the old watermark are still pushed."""
    client.hset(WATERMARKS, mapping={"a": 1_700_000_060_000})
    client.hset(FIRST_SEEN, mapping={"a": 1_700_000_000_000})
    client.hset(keys.progress_bucket("", progress.bucket("a")), "a", progress.encode_record(
        None, history_bytes(
            [("m", 1_700_000_090_000, 3, "manual0123456789abcdef")])))
    assert progress.read_marks(client, "", ["a"]) == {}
    assert migrate_layout(client, "") == []
    assert progress.read_marks(client, "", ["a"]) == {
        "a": progress.Mark(1_700_000_060_000, 1_700_000_000_000)}
    assert progress.read_histories(client, "", ["a"]) == {
        "a": pushes_of("a", [("m", 1_700_000_090_000, 3, "manual0123456789abcdef")])}


def test_a_failed_migration_is_tried_again_by_the_next_invocation(client: redis.Redis) -> None:
    """A warm engine whose first migration failed (an old key of the wrong type, a lost
    connection) migrates on its next invocation; it never plans from a half-migrated store."""
    cfg = load_config_text(OLD_DOCUMENT, source="schedules.yaml")
    t = start(client) + timedelta(seconds=12)
    engine = Engine(client=client)
    client.set(FIRST_SEEN, "not a hash")
    with pytest.raises(Exception, match=FIRST_SEEN):
        engine.run(cfg, now=t)
    assert client.llen("queue:default") == 0 and all_marks(client, "") == {}
    name = sorted(REFERENCE)[0]
    ticks, lookahead = REFERENCE[name]
    old_mark = ticks(t - timedelta(minutes=20), t)[0]
    client.delete(FIRST_SEEN)
    client.hset(WATERMARKS, name, to_ms(old_mark))
    engine.run(cfg, now=t)
    assert client.exists(WATERMARKS) == 0
    owed = {jid(name, tick) for tick in ticks(old_mark, t + lookahead)}
    assert len(owed) > 1 and owed <= set(jids(client))  # carried over, not first seen now


def test_a_bucket_of_another_type_costs_the_history_walk_only_its_own_names(
    client: redis.Redis,
) -> None:
    """The console's recent pushes walk the progress buckets (web/recent.py): a bucket key
    retyped by hand is passed over, the other buckets' histories are still read."""
    names = ["alpha", "omega"]
    assert progress.bucket("alpha") != progress.bucket("omega")
    for name in names:
        client.hset(keys.progress_bucket("", progress.bucket(name)), name, progress.encode_record(
            progress.Mark(1_700_000_060_000, 1), history_bytes(
                [("t", 1_700_000_060_000, 15, "")])))
    client.delete(keys.progress_bucket("", progress.bucket("alpha")))
    client.set(keys.progress_bucket("", progress.bucket("alpha")), "not a hash")
    assert progress.scan_histories(client, "", 0, progress.STATE_BUCKETS) == (
        -1, [("omega", pushes_of("omega", [("t", 1_700_000_060_000, 15, "")])[0])])
