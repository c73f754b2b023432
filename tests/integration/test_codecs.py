"""kiqbeat's hand codecs, round trip through both languages against a real Redis (docs/store.md
"Encodings"): what Python encodes, the production Lua decodes and encodes again, byte for byte,
and Python decodes to the values it started from; and each reader refuses what the section says
it refuses. The Lua runs as the scripts do: the packaged parts (scripts.LIMITS, checks.lua and
the codec's own files, read from the package) before a few lines that call them, never a copy."""

from __future__ import annotations

import hashlib
import struct
from datetime import timedelta
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kiqbeat.core.limits import MAX_HISTORY, MAX_PLANNABLE_MS
from kiqbeat.core.outcomes import OUTCOME_STATES, TickOutcome, decode_outcomes
from kiqbeat.core.plan import Group
from kiqbeat.core.varints import varint
from kiqbeat.engine import run
from kiqbeat.redis import keys, progress, pushes, scripts
from kiqbeat.redis.connection import name_bytes
from kiqbeat.redis.frames import (
    BACKFILL_PIECE_FIELDS,
    PUSH_GROUP_FIELDS,
    Piece,
    backfill_request,
    push_request,
)
from tests.support.clock import minute_floor, redis_now
from tests.support.engine import config, pushed_jobs
from tests.support.history import history_bytes, pushes_of
from tests.support.marks import write_marks

NO_MARK = 2**48 - 1
LAST_TICK = 253_370_764_800_000  # 9999-01-01: no outcome tick from then on
FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


def lua(client: redis.Redis, uses: tuple[str, ...], body: str, keys_: list[str],
        args: list[Any]) -> Any:
    """EVAL `body` after the production parts `uses` (as scripts.Lua.text puts them)."""
    text = "\n".join([scripts.LIMITS, *((scripts.LUA_FOLDER / f"{part}.lua").read_text()
                                        for part in ("checks", *uses)), body])
    return client.eval(text, len(keys_), *keys_, *args)


# Names, queues, reasons and jobs as another language may store them: any bytes.
names = st.binary(min_size=1, max_size=60).map(lambda b: b.decode(errors="surrogateescape"))
ms = st.integers(0, MAX_PLANNABLE_MS)
counts = st.integers(0, 2**53 - 1)

# ---- Frames -------------------------------------------------------------------------------

# Reads a push request with frames.lua's formats and packs what it read again with the same
# formats: the bytes and, per group, its fields (ranges and jobs as lists).
PUSH_ECHO = """
local body = ARGV[1]
local pos, err = expect_format(body, 'push', tonumber(ARGV[2]))
if err then return err end
local out, groups = {struct.pack('>H', tonumber(ARGV[2]))}, {}
local jobs = job_frames()
local pack, unpack_struct = struct.pack, struct.unpack
while pos <= #body do
  local name, sha, mark, nxt, stored, missed, skipped, queue, limit, overlap, r
  name, sha, mark, nxt, stored, missed, skipped, queue, limit, overlap, r, pos =
    unpack_struct(GROUP_FORMAT, body, pos)
  out[#out + 1] = pack(GROUP_FORMAT, #name, name, sha, mark, nxt, stored, missed, skipped, queue,
    limit, overlap, r)
  local ranges = {}
  for _ = 1, r do
    local after, through, reason, count
    after, through, reason, count, pos = unpack_struct(RANGE_FORMAT, body, pos)
    out[#out + 1] = pack(RANGE_FORMAT, after, through, #reason, reason, count)
    ranges[#ranges + 1] = {after, through, reason, count}
  end
  local n
  n, pos = unpack_struct('>I4', body, pos)
  out[#out + 1] = pack('>I4', n)
  local first = jobs.count + 1
  pos = jobs:read(body, pos, n)
  local listed = {}
  for j = first, jobs.count do
    local json = jobs:json(body, j)
    out[#out + 1] = pack(JOB_FORMAT, jobs.ticks[j], jobs.releases[j], #json) .. json
    listed[#listed + 1] = {jobs.ticks[j], jobs.releases[j], json}
  end
  groups[#groups + 1] = {name, sha, mark, nxt, stored, missed, skipped, queue, limit, overlap,
    ranges, listed}
end
return {table.concat(out), groups}
"""

PIECE_ECHO = """
local body = ARGV[1]
local pos, err = expect_format(body, 'backfill', tonumber(ARGV[2]))
if err then return err end
local out, pieces = {struct.pack('>H', tonumber(ARGV[2]))}, {}
local jobs = job_frames()
while pos <= #body do
  local name, sha, after, through, queue, limit, overlap, n
  name, sha, after, through, queue, limit, overlap, n, pos =
    struct.unpack(PIECE_FORMAT, body, pos)
  out[#out + 1] = struct.pack(PIECE_FORMAT, #name, name, sha, after, through, queue, limit,
    overlap, n)
  local first = jobs.count + 1
  pos = jobs:read(body, pos, n)
  local listed = {}
  for j = first, jobs.count do
    local json = jobs:json(body, j)
    out[#out + 1] = struct.pack(JOB_FORMAT, jobs.ticks[j], jobs.releases[j], #json) .. json
    listed[#listed + 1] = {jobs.ticks[j], jobs.releases[j], json}
  end
  pieces[#pieces + 1] = {name, sha, after, through, queue, limit, overlap, listed}
end
return {table.concat(out), pieces}
"""

shas = st.one_of(st.just(""), st.text("0123456789abcdef", min_size=40, max_size=40))
jobs = st.lists(st.tuples(ms, st.one_of(st.just(0), ms), st.binary(max_size=120)), max_size=5)
reasons = st.sampled_from(["window", "policy"])


@st.composite
def groups(draw: st.DrawFn) -> Group:
    group = Group(draw(names), draw(ms), missed=draw(counts), skipped=draw(counts),
                  stored_ms=draw(st.none() | ms), next_due_ms=draw(ms), sha=draw(shas),
                  queue=draw(names), max_runs=draw(counts), overlap=draw(st.integers(0, 2)),
                  ranges=draw(st.lists(st.tuples(ms, ms, reasons, counts), max_size=3)))
    for tick, release, job in draw(jobs):
        group.add(tick, release, job)
    return group


def _sha(sha: str) -> bytes:
    return sha.encode() if sha else b"0" * 40


@given(st.lists(groups(), min_size=1, max_size=5))
@example([Group("n", 0, ticks=[0], releases=[0], payloads=[b""])])  # the one-job shortcut, empty
@example([Group("\udcff\x00 \n", MAX_PLANNABLE_MS, missed=2**53 - 1,
                ranges=[(0, MAX_PLANNABLE_MS, "window", 0)])])
@FUZZ
def test_a_push_request_is_read_and_packed_again_byte_for_byte(client: redis.Redis,
                                                                spec: list[Group]) -> None:
    body, queues = push_request(spec)
    again, read = lua(client, ("frames",), PUSH_ECHO, [], [body, len(PUSH_GROUP_FIELDS)])
    assert again == body
    assert len(read) == len(spec)
    for group, fields in zip(spec, read, strict=True):
        (name, sha, mark, nxt, stored, missed, skipped, queue, limit, overlap, ranges,
         listed) = fields
        assert name == name_bytes(group.name) and sha == _sha(group.sha)
        assert (mark, nxt, stored, missed, skipped, limit, overlap) == (
            group.mark_ms, group.next_due_ms,
            -1 if group.stored_ms is None else group.stored_ms, group.missed, group.skipped,
            group.max_runs, group.overlap)
        assert queues.index(group.queue) + 1 == queue
        assert [tuple(r) for r in ranges] == [(a, t, reason.encode(), c)
                                              for a, t, reason, c in group.ranges]
        assert [tuple(j) for j in listed] == list(zip(group.ticks, group.releases,
                                                      group.payloads, strict=True))


@pytest.mark.parametrize("size", [0, 65_536, 1_000_000])
def test_a_job_of_any_length_and_a_name_of_the_longest_travel_whole(client: redis.Redis,
                                                                     size: int) -> None:
    """A job's length is 4 bytes (a JSON past 65,535 bytes too); a name's 2 (65,535 at most:
    a stored name is at most 1,000 characters, so every one fits)."""
    job = bytes(range(256)) * (size // 256) + b"{" * (size % 256)
    name = ("\udcfe" * 65_535)
    group = Group(name, 1, ticks=[1, 2], releases=[0, 2], payloads=[job, b""])
    body, _ = push_request([group])
    again, ((got_name, *_, listed),) = lua(client, ("frames",), PUSH_ECHO, [],
                                           [body, len(PUSH_GROUP_FIELDS)])
    assert again == body and got_name == b"\xfe" * 65_535
    assert [j[2] for j in listed] == [job, b""]
    with pytest.raises(struct.error):  # one more byte cannot be framed: refused, not cut
        push_request([Group(name + "x", 1)])


@given(st.lists(st.builds(Piece, names, ms, ms, names, shas,
                          st.lists(st.tuples(ms, st.text(max_size=50)), max_size=4),
                          counts, st.booleans()), min_size=1, max_size=4))
@FUZZ
def test_a_backfill_request_is_read_and_packed_again_byte_for_byte(
    client: redis.Redis, pieces: list[Piece],
) -> None:
    body, queues = backfill_request(pieces)
    again, read = lua(client, ("frames",), PIECE_ECHO, [], [body, len(BACKFILL_PIECE_FIELDS)])
    assert again == body
    for piece, fields in zip(pieces, read, strict=True):
        name, sha, after, through, queue, limit, overlap, listed = fields
        assert (name, sha, after, through, queue, limit, overlap) == (
            name_bytes(piece.name), _sha(piece.sha), piece.after_ms, piece.through_ms,
            queues.index(piece.queue) + 1, piece.max_runs, int(piece.overlap_skip))
        assert [tuple(j) for j in listed] == [(tick, 0, name_bytes(job))
                                              for tick, job in piece.jobs]


def test_a_request_cut_short_is_refused_whole_and_nothing_is_written(client: redis.Redis
                                                                     ) -> None:
    """Cut anywhere inside its last record (its last job's JSON too), a push request is
    refused by the push script before its first write: the whole group before it is not
    pushed either."""
    client.flushall()
    definition = b'{"cron":"* * * * *","class":"W"}'
    client.hset(keys.definitions("ns:"), "a", definition)
    client.hset(keys.definitions("ns:"), "b", definition)
    before = {"a": progress.Mark(500, None), "b": progress.Mark(500, None)}
    write_marks(client, "ns:", before)
    sha = hashlib.sha1(definition).hexdigest()
    full = [Group("a", 2000, stored_ms=500, sha=sha, queue="q", ticks=[2000], releases=[0],
                  payloads=[b'{"jid":"a"}']),
            Group("b", 2000, stored_ms=500, sha=sha, queue="q", ticks=[1000, 2000],
                  releases=[0, 0],
                  payloads=[b'{"jid":"b1"}', b'{"jid":"b2"}'])]
    body, _ = push_request(full)
    first = len(push_request(full[:1])[0])
    script_keys, args = pushes._push_args("ns:", keys.due("ns:"), 3000, [], 10)
    script_keys.append(keys.queue("ns:", "q"))
    for cut in range(first + 1, len(body)):
        args[2:4] = [1, "q", body[:cut]]
        with pytest.raises(redis.ResponseError):
            scripts.SCRIPTS.call(scripts.PUSH, client, script_keys, args)
    assert client.llen(keys.queue("ns:", "q")) == 0
    assert progress.read_marks(client, "ns:", ["a", "b"]) == before
    args[2:4] = [1, "q", body]  # whole, it is pushed
    scripts.SCRIPTS.call(scripts.PUSH, client, script_keys, args)
    assert client.llen(keys.queue("ns:", "q")) == 3


# ---- The progress record -------------------------------------------------------------------

# Reads a schedule's record (progress.lua), deletes it and writes it again from what was read:
# {mark (-1: none), seen, newest, tail}.
PROGRESS_ECHO = """
use_state(KEYS[1], 'kiqbeat:progress:0')
local mark, seen, newest, tail, err = read_state_parts(ARGV[1])
if err then return err end
redis.call('HDEL', state_key_of(ARGV[1]), ARGV[1])
write_state_parts(ARGV[1], mark, seen, newest, tail)
return {mark or -1, seen or -1, newest, tail}
"""

# Appends one push to a schedule's history as push.lua does (`remembered_parts`), keeping
# ARGV[6].
PROGRESS_PUSH = """
use_state(KEYS[1], 'kiqbeat:progress:0')
local mark, seen, newest, tail, err = read_state_parts(ARGV[1])
if err then return err end
local done = {pushed_line(ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5])}
write_state_parts(ARGV[1], mark, seen, remembered_parts(newest, tail, done, 1,
  tonumber(ARGV[6])))
return 1
"""
PROGRESS_USES = ("records", "varints", "progress")


def bucket_zero(namespace: str = "") -> str:
    return keys.progress_bucket(namespace, 0)


@st.composite
def entries(draw: st.DrawFn, max_size: int = 12) -> list[tuple[str, int, int, str]]:
    """History entries oldest first: (kind, tick, delay, jid); the push instant a valid one."""
    out = []
    for _ in range(draw(st.integers(0, max_size))):
        kind = draw(st.sampled_from("tbms"))
        tick = draw(st.one_of(ms, st.integers(1_700_000_000_000, 1_800_000_000_000)))
        delay = draw(st.integers(-tick, MAX_PLANNABLE_MS - tick))
        jid = draw(st.text("0123456789abcdef", min_size=0, max_size=24)) if kind == "m" else ""
        out.append((kind, tick, delay, "manual" + jid if kind == "m" else ""))
    return out


def history_of(oldest_first: list[tuple[str, int, int, str]]) -> bytes:
    """A record's history part holding these entries (a schedule named "x")."""
    return history_bytes(oldest_first)


def record_of(client: redis.Redis, name: str) -> bytes | None:
    raw = name_bytes(name)
    return client.hget(keys.progress_bucket("", progress.bucket(raw)), raw)


# The longest history: MAX_HISTORY entries, manual runs among them.
LONGEST = [("m" if k % 7 == 0 else "tbs"[k % 3], 1_790_000_000_000 + k * 60_000, 250 + k,
            "manual" + "ab" * 9 if k % 7 == 0 else "") for k in range(MAX_HISTORY)]


@given(names, st.one_of(st.none(), st.integers(0, NO_MARK - 1)),
       st.one_of(st.none(), st.integers(1, MAX_PLANNABLE_MS)), entries())
@example("a", 0, None, [])  # the smallest record: 0 and first-seen unknown
@example("a", None, None, [("t", 0, 0, "")])  # no watermark, a history: MARK 2^48 - 1
@example("a", 5, MAX_PLANNABLE_MS, [("b", MAX_PLANNABLE_MS, -MAX_PLANNABLE_MS, "")])  # < 0
@example("a", NO_MARK - 1, 1, [("s", 1, 0, ""), ("m", MAX_PLANNABLE_MS, 0, "manual")])
@example("\udcff\n \x00", 1_790_000_000_000, 1_700_000_000_000, LONGEST)
@FUZZ
def test_a_progress_record_travels_python_lua_python_byte_for_byte(
    client: redis.Redis, name: str, mark_ms: int | None, seen_ms: int | None,
    pushes: list[tuple[str, int, int, str]],
) -> None:
    mark = None if mark_ms is None else progress.Mark(mark_ms, seen_ms)
    record = progress.encode_record(mark, history_of(pushes))
    raw = name_bytes(name)
    client.hset(keys.progress_bucket("", progress.bucket(raw)), raw, record)
    got_mark, got_seen, newest, tail = lua(client, PROGRESS_USES, PROGRESS_ECHO,
                                           [bucket_zero()], [raw])
    # What Lua read is what Python wrote ...
    assert got_mark == (-1 if mark_ms is None else mark_ms)
    assert got_seen == (-1 if mark_ms is None else seen_ms or 0)
    assert newest == (pushes[-1][1] if pushes else 0)
    assert (tail == b"") == (not pushes)
    # ... what it wrote again is the same bytes, which Python reads as the same values.
    again = record_of(client, name)
    assert again == record
    assert again is not None
    back, history = progress.decode_record(again)
    assert back == (None if mark is None else progress.Mark(mark_ms or 0, seen_ms))
    assert progress.decode_history("x", history) == pushes_of("x", pushes)


@given(names, st.integers(0, NO_MARK - 1), entries(), st.sampled_from("tbms"),
       st.integers(1_700_000_000_000, 1_800_000_000_000), st.integers(-10**6, 10**8),
       st.integers(1, 15))
@example("x", 1, [], "t", 1_790_000_000_000, 0, 1)
@example("x", 1, LONGEST, "m", 1_790_000_000_000, 5, MAX_HISTORY)
@FUZZ
def test_a_push_lua_appends_keeps_python_s_entries_as_they_were(
    client: redis.Redis, name: str, mark_ms: int, pushes: list[tuple[str, int, int, str]],
    kind: str, tick: int, delay: int, keep: int,
) -> None:
    """progress.lua's `remembered_parts` (every push's way) copies the entries it keeps: Python's
    history, with the new push on top, the newest `keep` of them."""
    raw = name_bytes(name)
    record = progress.encode_record(progress.Mark(mark_ms, None),
                                    history_of(pushes))
    client.hset(keys.progress_bucket("", progress.bucket(raw)), raw, record)
    jid = "manual" + "cd" * 9 if kind == "m" else ""
    lua(client, PROGRESS_USES, PROGRESS_PUSH, [bucket_zero()],
        [raw, kind, tick, tick + delay, jid, keep])
    again = record_of(client, name)
    assert again is not None
    mark, history = progress.decode_record(again)
    assert mark == progress.Mark(mark_ms, None)
    assert progress.decode_history("x", history) == pushes_of(
        "x", [*pushes, (kind, tick, delay, jid)][-keep:])


VALID = progress.encode_record(progress.Mark(1_790_000_000_000, 1_700_000_000_000),
                               history_of(LONGEST[:3]))
HEAD = len(progress.encode_record(progress.Mark(1_790_000_000_000, 1_700_000_000_000)))
GARBLED = {
    "empty": b"",
    "six bytes": VALID[:6],
    "first-seen cut short": VALID[:6] + b"\x80",
    "a varint of 9 bytes": VALID[:6] + b"\x80" * 8 + b"\x01",
    "a varint above 2^53": VALID[:6] + b"\xff" * 7 + b"\x7f",
    "a history of 0 entries": VALID[:HEAD] + b"\x00\x00",
    "more entries than bytes": VALID[:HEAD] + b"\x00\x05\x00\x00",
    "a history cut short": VALID[:HEAD + 2],
}


@pytest.mark.parametrize("what", sorted(GARBLED))
def test_a_progress_record_that_is_not_one_is_refused_by_both_readers_naming_the_schedule(
    client: redis.Redis, what: str,
) -> None:
    client.flushall()
    raw = GARBLED[what]
    with pytest.raises(ValueError, match=r"progress record|cut short"):
        progress.decode_history("sick", progress.decode_record(raw)[1])
    client.hset(keys.progress_bucket("", progress.bucket("sick")), "sick", raw)
    client.hset(keys.progress_bucket("", progress.bucket("well")), "well", VALID)
    with pytest.raises(redis.ResponseError, match=r"KIQBEAT_GARBLED .*schedule 'sick' in "
                       + keys.progress_bucket("", progress.bucket("sick"))):
        lua(client, PROGRESS_USES, PROGRESS_ECHO, [bucket_zero()], ["sick"])
    assert lua(client, PROGRESS_USES, PROGRESS_ECHO, [bucket_zero()], ["well"])[0] \
        == 1_790_000_000_000
    assert record_of(client, "well") == VALID


TWO = config("""
missed_jobs_window: 1h
schedules:
  sick:
    cron: "* * * * *"
    class: W
  well:
    cron: "* * * * *"
    class: W
""")


@pytest.mark.parametrize("what", ["a varint of 9 bytes", "first-seen cut short",
                                  "more entries than bytes"])
def test_an_invocation_sets_aside_only_the_schedule_whose_record_is_not_one(
    client: redis.Redis, what: str,
) -> None:
    client.flushall()
    t0 = minute_floor(redis_now(client)) - timedelta(hours=1) + timedelta(seconds=5)
    run(client, TWO, now=t0)
    sick = keys.progress_bucket("", progress.bucket("sick"))
    client.hset(sick, "sick", GARBLED[what])
    report = run(client, TWO, now=t0 + timedelta(minutes=3))
    assert report.set_aside == 1 and any(sick in w and "'sick'" in w for w in report.warnings)
    assert sick.encode() in (client.hget(keys.rejected(""), "sick") or b"")
    assert {job["kiqbeat_schedule"] for job in pushed_jobs(client)} == {"well"}
    assert len({job["jid"] for job in pushed_jobs(client)}) == 3


def test_python_refuses_a_history_whose_entries_miss_their_count(client: redis.Redis) -> None:
    """Cut at an entry's end, a history holds fewer entries than it says: Lua, which copies
    entries without reading them, keeps it (bytes enough for its COUNT); Python, which reads
    them, refuses it."""
    mark = progress.Mark(1_790_000_000_000, None)
    six, five = (history_of(LONGEST[:n]) for n in (6, 5))
    record = progress.encode_record(mark, six)
    cut = record[:len(record) - (len(six) - len(five))]  # five whole entries of six said
    with pytest.raises(ValueError, match="of 6 entries holds 5"):
        progress.decode_history("x", progress.decode_record(cut)[1])
    client.hset(keys.progress_bucket("", progress.bucket("x")), "x", cut)
    assert lua(client, PROGRESS_USES, PROGRESS_ECHO, [bucket_zero()], ["x"])[0] == mark.mark_ms
    assert record_of(client, "x") == cut


# ---- The outcome record --------------------------------------------------------------------

# Encodes ARGV's record (outcomes.lua `encode_outcomes`), decodes those bytes and encodes them
# again: {bytes, bytes again}. ARGV: last success (-1: none), beyond, then per entry t state
# manual attempt value.
OUTCOME_ECHO = """
local rec = {ls = tonumber(ARGV[1]) >= 0 and tonumber(ARGV[1]) or nil,
  beyond = tonumber(ARGV[2]), entries = {}}
for k = 3, #ARGV, 5 do
  rec.entries[#rec.entries + 1] = {t = tonumber(ARGV[k]), state = tonumber(ARGV[k + 1]),
    manual = tonumber(ARGV[k + 2]), a = tonumber(ARGV[k + 3]), v = tonumber(ARGV[k + 4])}
end
local bytes = encode_outcomes(rec)
local read = decode_outcomes(bytes)
if not read then return redis.error_reply('not read back') end
return {bytes, encode_outcomes(read)}
"""
OUTCOME_READ = """
local rec = decode_outcomes(ARGV[1])
if not rec then return 0 end
return {rec.ls or -1, rec.beyond, #rec.entries}
"""
OUTCOME_USES = ("varints", "outcomes")


@st.composite
def outcome_records(draw: st.DrawFn) -> tuple[int | None, int, list[TickOutcome]]:
    newest = draw(st.integers(0, LAST_TICK - 1))
    ticks, tick = [], newest
    for k in range(draw(st.integers(1, 12))):
        if k:
            tick -= draw(st.one_of(st.integers(1, 2**42),
                                   st.integers(1, 10**4).map(lambda h: h * 3_600_000)))
            if tick < 0:
                break
        state = draw(st.sampled_from(OUTCOME_STATES))
        value = draw(st.integers(0, min(2**48, LAST_TICK - 1 - tick)))
        running, expired = state == "running", state == "expired"
        ticks.append(TickOutcome(tick, state, draw(st.integers(1, 2**48)),
                                 None if running or expired else value,
                                 tick + value if running else None, draw(st.booleans())))
    success = draw(st.one_of(st.none(), st.integers(max(0, newest - 2**44), newest)))
    return success, draw(st.integers(0, 2**48)), ticks


def outcome_args(success: int | None, beyond: int, ticks: list[TickOutcome]) -> list[int]:
    args = [-1 if success is None else success, beyond]
    for t in ticks:
        value = (t.started_ms - t.tick_ms if t.started_ms is not None
                 else t.duration_ms or 0)
        args += [t.tick_ms, OUTCOME_STATES.index(t.state), int(t.manual), t.attempt, value]
    return args


@given(outcome_records())
@example((None, 0, [TickOutcome(0, "expired", 1, None, None)]))  # 0 everywhere
@example((LAST_TICK - 1, 2**48, [TickOutcome(LAST_TICK - 1, "succeeded", 2**48, 0, None, True)]))
@example((0, 0, [TickOutcome(1_000 * 3_600_000 * k, "failed", 1, 5, None)
                 for k in range(1000, 0, -1)]))  # the longest record a fold keeps
@FUZZ
def test_an_outcome_record_travels_lua_python_lua_byte_for_byte(
    client: redis.Redis, record: tuple[int | None, int, list[TickOutcome]],
) -> None:
    """outcomes.lua encodes (the fold's writer), Python's `decode_outcomes` reads the values
    it was given, and Lua's reader and writer give the same bytes again."""
    success, beyond, ticks = record
    written, again = lua(client, OUTCOME_USES, OUTCOME_ECHO, [],
                         outcome_args(success, beyond, ticks))
    assert again == written
    read = decode_outcomes(written)
    assert read.ticks == tuple(ticks)
    assert (read.last_success_ms, read.failures_beyond) == (success, beyond)


REFUSED = {
    "eight bytes": b"\x00" * 8,
    "from 9999 on": LAST_TICK.to_bytes(6, "big") + b"\x00\x00\x00",
    "a varint of 8 bytes": b"\x00" * 6 + b"\x80" * 7 + b"\x00" + b"\x00\x00",
    "a varint above 2^48": b"\x00" * 6 + varint(2**48 + 1) + b"\x00\x00",
    "cut short": b"\x00" * 6 + b"\x00\x00\x01" + b"\x01\x01",
    "1001 ticks": b"\x00" * 6 + b"\x00\x00\xe9\x07" + b"\x00" * 3003,
    "a tick before the epoch": b"\x00" * 5 + b"\x01" + b"\x00\x00\x01" + b"\xc0\x04\x01\x00",
    "a start from 9999 on": (LAST_TICK - 1).to_bytes(6, "big") + b"\x00\x00\x01\x00\x01\x02",
    "a success before the epoch": b"\x00" * 5 + b"\x01" + b"\x0a\x00\x01\x00\x01\x00",
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_an_outcome_record_that_is_not_one_is_refused_by_both_readers(client: redis.Redis,
                                                                       what: str) -> None:
    """(The fold then writes a fresh record, costing that schedule's alone:
    test_outcomes_hostile.py.)"""
    raw = REFUSED[what]
    with pytest.raises(ValueError, match="not an outcome record"):
        decode_outcomes(raw)
    assert lua(client, OUTCOME_USES, OUTCOME_READ, [], [raw]) == 0
