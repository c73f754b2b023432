"""The push family's wire format, round trip: requests encoded by `kiqbeat.redis.frames` (the
one Python encoder) and read by lua/frames.lua (the one Lua reader) leave in Redis exactly
what they say — jobs where their destination field sends them, watermarks, index entries,
missed records and history — whatever bytes the names, queues and jobs hold."""

from __future__ import annotations

import hashlib

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiqbeat.core.limits import MAX_DEFINITION_BYTES
from kiqbeat.core.plan import Group, to_ms
from kiqbeat.core.records import Push
from kiqbeat.errors import RedisRefusedError
from kiqbeat.redis import due, keys, progress, pushes, scripts
from kiqbeat.redis.connection import redis_errors
from kiqbeat.redis.definitions import Oversized
from kiqbeat.redis.frames import Piece
from kiqbeat.redis.migrate import migrate_layout
from kiqbeat.redis.side import RedisSide
from tests.support.engine import push_call
from tests.support.history import history_text
from tests.support.marks import write_marks

NOW_MS = 1_780_000_000_000
MINUTE = 60_000
DEFINITION = b'{"cron":"* * * * *","class":"W"}'
SHA = hashlib.sha1(DEFINITION).hexdigest()

# Names and queues as another language may store them: any bytes (a name is never empty),
# spaces, newlines and invalid UTF-8 included; jobs likewise.
names = st.binary(min_size=1, max_size=80).map(lambda b: b.decode(errors="surrogateescape"))
queues = st.binary(min_size=1, max_size=30).map(lambda b: b.decode(errors="surrogateescape"))
jobs = st.binary(max_size=200)
FUZZ = settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])


def raw(text: str) -> bytes:
    return text.encode(errors="surrogateescape")


def history_of(client: redis.Redis, name: str) -> list[Push]:
    """The pushes recorded for `name` (their tick jids derived for a name "x": unused here,
    and a fuzzed name need not be UTF-8)."""
    record = client.hget(keys.progress_bucket("ns:", progress.bucket(raw(name))), raw(name))
    return progress.decode_history("x", progress.decode_record(record)[1] if record else b"")


def stored_mark(client: redis.Redis, name: str) -> progress.Mark | None:
    record = client.hget(keys.progress_bucket("ns:", progress.bucket(raw(name))), raw(name))
    return progress.decode_record(record)[0] if record else None


def set_mark(client: redis.Redis, name: str, mark_ms: int, first_seen_ms: int | None) -> None:
    write_marks(client, "ns:", {name: progress.Mark(mark_ms, first_seen_ms)})


def queued(client: redis.Redis, queue: str) -> list[bytes]:
    """A queue's jobs, oldest first."""
    return list(reversed(client.lrange(keys.queue("ns:", raw(queue).decode(
        errors="surrogateescape")), 0, -1)))


@given(st.lists(st.tuples(names, queues, st.lists(jobs, max_size=12), st.booleans()),
                min_size=1, max_size=6, unique_by=lambda g: g[0]))
@FUZZ
def test_a_push_request_leaves_each_job_where_its_destination_field_sends_it(
    client: redis.Redis, spec: list[tuple[str, str, list[bytes], bool]],
) -> None:
    client.flushall()
    due_key = keys.due("ns:")
    groups, expected_queue, expected_set = [], {}, {}
    for k, (name, queue, payloads, new) in enumerate(spec):
        client.hset(keys.definitions("ns:"), raw(name), DEFINITION)
        mark = NOW_MS + (100 if new else 0)
        if not new:
            set_mark(client, name, NOW_MS - 20 * MINUTE, None)
        # Distinct jobs (the schedule set keeps one of equal members); every other one goes
        # to the schedule set, released a second after its tick.
        group = Group(name, mark, stored_ms=None if new else NOW_MS - 20 * MINUTE,
                      next_due_ms=NOW_MS + k, sha=SHA, queue=queue)
        for j, body in enumerate(payloads):
            tick = (NOW_MS + 1 + j) if new else (NOW_MS - 19 * MINUTE + j * 1000)
            release = tick + 1000 if new or j % 2 else 0
            job = b"%d:%d:" % (k, j) + body
            group.add(tick, release, job)
            if release:
                expected_set[job] = release / 1000
            else:
                expected_queue.setdefault(queue, []).append(job)
        group.mark_ms = max(mark, *group.ticks) if group.ticks else mark
        groups.append(group)

    counts, flags = push_call(client, "ns:", due_key, NOW_MS, groups, 3)

    total = sum(len(g.ticks) for g in groups)
    assert flags == "1" * total and counts[0] == total
    for queue, jobs_in in expected_queue.items():
        assert queued(client, queue) == jobs_in
    held = dict(client.zrange(keys.schedule("ns:"), 0, -1, withscores=True))
    assert held == pytest.approx(expected_set)
    for k, group in enumerate(groups):
        found = stored_mark(client, group.name)
        assert found is not None and found.mark_ms == group.mark_ms
        assert client.zscore(due_key, raw(group.name)) == NOW_MS + k
        ticks = [to_ms(p.tick) for p in history_of(client, group.name)]
        assert ticks == list(reversed(group.ticks))[:3]
    assert {m.decode(errors="surrogateescape") for m in client.smembers(keys.queues("ns:"))} \
        == set(expected_queue)


def test_history_keeps_the_newest_lines_on_top_of_what_it_held(client: redis.Redis) -> None:
    history = "\n".join(f"t {NOW_MS - MINUTE * k} 5" for k in range(1, 11))  # 10, full
    client.hset(keys.history("ns:"), "h", history)
    client.hset(keys.definitions("ns:"), "h", DEFINITION)
    client.hset(keys.watermarks("ns:"), "h", NOW_MS - MINUTE)
    migrate_layout(client, "ns:")  # state written as the layout before the buckets held it
    group = Group("h", NOW_MS + 2000, stored_ms=NOW_MS - MINUTE, sha=SHA, queue="q")
    for tick in (NOW_MS, NOW_MS + 1000, NOW_MS + 2000):
        group.add(tick, 0, b"{}")
    push_call(client, "ns:", keys.due("ns:"), NOW_MS + 2000, [group], 10)
    pushed = history_of(client, "h")
    assert len(pushed) == 10
    assert [to_ms(p.tick) for p in pushed[:4]] == [
        NOW_MS + 2000, NOW_MS + 1000, NOW_MS, NOW_MS - MINUTE]
    assert history_text(pushed).split("\n")[3:] == history.split("\n")[:7]


def test_missed_ranges_travel_with_their_group(client: redis.Redis) -> None:
    client.hset(keys.definitions("ns:"), "m", DEFINITION)
    client.hset(keys.watermarks("ns:"), "m", NOW_MS - 90 * MINUTE)
    client.hset(keys.first_seen("ns:"), "m", 1)
    migrate_layout(client, "ns:")
    group = Group("m", NOW_MS - 60 * MINUTE, missed=30, stored_ms=NOW_MS - 90 * MINUTE,
                  sha=SHA, queue="q",
                  ranges=[(NOW_MS - 90 * MINUTE, NOW_MS - 60 * MINUTE, "window", 30)])
    counts, _ = push_call(client, "ns:", keys.due("ns:"), NOW_MS, [group], 10)
    assert counts[2] == 30 and counts[6] == 30  # missed, recorded
    assert client.hget(keys.missed("ns:"), "m") == (
        b"%d %d window" % (NOW_MS - 90 * MINUTE, NOW_MS - 60 * MINUTE))


@given(names, queues, st.lists(jobs, min_size=1, max_size=8))
@FUZZ
def test_a_backfill_request_pushes_the_recorded_ticks_and_takes_them_out(
    client: redis.Redis, name: str, queue: str, bodies: list[bytes],
) -> None:
    client.flushall()
    side = RedisSide(client, "ns:")
    after = NOW_MS - 100 * MINUTE
    client.hset(keys.definitions("ns:"), raw(name), DEFINITION)
    client.hset(keys.missed("ns:"), raw(name),
                b"%d %d window\n%d %d policy" % (after, NOW_MS - 50 * MINUTE,
                                                  NOW_MS - 40 * MINUTE, NOW_MS - 30 * MINUTE))
    ticks = [after + (k + 1) * MINUTE for k in range(len(bodies))]
    payloads = [b"%d:" % k + body for k, body in enumerate(bodies)]
    through = ticks[-1]
    piece = Piece(name, after, through, queue, SHA,
                  [(t, p.decode(errors="surrogateescape")) for t, p in zip(ticks, payloads,
                                                                            strict=True)])
    call = side.push_backfill([piece], 10)
    assert (call.pushed, call.already, call.stale, call.flags) == (
        len(bodies), 0, 0, "1" * len(bodies))
    assert queued(client, queue) == payloads
    assert client.hget(keys.missed("ns:"), raw(name)) == (
        b"%d %d window\n%d %d policy" % (through, NOW_MS - 50 * MINUTE,
                                         NOW_MS - 40 * MINUTE, NOW_MS - 30 * MINUTE))
    assert [(p.kind, to_ms(p.tick)) for p in history_of(client, name)] == [
        ("backfill", t) for t in reversed(ticks)]
    # Sent again (a lost reply, a racing backfill): nothing is pushed twice.
    again = side.push_backfill([piece], 10)
    assert (again.pushed, again.already) == (0, len(bodies))


@given(names, queues, jobs)
@FUZZ
def test_a_manual_run_request_pushes_its_job_once(
    client: redis.Redis, name: str, queue: str, body: bytes,
) -> None:
    client.flushall()
    side = RedisSide(client, "ns:")
    client.hset(keys.definitions("ns:"), raw(name), DEFINITION)
    job = body.decode(errors="surrogateescape")
    jid = "manual0123456789abcdef01"
    assert side.push_manual(name, SHA, queue, jid, NOW_MS, job, 10)
    assert side.push_manual(name, SHA, queue, jid, NOW_MS, job, 10)  # re-sent: not again
    assert queued(client, queue) == [body]
    assert client.hget(keys.manual("ns:"), raw(name)) == jid.encode()
    (push,) = history_of(client, name)
    assert (push.kind, to_ms(push.tick), push.jid) == ("manual", NOW_MS, jid)


def test_a_request_of_another_format_version_is_refused_before_anything_is_written(
    client: redis.Redis,
) -> None:
    """The request's first field says how many fields a group holds; a script reading
    another number refuses it instead of misreading it."""
    client.hset(keys.definitions("ns:"), "x", DEFINITION)
    body = b"13 1 x " + SHA.encode() + b" 5 5 1 0 0 1 0 0 0 0 0 "
    script_keys, args = pushes._push_args("ns:", keys.due("ns:"), NOW_MS, [], 10)
    script_keys.append(keys.queue("ns:", "q"))
    args[2:4] = [1, "q", body]
    with pytest.raises(redis.ResponseError, match="KIQBEAT_FORMAT the push script reads 12"):
        scripts.SCRIPTS.call(scripts.PUSH, client, script_keys, args)
    assert stored_mark(client, "x") is None and client.hget(keys.watermarks("ns:"), "x") is None
    # As kiqbeat reports it: what to do, and that nothing was written.
    with pytest.raises(RedisRefusedError, match=r"reads 12 fields.*`kiqbeat functions --load`; "
                       "nothing was written"), redis_errors(client, "pushing jobs"):
        scripts.SCRIPTS.call(scripts.PUSH, client, script_keys, args)


@given(st.lists(st.tuples(names, st.one_of(st.none(), st.binary(max_size=300)),
                          st.one_of(st.none(), st.integers(0, 2 ** 48 - 2)),
                          st.one_of(st.none(), st.binary(max_size=100))),
                min_size=1, max_size=8, unique_by=lambda e: e[0]))
@FUZZ
def test_a_due_read_gives_back_each_entrys_name_definition_mark_and_pause_byte_for_byte(
    client: redis.Redis, entries: list[tuple[str, bytes | None, int | None, bytes | None]],
) -> None:
    """due.lua's reply (its sizes record and bytes) read by redis/due.py, the one reader:
    whatever bytes the names, definitions and pause records hold, and marks up to the
    record's 48 bits."""
    client.flushall()
    for name, definition, mark, pause in entries:
        client.zadd(keys.due("ns:"), {raw(name): 0})
        if definition is not None:
            client.hset(keys.definitions("ns:"), raw(name), definition)
        if mark is not None:
            set_mark(client, name, mark, None)
        if pause is not None:
            client.hset(keys.paused("ns:"), raw(name), pause)
    read = due.read_due(client, "ns:", None, upto_ms=NOW_MS)
    got = {e.name: (e.definition, e.mark_ms, e.pause) for e in read.entries}
    assert got == {name: (definition, mark, pause or None)
                   for name, definition, mark, pause in entries}


def test_a_due_read_gives_an_oversized_definitions_length_not_its_bytes(
    client: redis.Redis,
) -> None:
    huge = b"x" * (MAX_DEFINITION_BYTES + 1)
    client.hset(keys.definitions("ns:"), "huge", huge)
    client.zadd(keys.due("ns:"), {"huge": 0, "small": 0})
    client.hset(keys.definitions("ns:"), "small", DEFINITION)
    set_mark(client, "small", NOW_MS, NOW_MS - MINUTE)
    read = due.read_due(client, "ns:", None, upto_ms=NOW_MS)
    got = {e.name: (e.definition, e.mark_ms) for e in read.entries}
    assert got == {"huge": (Oversized(len(huge)), None), "small": (DEFINITION, NOW_MS)}
