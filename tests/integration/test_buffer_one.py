"""`overlap: buffer_one` (issue 27, DESIGN §8) through the engine and the push script on a
real Redis: a tick due while the previous job waits or runs is held (one at most, the rest
skipped for overlap) and pushed once that job has ended, exactly once, whatever races."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiqbeat.core.describe import describe_life
from kiqbeat.core.payload import jid, jid_ms
from kiqbeat.core.plan import OVERLAP_CODES, Group, to_ms
from kiqbeat.core.records import held_tick_ms
from kiqbeat.document.validate import read_definition
from kiqbeat.engine import Engine, run
from kiqbeat.errors import ConfigError
from kiqbeat.redis import keys, progress
from kiqbeat.settings import Settings
from kiqbeat.store import Store
from tests.support.alerts import events, report_outcome
from tests.support.engine import config, push_call, race
from tests.support.marks import stored_mark, write_marks

T0 = datetime(2025, 12, 24, 0, 0, tzinfo=UTC)
BUFFERED = """
schedules:
  slow:
    every: 1m
    class: A
    overlap: buffer_one
  plain:
    every: 1m
    class: B
    queue: plain
"""
MINUTE = [T0 + timedelta(minutes=m) for m in range(30)]


def queued_jids(client: redis.Redis, queue: str = "default") -> list[str]:
    """The jids waiting in `queue`, oldest first (LPUSH puts the newest at the head)."""
    return [json.loads(raw)["jid"] for raw in reversed(client.lrange(f"queue:{queue}", 0, -1))]


def held_tick(client: redis.Redis, name: str = "slow") -> datetime | None:
    """The tick the schedule holds, read from `kiqbeat:held` as docs/store.md writes it."""
    raw = client.hget("kiqbeat:held", name)
    if raw is None:
        return None
    tick_ms, _release, _n = raw.partition(b"\n")[0].split(b" ")
    return datetime.fromtimestamp(int(tick_ms) / 1000, tz=UTC)


def test_buffer_one_holds_one_tick_while_the_previous_job_waits_and_pushes_it_once_it_ends(
        client: redis.Redis) -> None:
    cfg = config(BUFFERED)
    run(client, cfg, now=MINUTE[0])
    run(client, cfg, now=MINUTE[1])
    assert queued_jids(client) == [jid("slow", MINUTE[1])]
    run(client, cfg, now=MINUTE[2])  # minute 1's job still waits: minute 2 is held
    assert queued_jids(client) == [jid("slow", MINUTE[1])]
    assert held_tick(client) == MINUTE[2]
    run(client, cfg, now=MINUTE[3])  # one is held already: minute 3 is skipped
    assert held_tick(client) == MINUTE[2]
    client.rpop("queue:default")  # a worker takes minute 1's job, and runs it:
    client.set(keys.running("", "slow"), jid("slow", MINUTE[1]), px=60_000)
    run(client, cfg, now=MINUTE[3] + timedelta(seconds=20))
    assert queued_jids(client) == [] and held_tick(client) == MINUTE[2]
    client.delete(keys.running("", "slow"))  # done: the next invocation pushes the held tick
    report = run(client, cfg, now=MINUTE[3] + timedelta(seconds=40))
    assert queued_jids(client) == [jid("slow", MINUTE[2])]
    assert held_tick(client) is None and report.pushed == 1
    job = json.loads(client.lindex("queue:default", 0))
    assert job["kiqbeat_tick"] == to_ms(MINUTE[2])  # its own tick and jid, as built
    run(client, cfg, now=MINUTE[3] + timedelta(seconds=50))  # again: nothing more
    assert queued_jids(client) == [jid("slow", MINUTE[2])]
    run(client, cfg, now=MINUTE[4])  # minute 2's job waits now: minute 4 is held
    assert held_tick(client) == MINUTE[4]
    # The others never wait on it; minute 3 alone is recorded, for overlap.
    assert queued_jids(client, "plain") == [jid("plain", m) for m in MINUTE[1:5]]
    store = Store(client)
    assert [(r.after, r.through, r.reason) for r in store.missed()] == [
        (MINUTE[2], MINUTE[3], "overlap")]
    assert [(p.kind, p.tick) for p in store.history("slow")][:2] == [
        ("tick", MINUTE[2]), ("tick", MINUTE[1])]
    ticks = store.report("slow", since=MINUTE[0], until=MINUTE[4] + timedelta(seconds=30))
    assert [(t.tick_ms, t.outcome, t.reason) for t in ticks.ticks] == [
        (to_ms(MINUTE[1]), "pushed", None), (to_ms(MINUTE[2]), "waiting", None),
        (to_ms(MINUTE[3]), "skipped", "overlap"), (to_ms(MINUTE[4]), "held", None)]


def test_a_catch_up_pushes_one_holds_the_next_and_skips_the_rest(client: redis.Redis) -> None:
    cfg = config(BUFFERED)
    run(client, cfg, now=MINUTE[0])
    run(client, cfg, now=MINUTE[5])  # five minutes due at once
    assert queued_jids(client) == [jid("slow", MINUTE[1])]
    assert held_tick(client) == MINUTE[2]
    assert [(r.after, r.through, r.reason, r.ticks) for r in Store(client).missed()] == [
        (MINUTE[2], MINUTE[5], "overlap", 3)]
    report = run(client, cfg, now=MINUTE[5] + timedelta(seconds=1))
    assert report.pushed == 0  # minute 1's job still waits


def test_racing_invokers_release_a_held_tick_once(redis_url: str, client: redis.Redis) -> None:
    cfg = config(BUFFERED)
    instants = [T0 + timedelta(seconds=20 * k) for k in range(31)]  # ten minutes, no worker
    race(redis_url, cfg, instants)
    assert queued_jids(client) == [jid("slow", MINUTE[1])]
    assert held_tick(client) == MINUTE[2]
    client.rpop("queue:default")  # a worker took minute 1's job, and it ended
    # Eight copies at once, each invoking every second of the next ten: the held tick is
    # pushed once, and then held again is minute 11, due while minute 2's job waits.
    race(redis_url, cfg, [MINUTE[10] + timedelta(seconds=s) for s in range(1, 11)]
         + [MINUTE[11] + timedelta(seconds=1)], invokers=8)
    found = queued_jids(client)
    assert found == [jid("slow", MINUTE[2])]
    assert held_tick(client) == MINUTE[11]
    assert len(set(queued_jids(client, "plain"))) == len(queued_jids(client, "plain")) == 11


def test_the_held_tick_outlives_the_process_that_held_it(redis_url: str) -> None:
    """A held tick lives in Redis, written in the step that held it: a process killed after
    holding loses nothing, and any later copy pushes it."""
    cfg = config(BUFFERED)
    first = redis.Redis.from_url(redis_url)
    run(first, cfg, now=MINUTE[0])
    run(first, cfg, now=MINUTE[1])
    run(first, cfg, now=MINUTE[2])
    first.connection_pool.disconnect()  # that copy is gone
    other = redis.Redis.from_url(redis_url)
    other.rpop("queue:default")
    run(other, cfg, now=MINUTE[2] + timedelta(seconds=5))
    assert queued_jids(other) == [jid("slow", MINUTE[2])]
    other.close()


def test_a_held_tick_counts_as_a_run_and_is_forgotten_with_its_schedule(
        client: redis.Redis) -> None:
    cfg = config(BUFFERED.replace("overlap: buffer_one", "overlap: buffer_one\n    max_runs: 2"))
    run(client, cfg, now=MINUTE[0])
    run(client, cfg, now=MINUTE[3])  # minute 1 pushed, minute 2 held: both runs
    assert client.hget(keys.runs(""), "slow") == b"2"
    assert held_tick(client) == MINUTE[2]
    # Ended, but planned again within a second while it holds a tick.
    assert client.zscore("kiqbeat:due", "slow") == to_ms(MINUTE[3]) + 1000
    client.rpop("queue:default")
    run(client, cfg, now=MINUTE[3] + timedelta(seconds=2))
    assert queued_jids(client) == [jid("slow", MINUTE[2])]
    assert client.zscore("kiqbeat:due", "slow") == 253_402_300_799_999  # ended now
    run(client, cfg, now=MINUTE[6])
    assert queued_jids(client) == [jid("slow", MINUTE[2])]
    # Removal forgets a held tick with the rest of the schedule's state.
    store = Store(client)
    store.put("gone", {"every": "1m", "class": "C", "queue": "gone", "overlap": "buffer_one"})
    run(client, cfg, now=MINUTE[6] + timedelta(seconds=1))
    run(client, cfg, now=MINUTE[8])
    assert held_tick(client, "gone") == MINUTE[8]
    store.remove("gone")
    assert client.hget("kiqbeat:held", "gone") is None


def test_a_held_record_that_is_not_one_sets_only_its_schedule_aside(
        client: redis.Redis) -> None:
    cfg = config(BUFFERED)
    run(client, cfg, now=MINUTE[0])
    client.hset("kiqbeat:held", "slow", b"\xff not a held tick")
    report = run(client, cfg, now=MINUTE[1])
    assert queued_jids(client, "plain") == [jid("plain", MINUTE[1])]
    assert queued_jids(client) == []  # nothing of it pushed
    reason = client.hget("kiqbeat:rejected", "slow")
    assert reason is not None and b"kiqbeat:held" in reason
    assert any("'slow'" in w and "kiqbeat:held" in w for w in report.warnings)
    assert held_tick_ms(b"\xff not a held tick") is None


def test_a_released_tick_is_a_pushed_job_with_a_deadline_and_lost_it_goes_silent(
        client: redis.Redis) -> None:
    """Jobs that always overrun: every tick after the first is held, then released. The
    released job is one the releasing invocation pushed (`Report.jobs`, `--jobs`) and the
    alerts arm its deadline, so a lost one makes the schedule `silent`; it is not in the
    invocation's lag (it waited on purpose, for its previous job)."""
    cfg = config("""
schedules:
  slow: {every: 1m, class: A, overlap: buffer_one, expect_success_within: 3m}
""")
    e = Engine(Settings(), client=client)
    e.run(cfg, now=MINUTE[0])
    e.run(cfg, now=MINUTE[1])
    assert client.zscore("kiqbeat:deadlines", "slow") == to_ms(MINUTE[4])
    e.run(cfg, now=MINUTE[2])  # minute 1's job still waits: minute 2 is held
    assert held_tick(client) == MINUTE[2]
    client.rpop("queue:default")  # a worker ran minute 1's job, and it succeeded
    report_outcome(client, "slow", MINUTE[1], "succeeded")
    report = e.run(cfg, now=MINUTE[2] + timedelta(seconds=30))
    assert queued_jids(client) == [jid("slow", MINUTE[2])]  # released
    assert [(j.schedule, j.tick, j.jid, j.queue) for j in report.jobs] == [
        ("slow", MINUTE[2], jid("slow", MINUTE[2]), "default")]
    assert report.lag_s == 0  # its 30 s on hold are not kiqbeat's delay
    # Minute 1 succeeded: the deadline moves on to the released tick's.
    assert client.zscore("kiqbeat:deadlines", "slow") == to_ms(MINUTE[5])
    # Minute 2's job is lost (it never reports); minute 3 is held behind it, and nothing
    # more is pushed: the released tick's deadline is what makes it `silent`.
    for at in (MINUTE[3], MINUTE[4] + timedelta(seconds=5), MINUTE[5] + timedelta(seconds=5),
               MINUTE[6] + timedelta(seconds=5)):
        e.run(cfg, now=at)
    assert held_tick(client) == MINUTE[3]
    assert [(v["s"], v["e"], v["t"]) for v in events(client)] == [
        ("slow", "silent", str(to_ms(MINUTE[2])))]


def test_an_invocation_that_holds_a_tick_asks_to_be_invoked_again_within_a_second(
        client: redis.Redis) -> None:
    """`next_due_ms` paces `kiqbeat run`: about a second after a hold, not the next tick
    (tests/entrypoints/test_run_buffer_one.py runs the loop itself)."""
    cfg = config(BUFFERED)
    run(client, cfg, now=MINUTE[0])
    run(client, cfg, now=MINUTE[1])
    report = run(client, cfg, now=MINUTE[2])
    assert held_tick(client) == MINUTE[2]
    assert report.next_due_ms == to_ms(MINUTE[2]) + 1000
    client.rpop("queue:default")
    report = run(client, cfg, now=MINUTE[2] + timedelta(seconds=1))
    assert queued_jids(client) == [jid("slow", MINUTE[2])]
    assert report.next_due_ms == to_ms(MINUTE[3])  # nothing held: the next tick


def test_every_source_takes_buffer_one_and_describes_it(client: redis.Redis) -> None:
    """The Python API and the plain-Redis protocol (a definition and a "plan me" entry) take
    it, as a document does; validation names the values it takes; `next` describes it."""
    store = Store(client)
    store.put("api", {"every": "1m", "class": "C", "queue": "api", "overlap": "buffer_one"})
    client.hset("kiqbeat:schedules", "protocol", json.dumps(
        {"every": "1m", "class": "C", "queue": "protocol", "overlap": "buffer_one"}))
    client.zadd("kiqbeat:due", {"protocol": 0})
    cfg = config("schedules: {}\n")
    run(client, cfg, now=MINUTE[0])
    run(client, cfg, now=MINUTE[1])
    run(client, cfg, now=MINUTE[2])
    assert client.hget("kiqbeat:rejected", "protocol") is None
    assert held_tick(client, "api") == held_tick(client, "protocol") == MINUTE[2]
    assert "held" in describe_life(read_definition("x", b'{"every": "1m", "class": "C", '
                                                        b'"overlap": "buffer_one"}'))
    with pytest.raises(ConfigError, match="buffer_one"):
        store.put("typo", {"every": "1m", "class": "C", "overlap": "buffer"})


def test_a_held_tick_is_pushed_as_built_after_a_pause_a_queue_change_or_another_overlap(
        client: redis.Redis) -> None:
    """Held, its job is owed as one already in its queue is: a pause, a new queue or a new
    `overlap` leaves it to be pushed, as it was built, once the previous job has ended."""
    store = Store(client)
    cfg = config("schedules: {}\n")
    for name in ("paused", "moved", "allowed"):
        store.put(name, {"every": "1m", "class": "C", "queue": name, "overlap": "buffer_one"})
    run(client, cfg, now=MINUTE[0])
    run(client, cfg, now=MINUTE[1])
    run(client, cfg, now=MINUTE[2])
    assert [held_tick(client, n) for n in ("paused", "moved", "allowed")] == [MINUTE[2]] * 3
    store.pause("paused")
    store.put("moved", {"every": "1m", "class": "C", "queue": "elsewhere",
                        "overlap": "buffer_one"})
    store.put("allowed", {"every": "1m", "class": "C", "queue": "allowed"})
    run(client, cfg, now=MINUTE[2] + timedelta(seconds=10))  # previous jobs still waiting
    assert [held_tick(client, n) for n in ("paused", "moved", "allowed")] == [MINUTE[2]] * 3
    for name in ("paused", "moved", "allowed"):
        client.rpop(f"queue:{name}")  # a worker takes each, and it ends
    report = run(client, cfg, now=MINUTE[2] + timedelta(seconds=20))
    assert sorted((j.schedule, j.tick, j.queue) for j in report.jobs) == [
        ("allowed", MINUTE[2], "allowed"), ("moved", MINUTE[2], "moved"),
        ("paused", MINUTE[2], "paused")]  # each released into the queue it was built for
    assert queued_jids(client, "paused") == [jid("paused", MINUTE[2])]
    assert queued_jids(client, "moved") == [jid("moved", MINUTE[2])]  # where it was built for
    assert json.loads(client.lindex("queue:moved", 0))["queue"] == "moved"
    assert queued_jids(client, "allowed") == [jid("allowed", MINUTE[2])]
    assert client.hlen("kiqbeat:held") == 0
    client.rpop("queue:moved")  # taken; its next ticks go to the new queue
    run(client, cfg, now=MINUTE[3] + timedelta(seconds=1))
    assert queued_jids(client, "paused") == [jid("paused", MINUTE[2])]  # paused: no more
    assert queued_jids(client, "elsewhere") == [jid("moved", MINUTE[3])]
    assert queued_jids(client, "allowed") == [jid("allowed", m) for m in MINUTE[2:4]]
    assert client.hlen("kiqbeat:held") == 0


DEFINITION = b'{"every":"1m","class":"W","overlap":"buffer_one"}'
STEP = 60_000


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.tuples(st.just("offer"), st.integers(0, 4), st.integers(0, 5)),
                          st.just(("take", 0, 0))), min_size=1, max_size=14))
def test_in_any_interleaving_each_tick_is_pushed_held_or_recorded_once_one_job_at_a_time(
        client: redis.Redis, steps: list[tuple[str, int, int]]) -> None:
    """Push steps offered spans of ticks from up to `back` ticks before the stored mark to
    `ahead` ticks after it (racing copies planned from whatever mark they read), a worker
    taking the waiting job now and then: never two of its jobs waiting at once, and every
    tick up to the mark pushed, held (one at most) or recorded for overlap, exactly once."""
    client.flushall()
    client.hset(keys.definitions(""), "r", DEFINITION)
    write_marks(client, "", {"r": progress.Mark(0, None)})
    sha = hashlib.sha1(DEFINITION).hexdigest()
    taken: list[str] = []
    for action, back, ahead in steps:
        if action == "take":
            job = client.rpop(keys.queue("", "q"))
            taken += [json.loads(job)["jid"]] if job else []
        else:
            found = stored_mark(client, "r")
            at = (found.mark_ms if found else 0) // STEP
            read = max(0, at - back)  # the mark this copy read
            offered = [t * STEP for t in range(read + 1, at + ahead + 1)]
            group = Group("r", max(offered[-1] if offered else 0, read * STEP),
                          stored_ms=read * STEP, sha=sha, queue="q",
                          overlap=OVERLAP_CODES["buffer_one"])
            for tick in offered:
                group.add(tick, 0, json.dumps({"jid": jid_ms("r", tick)}).encode())
            push_call(client, "", keys.due(""), 10**13, [group], 10)
        assert client.llen(keys.queue("", "q")) <= 1  # one job at a time
    queued = taken + [json.loads(raw)["jid"] for raw in client.lrange(keys.queue("", "q"), 0, -1)]
    held = held_tick_ms(client.hget(keys.held(""), "r"))
    recorded = [t for line in (client.hget(keys.missed(""), "r") or b"").decode().splitlines()
                for after, through, reason in [line.split()] if reason == "overlap"
                for t in range(int(after) + STEP, int(through) + 1, STEP)]
    mark = stored_mark(client, "r")
    every = [jid_ms("r", t) for t in range(STEP, (mark.mark_ms if mark else 0) + 1, STEP)]
    accounted = queued + ([jid_ms("r", held)] if held else []) + [jid_ms("r", t)
                                                                  for t in recorded]
    assert sorted(accounted) == sorted(every), (steps, queued, held, recorded, mark)
