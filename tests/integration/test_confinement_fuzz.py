"""The confinement fuzzer (issue 26): one corrupted thing about one schedule costs only that
schedule.

Each example builds a store of healthy schedules (minutely, every-second, one with every
lifecycle field, `overlap: skip`, `overlap: buffer_one`, `max_runs`, a paused one) plus a
victim, lets a first invocation register them all, then corrupts ONE thing about the
victim: a field of its definition (every field a definition may hold, plus unknown ones) set
to a hostile value
(out-of-range instants and offsets, huge, negative and non-integer numbers, wrong types,
deep nesting, non-UTF-8 bytes), its whole definition's bytes, or its value in one of
kiqbeat's keys (`TARGETS`). Then, through the code the CLI runs (`kiqbeat.entrypoints.cli.main`
in this process, so it is fast) and the console's real HTTP server:

- every invocation (`run-once --now`, one a minute) completes (exit 0);
- `status`, `schedules list/get/export`, `history`, `missed`, `next` answer (exit 0
  or 1 with a message; an exception would fail the test);
- the console's pages, its JSON API and `/metrics` answer without a 500;
- every healthy schedule pushed each due tick exactly once: distinct jids in Redis against
  the ticks this test computes itself (plain minute and second arithmetic);
- the victim, when it is set aside, is named with a reason in `kiqbeat:rejected`, which
  `kiqbeat status` prints.

Adding a key (a new feature's record of a schedule): add ONE line to `TARGETS` — the key as
docs/store.md's table writes it, and how to write the victim's value there (`_hset(KEY)`
for a hash of name -> value; `_string` or `_zadd` for the other shapes). The key table test
fails until every key in docs/store.md's table is in `TARGETS`.

The default run is bounded (about a minute); `KIQBEAT_LONG=1` runs many more examples.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from hypothesis import HealthCheck, Phase, example, given, note, settings
from hypothesis import strategies as st

from kiqbeat.core.limits import STATE_BUCKETS
from kiqbeat.core.payload import jid
from kiqbeat.document.fields import FIELDS
from kiqbeat.store import Store
from tests.support.cli import Kiqbeat
from tests.support.clock import minute_floor, redis_now
from tests.support.console import READER_TOKEN, Served, Start

ROOT = Path(__file__).resolve().parents[2]
LONG = os.environ.get("KIQBEAT_LONG") == "1"
VICTIM = "victim"
MINUTES = 3  # invocations after the first, one a minute

HEALTHY: dict[str, dict[str, Any]] = {
    "minutely": {"class": "H", "cron": "* * * * *", "queue": "h1"},
    "secondly": {"class": "H", "cron": "* * * * * *", "queue": "h2"},
    "lifecycle": {"class": "H", "cron": "* * * * *", "queue": "h3", "tz": "Europe/Paris",
                  "start_at": "2000-01-01T00:00:00+01:00", "end_at": "9000-01-01T00:00:00Z",
                  "except": ["2001-01-01"], "max_runs": 100_000, "catch_up": "all",
                  "args": [1, "two", {"three": 3}], "retry": 3,
                  "expect_success_within": "2m", "alert_after_failures": 2},
    "overlapping": {"class": "H", "every": "1m", "queue": "h4", "overlap": "skip"},
    "buffered": {"class": "H", "every": "1m", "queue": "h7", "overlap": "buffer_one"},
    "limited": {"class": "H", "cron": "* * * * *", "queue": "h5", "max_runs": 2},
    "paused": {"class": "H", "cron": "* * * * *", "queue": "h6"},
}
VICTIM_DEFINITION: dict[str, Any] = {
    "class": "V", "cron": "* * * * *", "queue": "v", "max_runs": 1000, "overlap": "skip",
    "start_at": "2000-01-01T00:00:00Z", "end_at": "9000-01-01T00:00:00Z",
    "except": ["2001-01-01"], "args": [1], "expect_success_within": "2m",
    "alert_after_failures": 2, "pause_after_failures": 50, "expires_after": "1h", "history": 5}


# ---------------------------------------------------------------------------- targets


Write = Callable[[redis.Redis, bytes, float], None]


def _hset(key: str) -> Write:
    return lambda client, value, _score: client.hset(key, VICTIM, value)


def _string(key: str) -> Write:
    return lambda client, value, _score: client.set(key, value)


def _zadd(key: str) -> Write:
    return lambda client, _value, score: client.zadd(key, {VICTIM: score})


def _sadd(key: str) -> Write:
    return lambda client, _value, _score: client.sadd(key, VICTIM)


def _bucket() -> str:
    """The victim's progress bucket, as docs/store.md defines it (SHA1's first 4 hex digits
    mod 16,384), worked out here rather than by kiqbeat's code."""
    bucket = int(hashlib.sha1(VICTIM.encode()).hexdigest()[:4], 16) % STATE_BUCKETS
    return f"kiqbeat:progress:{bucket}"


def _progress(client: redis.Redis, value: bytes, _score: float) -> None:
    client.hset(_bucket(), VICTIM, value)


def _index_member(client: redis.Redis, value: bytes, _score: float) -> None:
    """The victim's facets in the first bucket of the name index."""
    client.hset("kiqbeat:name_ranges:", VICTIM, value)


def _outcomes(client: redis.Redis, value: bytes, _score: float) -> None:
    """The victim's outcome record: the bucket of its progress record, under outcomes."""
    client.hset(_bucket().replace(":progress:", ":outcomes:"), VICTIM, value)


def _inbox(client: redis.Redis, value: bytes, _score: float) -> None:
    """Worker reports about the victim, hostile as a whole entry and in its tick field."""
    key = "kiqbeat:outcomes:inbox"
    client.lpush(key, value, b'{"s":"' + VICTIM.encode() + b'","t":' + value
                 + b',"j":"x","e":"failed","a":1,"x":"E","m":"m"}')


def _outbox(client: redis.Redis, value: bytes, _score: float) -> None:
    """An alert event about the victim whose every field but its name is the value."""
    client.xadd("kiqbeat:alerts:outbox", {"k": value, "s": VICTIM, "e": value, "t": value,
                                           "j": value, "x": value, "n": value, "at": value})


def _audit(client: redis.Redis, value: bytes, _score: float) -> None:
    """An audit entry naming the victim whose every other field is the value."""
    client.xadd("kiqbeat:audit", {"actor": value, "action": value, "name": VICTIM,
                                  "note": value, "detail": value})


# Every key of docs/store.md's table: how to write the victim's value there. ONE line a key.
TARGETS: dict[str, Write] = {
    "kiqbeat:schedules": _hset("kiqbeat:schedules"),
    "kiqbeat:due": _zadd("kiqbeat:due"),
    "kiqbeat:due:I/N": _zadd("kiqbeat:due:0/2"),
    "kiqbeat:rejected": _hset("kiqbeat:rejected"),
    "kiqbeat:progress:B": _progress,
    "kiqbeat:missed": _hset("kiqbeat:missed"),
    "kiqbeat:watermarks": _hset("kiqbeat:watermarks"),
    "kiqbeat:first_seen": _hset("kiqbeat:first_seen"),
    "kiqbeat:history": _hset("kiqbeat:history"),
    "kiqbeat:manual": _hset("kiqbeat:manual"),
    "kiqbeat:paused": _hset("kiqbeat:paused"),
    "kiqbeat:runs": _hset("kiqbeat:runs"),
    "kiqbeat:skips": _hset("kiqbeat:skips"),
    "kiqbeat:last_jobs": _hset("kiqbeat:last_jobs"),
    "kiqbeat:held": _hset("kiqbeat:held"),
    "kiqbeat:running:<name>": _string(f"kiqbeat:running:{VICTIM}"),
    "kiqbeat:documents": _hset("kiqbeat:documents"),
    "kiqbeat:document:<location>": _string(f"kiqbeat:document:{VICTIM}.yaml"),
    "kiqbeat:outcomes:inbox": _inbox,
    "kiqbeat:outcomes:B": _outcomes,
    "kiqbeat:outcomes:errors": _hset("kiqbeat:outcomes:errors"),
    "kiqbeat:outcomes:changed": _zadd("kiqbeat:outcomes:changed"),
    "kiqbeat:outcomes:script": _string("kiqbeat:outcomes:script"),
    "kiqbeat:deadlines": _zadd("kiqbeat:deadlines"),
    "kiqbeat:expectations": _hset("kiqbeat:expectations"),
    "kiqbeat:incidents": _hset("kiqbeat:incidents"),
    "kiqbeat:alerts:outbox": _outbox,
    "kiqbeat:web_session:<id>": _string("kiqbeat:web_session:" + "A" * 32),
    "kiqbeat:names": _zadd("kiqbeat:names"),
    "kiqbeat:name_ranges": _zadd("kiqbeat:name_ranges"),
    "kiqbeat:name_ranges:BOUND": _index_member,
    "kiqbeat:facets": _hset("kiqbeat:facets"),
    "kiqbeat:disabled": _sadd("kiqbeat:disabled"),
    "kiqbeat:names_built": _string("kiqbeat:names_built"),
    "kiqbeat:audit": _audit,
    "kiqbeat:calendars": _hset("kiqbeat:calendars"),
}


# ---------------------------------------------------------------------------- values


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _tick(minutes_ago: int) -> bytes:
    """A record's NEWEST field: a minute boundary about `minutes_ago` minutes ago (6 bytes)."""
    now = int(datetime.now(UTC).timestamp() * 1000)
    return (now - now % 60_000 - minutes_ago * 60_000).to_bytes(6, "big")


INSTANTS = ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59Z",
            "1969-12-31T23:59:59Z", "2026-01-01T00:00:00+24:00", "2026-02-30T00:00:00Z",
            "2026-01-01T00:00:00", "2026-01-01T00:00:00+23:59:59.999999", "0", "", "Z",
            "9999-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "2026-01-01T00:00:00.5Z",
            # valid, at the end of time: a zoned cron's walk then ends there (DESIGN §3)
            "9998-12-31T23:59:59Z", "9998-12-31T18:59:59-05:00"]
NUMBERS = [0, -1, 1, 1.5, -0.0, 10**30, -(10**30), 2**53 + 1, 2**63, 2**64, 1e308, -1e308,
           5e-324, 0.1]
# JSON text of a hostile value (raw: deep nesting and non-UTF-8 cannot go through json.dumps).
json_values = st.one_of(
    st.sampled_from(INSTANTS).map(lambda s: json.dumps(s).encode()),
    st.sampled_from(NUMBERS).map(lambda n: json.dumps(n).encode()),
    st.integers().map(lambda n: str(n).encode()),
    st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e999", b"1e400",
                     b"99999999999999999", b"281474976710655"]),
    st.sampled_from([b"null", b"true", b"false", b"[]", b"{}", b"[[]]", b'{"a": 1}',
                     b'"* * * * * * *"', b'"@reboot"', b'"0 0 30 2 *"', b'"1ms"', b'"-1m"',
                     b'"99999999999d"', b'"Mars/Olympus"', b'"skip"', b'["2026-13-01"]',
                     b'"x"', b'"\\u0000"', b'"\\ud800"', b'"0 9 L * * America/New_York"',
                     b'"*/20 * * * * * Pacific/Kiritimati"']),
    st.integers(min_value=50, max_value=20_000).map(_deep),
    st.sampled_from([b'"\xff\xfe"', b'"caf\xe9"', b"\xff"]),
    st.text(max_size=20).map(lambda s: json.dumps(s).encode()),
    st.lists(st.integers(), max_size=3).map(lambda v: json.dumps(v).encode()),
)
DEFINITION_FIELDS = sorted({f.name for f in FIELDS if f.schedule} | {"source", "quue", ""})
# The whole definition's bytes.
definition_bytes = st.one_of(
    st.sampled_from([b"", b"\xff", b"{", b"null", b"[]", b'"x"', b"{}", _deep(100_000),
                     b'{"class": "V", "cron": "* * * * *", "class": "W"}',
                     b'{"class":"V","cron":"* * * * *","description":"\xff"}']),
    st.binary(max_size=64),
)
# A value in one of kiqbeat's keys.
state_bytes = st.one_of(
    st.sampled_from([b"", b"1e308", b"abc", b"-1", b"0", b"nan", b"inf", b"-inf", b"9" * 40,
                     b"-9223372036854775809", b"9223372036854775807", b"\xff\xfe\x00", b"{",
                     b"null", b"[]", b'{"until": "x"}', b'{"until": 1e308}', b'{"until": -1}',
                     b'{"at": 0, "until": 253402300800000}', b'{"until": null, "at": "x"}',
                     b"0 1 window", b"1 0 nope\n2", b"5 10 paused\n" * 200,
                     b"-5 99999999999999999999 overlap", b"t 1 2\nx", b"0 0 0 0",
                     # the last day kiqbeat plans, through its last instant (DESIGN §3)
                     b"253402214400000 253402300799999 window",
                     b"\x00" * 12, b"\xff" * 30, _deep(10_000), b"1e400",
                     b"99999999999999999", b"281474976710655", b"\xff" * 150,
                     # an outcome record: a 0xFF run where a varint is (issue 27), year 10889
                     _tick(2) + b"\x00" + b"\xff" * 150 + b"\x01\x01\x02\x01\x00",
                     _tick(2) + b"\xff" * 150 + b"\x01\x00\x01\x02\x01\x00",
                     b"\xff" * 6 + b"\x05\x00\x01\x01\x01\x00",
                     b'{"e":"failing","t":1e400}', b'{"e":"failing","t":99999999999999999}',
                     b'{"e":"silent","t":281474976710655,"c":1e400}']),
    st.binary(max_size=64),
    st.text(max_size=40).map(str.encode),
)
scores = st.one_of(st.sampled_from([float("inf"), float("-inf"), 1e308, -1e308, -1.0, 0.0,
                                    2.0**62, 253402300799999.0, 253402300800000.0]),
                   st.floats(allow_nan=False))


@st.composite
def corruptions(draw: st.DrawFn) -> tuple[str, str, bytes, float]:
    """(kind, where, value, score): one thing about the victim."""
    kind = draw(st.sampled_from(["field", "definition", "key"]))
    if kind == "field":
        field = draw(st.sampled_from(DEFINITION_FIELDS))
        rest = {k: v for k, v in VICTIM_DEFINITION.items() if k != field}
        head = json.dumps(rest).encode()[:-1]
        return kind, field, head + b", " + json.dumps(field).encode() + b": " + draw(
            json_values) + b"}", 0.0
    if kind == "definition":
        return kind, "kiqbeat:schedules", draw(definition_bytes), 0.0
    return kind, draw(st.sampled_from(sorted(TARGETS))), draw(state_bytes), draw(scores)


# ---------------------------------------------------------------------------- the check


def expected_jids(name: str, t0: datetime, last: datetime) -> set[str]:
    """The healthy schedule's ticks in (t0, last], by plain arithmetic (not kiqbeat's)."""
    start = minute_floor(t0)
    minutes = [start + timedelta(minutes=m) for m in range(1, MINUTES + 1)
               if start + timedelta(minutes=m) <= last]
    if name == "secondly":
        first = t0.replace(microsecond=0)
        seconds = int((last - first).total_seconds())
        return {jid(name, first + timedelta(seconds=s)) for s in range(1, seconds + 1)}
    if name == "limited":
        minutes = minutes[:2]
    if name == "paused":
        minutes = []
    return {jid(name, m) for m in minutes}


def instant_refused(definition: bytes, field: str) -> str | None:
    """Why the standard library finds the definition's `field` no usable instant (None: it
    is one; "": not a string, or the definition is not even standard JSON: refused, but the
    reason may be the whole definition's), worked out here, not by kiqbeat: no offset, out
    of range as written or once converted to UTC, outside 1970-01-01 .. 9999-01-01, and
    for `at` not a whole second."""
    def refuse(text: str) -> Any:
        raise ValueError(text)
    try:
        value = json.loads(definition, parse_constant=refuse)[field]
        if isinstance(value, float) and not math.isfinite(value):
            return ""  # 1e999: not JSON kiqbeat reads
    except (ValueError, RecursionError, TypeError, KeyError):
        return ""
    if not isinstance(value, str):
        return ""  # refused, perhaps whole (nested deeper than kiqbeat reads)
    try:
        moment = datetime.fromisoformat(value.strip())
        if moment.tzinfo is None or moment.utcoffset() is None:
            return "no offset"
        utc = moment.astimezone(UTC)
    except (ValueError, OverflowError):
        return "not an instant, or out of range once converted"
    if not datetime(1970, 1, 1, tzinfo=UTC) <= utc < datetime(9999, 1, 1, tzinfo=UTC):
        return "out of range"
    if field == "at" and utc.microsecond:
        return "not a whole second"
    return None


def jids_in(client: redis.Redis, queue: str) -> list[str]:
    return [json.loads(raw)["jid"] for raw in client.lrange(f"queue:{queue}", 0, -1)]


def answers(ran: Any, what: list[str]) -> None:
    assert ran.code in (0, 1), (what, ran.code, ran.err[-2000:])
    assert "Traceback" not in ran.err


def check_store(client: redis.Redis, kiqbeat: Kiqbeat,
                web: Iterator[tuple[httpx.Client, httpx.Client]] | None,
                corruption: tuple[str, str, bytes, float]) -> None:
    """One example: build, corrupt, invoke, read, check."""
    kind, where, value, score = corruption
    client.flushall()
    store = Store(client)
    for name, definition in HEALTHY.items():
        store.put(name, definition)
    store.put(VICTIM, VICTIM_DEFINITION)
    store.pause("paused", note="fuzz")
    t0 = minute_floor(redis_now(client)) - timedelta(minutes=MINUTES + 2) + timedelta(seconds=5)
    assert kiqbeat("run-once", "--now", t0.isoformat()).code == 0
    if kind in ("field", "definition"):
        client.hset("kiqbeat:schedules", VICTIM, value)
        client.zadd("kiqbeat:due", {VICTIM: 0})
    else:
        TARGETS[where](client, value, score)
    # One valid report each for the victim and a healthy schedule, so the fold and the
    # decision read the corrupted values (the victim's record, deadline, incident).
    reported = int(minute_floor(t0).timestamp() * 1000) + 60_000
    for name in (VICTIM, "minutely"):
        client.lpush("kiqbeat:outcomes:inbox", json.dumps(
            {"s": name, "t": reported, "j": jid(name, minute_floor(t0) + timedelta(minutes=1)),
             "e": "succeeded", "at": reported + 500, "a": 1, "d": 1000}))
    overlapping: dict[str, list[str]] = {"overlapping": [], "buffered": []}
    errs = ""
    for m in range(1, MINUTES + 1):
        ran = kiqbeat("run-once", "--now", (t0 + timedelta(minutes=m)).isoformat())
        assert ran.code == 0, (corruption, ran.err[-3000:])
        errs += ran.err
        for name in overlapping:  # a worker takes the overlap: skip and buffer_one jobs
            overlapping[name] += jids_in(client, HEALTHY[name]["queue"])
            client.delete(f"queue:{HEALTHY[name]['queue']}")
    last = t0 + timedelta(minutes=MINUTES)
    # the healthy schedule's report was folded whatever the victim's values
    minutely_bucket = int(hashlib.sha1(b"minutely").hexdigest()[:4], 16) % STATE_BUCKETS
    assert client.hexists(f"kiqbeat:outcomes:{minutely_bucket}", "minutely"), corruption
    for name in HEALTHY:
        found = overlapping[name] if name in overlapping else jids_in(
            client, HEALTHY[name]["queue"])
        assert len(found) == len(set(found)), (name, corruption)  # none twice
        assert set(found) == expected_jids(name, t0, last), (name, corruption)
    for args in (["status"], ["status", "--json"], ["schedules", "list"],
                 ["schedules", "list", "--json"], ["schedules", "get", VICTIM],
                 ["schedules", "export"], ["history", VICTIM], ["missed", "--json"],
                 ["next", "--store"]):
        answers(kiqbeat(*args), args)
    reason = client.hget("kiqbeat:rejected", VICTIM)
    if reason is not None and where != "kiqbeat:rejected":
        assert VICTIM in kiqbeat("status").out  # named where an operator looks
    if kind == "field" and where in ("start_at", "end_at", "at"):
        refused = instant_refused(value, where)
        if refused is not None:  # an instant it cannot use sets it aside, naming the field
            assert reason is not None, (corruption, refused)
            assert refused == "" or where.encode() in reason, (corruption, reason)
    if web is not None:
        browser, api = next(web)
        for path in ("/", "/schedules", f"/schedule?name={VICTIM}", "/metrics"):
            assert browser.get(path).status_code < 500, path
        for path in ("/api/v1/schedules", "/api/v1/status", "/api/v1/missed",
                     f"/api/v1/schedules/{VICTIM}"):
            assert api.get(path).status_code < 500, path


# Without shrinking by default: a failure is reported within the bound, with its example.
# The default run's examples are the same every run (derandomized: CI reproducible, and a
# failure it shows is one anybody can replay); KIQBEAT_LONG=1 explores new ones each time.
FUZZ = settings(max_examples=400 if LONG else 30, deadline=None, derandomize=not LONG,
                phases=(list(Phase) if LONG else [Phase.explicit, Phase.reuse, Phase.generate]),
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.timeout(7200 if LONG else 300)
@given(corruption=corruptions())
# A held tick naming a queue no definition could (issue 27, `overlap: buffer_one`).
@example(corruption=("key", "kiqbeat:held", b"1 0 1\n\xff{}", 0.0))
@FUZZ
def test_one_corrupted_value_costs_only_its_schedule(
    redis_url: str, kiqbeat: Kiqbeat,
    start_console: Start, corruption: tuple[str, str, bytes, float],
) -> None:
    note(f"corruption: {corruption[:2]} {corruption[2][:300]!r} score {corruption[3]!r}")
    client = redis.Redis.from_url(redis_url)
    console = _console(start_console)
    with console.browser() as browser, console.api(READER_TOKEN) as api:
        check_store(client, kiqbeat, _forever(browser, api), corruption)
    client.close()


def _forever(browser: httpx.Client, api: httpx.Client
             ) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    while True:
        yield browser, api


def _console(start: Start) -> Served:
    """The console of this test (started once, for every example)."""
    if not hasattr(start, "served"):
        start.served = start()  # type: ignore[attr-defined]
    return start.served  # type: ignore[attr-defined, no-any-return]


# ---------------------------------------------------------------------------- the key table


def store_keys() -> set[str]:
    """Every key docs/store.md's key table names (its first column)."""
    page = (ROOT / "docs" / "store.md").read_text(encoding="utf-8")
    table = page.split("| key | type | holds | who writes it |", 1)[1]
    found: set[str] = set()
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        found |= set(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return found


def test_every_key_in_the_store_table_is_corrupted_by_the_fuzzer() -> None:
    """A key a new feature adds to docs/store.md joins `TARGETS` (one line)."""
    keys = store_keys()
    assert "kiqbeat:schedules" in keys and len(keys) >= 15
    assert keys - set(TARGETS) == set()
