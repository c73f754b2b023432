"""The console's name index (`keys.names`): prefix search and paging at any store size.

The definitions hash cannot be read by prefix (HSCAN MATCH reads it all), so the console
keeps every name in a sorted set with score 0 and pages it with ZRANGEBYLEX: a page costs
O(log N + page) whatever the store holds. The store's other writers (documents, the CLI,
other languages' plain Redis commands, docs/store.md) do not know this index, so it is
kept from both sides:

- the console adds or removes the names it writes itself, at once;
- `Sweep` walks the stored names, one bounded page per call, adding every name it meets (a
  full pass at 1,000,000 schedules is about 4,000 calls; the console runs one page every
  `SWEEP_PAUSE_S`), and tallies the states the overview shows. It never reads a definition
  to find names: HSCAN NOVALUES of the definitions hash where the server has it (Redis 7.4,
  Valkey 8), else ZSCAN of the due index (every stored name has an entry there by the
  store's protocol, docs/store.md) and HSCAN of the set-aside hash (the names an
  invocation took out of it), each name checked with HEXISTS. (So on an older server a
  name written against the protocol, without its due entry, is found by its exact name
  only, until an invocation or `schedules reindex` meets it.);
- a name met in the index whose definition is gone is dropped by the reader that met it.

So a schedule written by another writer appears in search at the latest one pass later
(it is always found by its exact name), and a removed one never shows.
"""

from __future__ import annotations

import heapq
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from typing import Any

import redis

from kiqbeat.core.plan import from_ms, to_ms
from kiqbeat.core.records import KINDS
from kiqbeat.errors import KiqbeatError
from kiqbeat.redis import keys, pauses, progress, scripts
from kiqbeat.redis.clock import read_clock
from kiqbeat.redis.connection import redis_errors, reply_text
from kiqbeat.redis.definitions import Oversized, read_present, recorded_shards

# Names per sweep call (HSCAN COUNT, and index names checked). 500 made one call of 5.3 ms
# at 1,000,000 schedules (bench/console.py), over the 5 ms every Redis call keeps under;
# 250 about half.
SWEEP_PAGE = 250
# History buckets per sweep call (redis/progress.py): a few dozen names each at 1,000,000.
SWEEP_BUCKETS = 16
SWEEP_PAUSE_S = 0.01  # between sweep calls: a pass at 1,000,000 takes about a minute
# A pass begins at most once a minute: at 1,000,000 schedules of 1 KB a pass reads ~1 GB of
# definitions (the tally's), so the sweep re-streams the store at most that much a minute.
SWEEP_PASS_S = 60.0
RECENT = 20  # recent pushes the overview lists


def _lex(name: str) -> bytes:
    return name.encode(errors="surrogateescape")


def _text(name: str | bytes) -> str:
    """A name from a reply as the store's names are held (bytes not UTF-8 kept)."""
    return name if isinstance(name, str) else name.decode(errors="surrogateescape")


class NameIndex:
    """The sorted set of names, read and written."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client, self.key = client, keys.names(namespace)

    def add(self, names: list[str]) -> None:
        """Index `names` (idempotent)."""
        if names:
            with redis_errors(self.client, f"indexing names in {self.key}"):
                self.client.zadd(self.key, {_lex(n): 0 for n in names})

    def forget(self, names: list[str]) -> None:
        """Drop `names` from the index (their definitions are gone)."""
        if names:
            with redis_errors(self.client, f"dropping names from {self.key}"):
                self.client.zrem(self.key, *[_lex(n) for n in names])

    def page(self, prefix: str, after: str | None, count: int) -> list[str]:
        """Up to `count` indexed names starting with `prefix`, in byte order, after `after`."""
        low = b"(" + _lex(after) if after is not None else b"[" + _lex(prefix)
        # 0xFF never occurs in UTF-8: every name with the prefix sorts below prefix + 0xFF.
        high = b"[" + _lex(prefix) + b"\xff" if prefix else b"+"
        with redis_errors(self.client, f"reading {self.key}"):
            page: Any = self.client.zrangebylex(self.key, low, high, start=0, num=count)
        return [_text(n) for n in page]

    def size(self) -> int:
        """Names indexed."""
        with redis_errors(self.client, f"reading {self.key}"):
            return int(self.client.zcard(self.key))


@dataclass(frozen=True)
class RecentPush:
    """A push seen in a schedule's history by the sweep."""

    when: datetime
    name: str
    kind: str
    tick: datetime


@dataclass
class Tally:
    """What one full pass of the sweep counted."""

    schedules: int = 0
    paused: int = 0
    queues: Counter[str] = field(default_factory=Counter)
    sources: Counter[str] = field(default_factory=Counter)
    recent: list[RecentPush] = field(default_factory=list)  # newest first
    finished_at: datetime | None = None  # the Redis clock when the pass ended


class Sweep:
    """Walks the definitions and history hashes and the name index, a page per `step`:
    every stored name indexed, every indexed name whose definition is gone dropped, states
    tallied; `last` is the tally of the last finished pass.

    Bounded (DESIGN §2, "Confined"): the walk runs in Redis (sweep.lua) and never reads a
    definition, not even inside Redis (HSCAN NOVALUES, or the due index where the server
    lacks it); the tally reads definitions through the length-checked reader
    (`read_present`), so one over MAX_DEFINITION_BYTES is never read, only counted.
    `run_until` begins a pass at most once every SWEEP_PASS_S."""

    def __init__(self, client: redis.Redis, namespace: str,
                 lua: scripts.Caller = scripts.SCRIPTS) -> None:
        self.client, self.namespace, self.lua = client, namespace, lua
        self.index = NameIndex(client, namespace)
        self.last: Tally | None = None
        self._current, self._defs_cursor, self._history_cursor = Tally(), 0, 0
        self._index_at: bytes | None = b"-"  # ZRANGEBYLEX start of the index walk
        self._recent: list[tuple[int, str, str, int]] = []  # (when ms, name, kind, tick ms)
        self._novalues = True  # HSCAN NOVALUES (Redis 7.4); off after the server refuses it
        # Without NOVALUES: what this pass still walks, (key, mode) (sweep.lua's ARGV[4]).
        self._due_keys: list[tuple[str, str]] = []
        self._script = client.register_script(
            (resources.files("kiqbeat.web") / "sweep.lua").read_text())
        self._lock = threading.Lock()

    def _walk(self) -> tuple[int, list[str], bytes | None]:
        """One call of sweep.lua: (next cursor or -1, names met, next index start)."""
        defs_key, names_key = keys.definitions(self.namespace), keys.names(self.namespace)
        if self._defs_cursor == 0 and not self._due_keys:  # a pass begins
            count = recorded_shards(self.client, self.namespace)
            self._due_keys = [(keys.due(self.namespace, (i, count)), "due")
                              for i in range(count)]
            self._due_keys.append((keys.rejected(self.namespace), "rejected"))
        index_at = self._index_at if self._index_at is not None else b""
        cursor = str(self._defs_cursor) if self._defs_cursor >= 0 else ""

        def call(novalues: bool) -> Any:
            walked, mode = self._due_keys[0] if self._due_keys else (defs_key, "novalues")
            return self._script(keys=[defs_key, names_key, walked],
                                args=[cursor, SWEEP_PAGE, index_at,
                                      "novalues" if novalues else mode])

        with redis_errors(self.client, f"sweeping {defs_key}"):
            if self._novalues:
                try:
                    reply: Any = call(True)
                except redis.ResponseError as exc:
                    if "syntax" not in str(exc).lower():
                        raise
                    self._novalues = False  # before Redis 7.4: walk the due index instead
                    cursor = "0" if cursor else ""
                    reply = call(False)
            else:
                reply = call(False)
        following, met, start, _ = reply
        following_text = reply_text(following)
        next_cursor = int(following_text) if following_text else -1
        if next_cursor < 0 and not self._novalues and len(self._due_keys) > 1:
            self._due_keys.pop(0)  # this key done: the next one's from 0
            next_cursor = 0
        elif next_cursor < 0:
            self._due_keys = []
        start_bytes = start.encode() if isinstance(start, str) else bytes(start)
        return next_cursor, [_text(n) for n in met], start_bytes or None

    def step(self) -> bool:
        """Sweep one page of each hash and of the index; True when this call finished a
        pass."""
        with self._lock:
            if self._defs_cursor >= 0 or self._index_at is not None:
                self._defs_cursor, met, self._index_at = self._walk()
                present = read_present(self.client, self.namespace, met, self.lua)
                held = paused_now(self.client, self.namespace, list(present))
                for name, data in present.items():
                    self._count(data, name in held)
            if self._history_cursor >= 0:
                self._history_cursor, pushes = progress.scan_histories(
                    self.client, self.namespace, self._history_cursor, SWEEP_BUCKETS)
                for name, text in pushes:
                    self._note_push(name, text)
            with redis_errors(self.client, "reading the Redis clock"):
                now = self.client.time()
            if self._defs_cursor >= 0 or self._history_cursor >= 0 or (
                    self._index_at is not None):
                return False
            tally = self._current
            tally.recent = [RecentPush(from_ms(w), n, KINDS.get(k, k), from_ms(t))
                            for w, n, k, t in sorted(self._recent, reverse=True)]
            tally.finished_at = from_ms(int(now[0]) * 1000 + int(now[1]) // 1000)
            self.last = tally
            self._current, self._defs_cursor, self._history_cursor = Tally(), 0, 0
            self._index_at, self._recent = b"-", []
            return True

    def _count(self, data: bytes | Oversized, held: bool = False) -> None:
        """Tally one definition; `held`: a pause record holds it (kiqbeat:paused)."""
        tally = self._current
        tally.schedules += 1
        if isinstance(data, Oversized):
            return  # set aside, never read
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError):
            return
        if not isinstance(raw, dict):
            return
        tally.paused += held or raw.get("enabled", True) is False
        tally.queues[str(raw.get("queue", "default"))[:100]] += 1
        tally.sources[str(raw.get("source", ""))[:200]] += 1

    def _note_push(self, name: str, text: str) -> None:
        first = text.split("\n", 1)[0].split(" ")
        try:
            kind, tick_ms, delay_ms = first[0], int(first[1]), int(first[2])
        except (IndexError, ValueError):
            return
        item = (tick_ms + delay_ms, name, kind, tick_ms)  # a min-heap: the oldest on top
        if len(self._recent) < RECENT:
            heapq.heappush(self._recent, item)
        else:
            heapq.heappushpop(self._recent, item)

    def run_until(self, stop: threading.Event) -> None:
        """Sweep until `stop` is set (a thread's loop): a page every SWEEP_PAUSE_S, and a
        pass begun at most once every SWEEP_PASS_S; a Redis error waits a second and goes
        on."""
        began = time.monotonic()
        while not stop.is_set():
            try:
                finished = self.step()
            except KiqbeatError:
                stop.wait(1.0)
                continue
            if finished:
                stop.wait(max(0.0, began + SWEEP_PASS_S - time.monotonic()))
                began = time.monotonic()
            else:
                stop.wait(SWEEP_PAUSE_S)


def paused_now(client: redis.Redis, namespace: str, names: list[str]) -> set[str]:
    """Those of `names` a pause record (kiqbeat:paused) holds right now (by the Redis
    clock): paused as surely as by `enabled: false`."""
    if not names:
        return set()
    records = pauses.read_pauses(client, namespace, names)
    if not records:
        return set()
    now_ms = to_ms(read_clock(client))
    return {name for name, record in records.items() if record.holds_at(now_ms)}
