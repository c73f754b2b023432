"""Fault-injection harness: what Redis holds after a scenario, judged against DESIGN §2.

A scenario drives real kiqbeat processes against a real redis-server, then calls `check`,
which reads every job kiqbeat could have written and compares it with the ticks that
should exist (from the cron maths, bounded below by each schedule's first-seen mark):

- exactly once: every expected tick has one job (its jid is derived from schedule + tick);
- never early: a job in a queue was enqueued at or after its tick; one in the `schedule`
  set is scored at its tick;
- no pre-history, nothing invented: no job whose jid matches no expected tick (a manual
  run's jid, "manual" and 18 hex digits, is counted as such: it stands for no tick);
- backfilled once: given the ticks the missed-ticks record named before a backfill
  (`recorded_ticks`), `check` counts those found in Redis as backfilled, and how many the
  record still names: ticks pushed by invocations plus ticks backfilled must be every
  expected tick, each once, with nothing left recorded.

`WatermarkSampler` proves watermarks never move back while processes run,
`kiqbeat_state_size` that kiqbeat's own keys stay O(schedules), and `cross_shard` and
`assert_bounded_state` that a sharded store's shards keep to their own schedules;
`stored_schedules` gives the expected schedules of a store written without a document.
`record` appends the scenario's figures as one JSON line to $KIQBEAT_RELIABILITY_OUT
(docs/reliability.md is generated from those lines); `assert_clean` fails the test with a
readable message.
"""

from __future__ import annotations

import json
import os
import re
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import redis

from kiqbeat.core.cron import parse_cron
from kiqbeat.core.limits import MAX_AUDIT_ENTRIES
from kiqbeat.core.payload import jid
from kiqbeat.core.schedule import Config, Timetable
from kiqbeat.document.validate import read_definition
from kiqbeat.errors import ConfigError, KiqbeatError
from kiqbeat.redis import keys
from tests.support.marks import all_marks

OUT_ENV = "KIQBEAT_RELIABILITY_OUT"
MANUAL_JID = re.compile(r"manual[0-9a-f]{18}")  # a manual run's jid (issue 12)
MAX_RANGES = 100  # missed ranges kept per schedule (issue 12: the oldest beyond are dropped)
LONG = os.environ.get("KIQBEAT_LONG") == "1"


@dataclass
class Outcome:
    """The figures of one scenario: what was attempted, expected and found in Redis."""

    scenario: str  # e.g. "50 concurrent invokers"
    runs: int  # invocations attempted
    expected: int  # ticks expected
    pushed: int  # distinct expected ticks found in Redis
    duplicates: int  # extra copies of a tick (same jid) found
    missed: int  # expected ticks absent
    early: int  # ticks pushed before their instant
    invocation_s: list[float] = field(default_factory=list)  # wall time of each invocation
    notes: str = ""
    unexpected: int = 0  # jobs matching no expected tick (pre-history, invented, wrong period)
    watermark_regressions: int = 0  # times a sampled watermark was lower than before
    cross_shard: int = 0  # schedules pushed by an invocation of a shard they do not belong to
    backfilled: int = 0  # expected ticks found in Redis that a backfill was to push
    still_recorded: int = 0  # ticks the missed record still names after a complete backfill
    manual: int = 0  # manual runs (`kiqbeat trigger`: jid "manual" + 18 hex), no tick's
    group: str = "faults"  # which table of docs/reliability.md the line belongs to

    def p99_s(self) -> float | None:
        """99th percentile of invocation wall time (nearest rank), or None without timings."""
        if not self.invocation_s:
            return None
        ordered = sorted(self.invocation_s)
        return ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def jobs_in_redis(client: redis.Redis, namespace: str = "") -> list[dict[str, Any]]:
    """Every job in every queue and in the `schedule` set, each tagged with where it was.

    Queues are found both through the `queues` set and by scanning `queue:*`, so a job
    pushed without its queue name being registered is still seen. Each dict is the job's
    JSON plus `_key` (the Redis key) and, for the schedule set, `_score` (epoch seconds).
    """
    queue_keys = {keys.queue(namespace, _text(q)) for q in client.smembers(keys.queues(namespace))}
    queue_keys |= {_text(k) for k in client.scan_iter(match=f"{namespace}queue:*", count=1000)}
    jobs: list[dict[str, Any]] = []
    for key in sorted(queue_keys):
        if _text(client.type(key)) != "list":
            continue
        for raw in client.lrange(key, 0, -1):
            jobs.append(json.loads(raw) | {"_key": key})
    schedule_key = keys.schedule(namespace)
    if _text(client.type(schedule_key)) == "zset":
        scored = cast(list[tuple[bytes, float]],
                      client.zrange(schedule_key, 0, -1, withscores=True))
        for member, score in scored:
            jobs.append(json.loads(member) | {"_key": schedule_key, "_score": score})
    return jobs


Schedules = Config | Mapping[str, tuple[str, str]]


def timetables(schedules: Schedules) -> dict[str, tuple[Timetable, timedelta]]:
    """Schedule name -> (timetable, lookahead), from a Config or from {name: (cron, zone)}."""
    if isinstance(schedules, Config):
        return {s.name: (s.timetable, timedelta(seconds=s.lookahead_s))
                for s in schedules.schedules if s.enabled}
    return {name: (parse_cron(cron, tz), timedelta(0)) for name, (cron, tz) in schedules.items()}


def first_seen(client: redis.Redis, namespace: str = "") -> dict[str, datetime]:
    """Schedule name -> when kiqbeat first saw it, as stored in Redis."""
    return {name: datetime.fromtimestamp(mark.first_seen_ms / 1000, tz=UTC)
            for name, mark in all_marks(client, namespace).items()
            if mark.first_seen_ms is not None}


def stored_schedules(client: redis.Redis, namespace: str = "",
                     window_s: float = 3600.0) -> Config:
    """The schedules the store holds (its definitions hash), as a Config for `check`: the
    expected schedules of a deployment without a document, whose schedules were written
    through the API or the plain-command protocol. A definition kiqbeat would set aside
    (invalid) has no expected ticks, so it is left out."""
    schedules = []
    for name, data in sorted(client.hgetall(keys.definitions(namespace)).items()):
        try:
            schedules.append(read_definition(_text(name), _bytes(data), window_s=window_s))
        except ConfigError:
            continue
    return Config(schedules=tuple(schedules), missed_jobs_window_s=window_s,
                  namespace=namespace)


def shard_of(name: str, count: int) -> int:
    """The shard a schedule name belongs to by DESIGN §7's rule (CRC-32 of the name, modulo
    the shard count), written out here rather than imported, so that the checks below do
    not share the code they judge."""
    return zlib.crc32(name.encode()) % count


def cross_shard(pushed: Mapping[tuple[int, int], Iterable[str]]) -> list[str]:
    """From shard (index, count) -> the schedule names its invocations pushed, each push of
    a schedule that belongs to another shard, described (empty when every shard kept to
    its own)."""
    return [f"shard {index}/{count} pushed {name!r} of shard {shard_of(name, count)}"
            for (index, count), names in sorted(pushed.items())
            for name in sorted(set(names)) if shard_of(name, count) != index]


def expected_ticks(
    client: redis.Redis, schedules: Schedules, *, after: datetime, until: datetime,
    namespace: str = "",
) -> dict[str, tuple[str, datetime]]:
    """jid -> (schedule, tick) for every tick in (max(after, first seen), until + lookahead].

    A schedule kiqbeat never saw has no expected ticks (and any job of it is unexpected).
    With `lookahead`, an invocation at `until` has also pushed the ticks up to
    `until + lookahead` into the schedule set, so those are expected too.
    """
    seen = first_seen(client, namespace)
    out: dict[str, tuple[str, datetime]] = {}
    for name, (timetable, lookahead) in timetables(schedules).items():
        if name not in seen:
            continue
        for tick in timetable.between(max(after, seen[name]), until + lookahead):
            out[jid(name, tick)] = (name, tick)
    return out


def recorded_ticks(client: redis.Redis, schedules: Schedules, namespace: str = ""
                   ) -> dict[str, tuple[str, datetime]]:
    """jid -> (schedule, tick) for every tick the missed-ticks record names now: its
    "AFTER THROUGH REASON" lines read here (epoch ms, ticks in (AFTER, THROUGH]), the ticks
    from each schedule's timetable. A schedule without a timetable here names none."""
    tables = timetables(schedules)
    out: dict[str, tuple[str, datetime]] = {}
    for raw_name, raw in client.hgetall(keys.missed(namespace)).items():
        name = _text(raw_name)
        if name not in tables:
            continue
        for line in _text(raw).splitlines():
            after_ms, through_ms, _ = line.split(" ")
            for tick in tables[name][0].between(_instant(int(after_ms)), _instant(int(through_ms))):
                out[jid(name, tick)] = (name, tick)
    return out


def _instant(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def _stamp_s(value: float | int) -> float:
    """Epoch seconds from a float-seconds or integer-milliseconds job stamp."""
    return value / 1000 if isinstance(value, int) and value > 10**11 else float(value)


def check(
    client: redis.Redis,
    schedules: Schedules,
    *,
    after: datetime,
    until: datetime,
    scenario: str,
    runs: int,
    invocation_s: list[float] | None = None,
    namespace: str = "",
    excused: Callable[[str, datetime], bool] | None = None,
    slack: timedelta = timedelta(0),
    notes: str = "",
    watermark_regressions: int = 0,
    cross_shard: int = 0,
    backfilled: Mapping[str, tuple[str, datetime]] | None = None,
) -> Outcome:
    """Judge what Redis holds against the ticks expected in (after, until (+ lookahead)].

    `backfilled`: the ticks a complete backfill was to push (`recorded_ticks` before it):
    those found are counted as backfilled, and the record must name none any more.

    `excused(schedule, tick)` marks ticks that may legitimately be absent (beyond the
    missed-jobs window, lost with a non-persistent Redis): absent, they are not counted
    expected nor missed; present, they count as pushed (and as duplicates if repeated).
    `slack` extends the period for runs whose end is not one instant (loops stopped by a
    signal): ticks in (until, until + slack] may be present or absent.
    """
    expected = expected_ticks(client, schedules, after=after, until=until + slack,
                              namespace=namespace)
    horizon = {name: until + ahead for name, (_, ahead) in timetables(schedules).items()}

    def is_excused(name: str, tick: datetime) -> bool:
        return tick > horizon[name] or bool(excused and excused(name, tick))
    jobs = jobs_in_redis(client, namespace)
    copies = Counter(job.get("jid") for job in jobs)
    early = unexpected = manual = 0
    for job in jobs:
        tick_of = expected.get(job.get("jid", ""))
        if tick_of is None and MANUAL_JID.fullmatch(str(job.get("jid"))):
            manual += 1
            continue
        if tick_of is None:
            unexpected += 1
            continue
        tick_s = tick_of[1].timestamp()
        if "_score" in job:  # lookahead: released by the worker's poller at the score
            early += job["_score"] < tick_s - 0.0005
        else:
            early += _stamp_s(job.get("enqueued_at", 0)) < tick_s - 0.0005
    found = {j for j in expected if copies[j]}
    absent = [expected[j] for j in expected if not copies[j]]
    excused_absent = sum(1 for name, tick in absent if is_excused(name, tick))
    return Outcome(
        scenario=scenario,
        runs=runs,
        expected=len(expected) - excused_absent,
        pushed=len(found),
        duplicates=sum(n - 1 for j, n in copies.items() if j in expected and n > 1),
        missed=len(absent) - excused_absent,
        early=early,
        invocation_s=list(invocation_s or []),
        notes=notes,
        unexpected=unexpected,
        watermark_regressions=watermark_regressions,
        cross_shard=cross_shard,
        manual=manual,
        backfilled=sum(1 for j in backfilled or {} if j in expected and copies[j]),
        still_recorded=len(recorded_ticks(client, schedules, namespace))
        if backfilled is not None else 0,
    )


def record(outcome: Outcome) -> None:
    """Append the outcome as one JSON line to $KIQBEAT_RELIABILITY_OUT; no-op when unset."""
    path = os.environ.get(OUT_ENV)
    if not path:
        return
    line = asdict(outcome) | {"p99_s": outcome.p99_s(),
                              "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
                              "long": LONG}
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


def assert_clean(outcome: Outcome) -> None:
    """Fail unless every expected tick was pushed exactly once, none early, none invented."""
    bad = {name: getattr(outcome, name) for name in
           ("duplicates", "missed", "early", "unexpected", "watermark_regressions",
            "cross_shard", "still_recorded")
           if getattr(outcome, name)}
    assert not bad, (
        f"{outcome.scenario}: {', '.join(f'{k}={v}' for k, v in bad.items())} "
        f"(expected {outcome.expected} ticks, found {outcome.pushed}, runs {outcome.runs})"
        + (f"; {outcome.notes}" if outcome.notes else ""))


def kiqbeat_state_size(client: redis.Redis, namespace: str = "") -> dict[str, int]:
    """kiqbeat's own keys -> their size (fields or members; 1 for a string): should be
    O(schedules), never O(ticks)."""
    sizes = {}
    for key in client.scan_iter(match=f"{namespace}kiqbeat:*", count=1000):
        name = _text(key)
        kind = _text(client.type(name))
        sizes[name] = (int(client.hlen(name)) if kind == "hash" else
                       int(client.zcard(name)) if kind == "zset" else
                       int(client.xlen(name)) if kind == "stream" else 1)
    return sizes


def assert_bounded_state(client: redis.Redis, schedules: int, namespace: str = "",
                         shards: int = 1) -> None:
    """Fail if kiqbeat keeps keys other than the store's, or more than one entry per schedule
    in any of them (the store: DESIGN §7), or more than MAX_RANGES missed ranges for a
    schedule, or a due index other than those of `shards`
    shards, or an index entry in a shard its name does not belong to."""
    sizes = kiqbeat_state_size(client, namespace)
    # The audit trail is bounded by its own cap (XADD MAXLEN ~: a trim may leave up to one
    # macro node of 100 entries more), not by the number of schedules.
    audit = sizes.pop(keys.audit(namespace), 0)
    assert audit <= MAX_AUDIT_ENTRIES + 100, f"{keys.audit(namespace)}: {audit} entries"
    fixed = {keys.watermarks(namespace), keys.first_seen(namespace),
             keys.definitions(namespace), keys.rejected(namespace), keys.documents(namespace),
             keys.shards(namespace), keys.missed(namespace), keys.history(namespace),
             keys.names(namespace), keys.runs(namespace), keys.skips(namespace),
             keys.last_jobs(namespace), keys.paused(namespace), keys.name_ranges(namespace),
             keys.disabled(namespace), keys.names_built(namespace)}
    shaped = (keys.due(namespace), keys.document_index(namespace, ""),
              keys.progress_bucket(namespace, ""), keys.name_ranges(namespace) + ":")
    assert all(k in fixed or k.startswith(shaped) for k in sizes), sizes
    assert all(size <= schedules for size in sizes.values()), sizes
    for name, record in client.hgetall(keys.missed(namespace)).items():
        lines = len(_text(record).splitlines())
        assert lines <= MAX_RANGES, f"{_text(name)}: {lines} missed ranges recorded"
    indexes = {keys.due(namespace, (index, shards)): index for index in range(shards)}
    for key in sizes:
        if key.startswith(keys.due(namespace)):
            assert key in indexes, f"{key}: not a due index of {shards} shard(s) ({sizes})"
            names = [_text(name) for name in cast(list[bytes], client.zrange(key, 0, -1))]
            strays = [name for name in names if shard_of(name, shards) != indexes[key]]
            assert not strays, f"{key} holds other shards' schedules: {strays}"


class WatermarkSampler:
    """Samples HGETALL of the watermarks hash in a thread; counts any field moving back.

    A sample that fails (Redis restarting, refusing) is skipped; a field that vanishes
    (a non-persistent Redis restarted) starts afresh, and is counted in `resets`.
    """

    def __init__(self, url: str, namespace: str = "", interval_s: float = 0.02) -> None:
        self.url, self.namespace, self.interval_s = url, namespace, interval_s
        self.regressions = self.samples = self.resets = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last: dict[str, int] = {}
        with redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1) as client:
            while not self._stop.wait(self.interval_s):
                try:
                    now = {name: mark.mark_ms for name, mark in
                           all_marks(client, self.namespace).items()}
                except (redis.RedisError, KiqbeatError, ValueError):
                    continue
                self.samples += 1
                if len(now) < len(last):
                    self.resets += 1
                    last = {}
                self.regressions += sum(1 for k, v in now.items() if v < last.get(k, v))
                last = now

    def __enter__(self) -> WatermarkSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def iter_lines(path: str) -> Iterator[dict[str, Any]]:
    """The JSON lines of a reliability file (for the report generator and tests)."""
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)
