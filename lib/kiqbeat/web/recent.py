"""The overview's recent pushes: a bounded background walk of the history buckets.

The console's names, filters and counts come from the name index the write script keeps
(redis/names.py), so nothing here reads a definition. The newest pushes across the store
have no index of their own (the push script, the hot path, does not keep one): `Recent`
reads the history buckets (about 44 bytes a schedule) a few per call, and `last` holds the
newest RECENT pushes of its last full pass.
"""

from __future__ import annotations

import heapq
import threading
import time
from dataclasses import dataclass
from datetime import datetime

import redis

from kiqbeat.core.instants import from_ms, to_ms
from kiqbeat.errors import KiqbeatError
from kiqbeat.redis import pauses, progress
from kiqbeat.redis.clock import read_clock

# History buckets per call (redis/progress.py): a few dozen names each at 1,000,000.
WALK_BUCKETS = 16
WALK_PAUSE_S = 0.01  # between calls
WALK_PASS_S = 60.0  # a pass begins at most once a minute
RECENT = 20  # recent pushes the overview lists


@dataclass(frozen=True)
class RecentPush:
    """A push seen in a schedule's history."""

    when: datetime
    name: str
    kind: str
    tick: datetime


class Recent:
    """Walks the history buckets, a page per `step`; `last` is the newest pushes of the last
    finished pass (None before the first)."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client, self.namespace = client, namespace
        self.last: list[RecentPush] | None = None
        self._bucket = 0
        self._heap: list[tuple[int, str, str, int]] = []  # (when ms, name, kind, tick ms)
        self._lock = threading.Lock()

    def step(self) -> bool:
        """Read one page of buckets; True when this call finished a pass."""
        with self._lock:
            self._bucket, pushes = progress.scan_histories(
                self.client, self.namespace, self._bucket, WALK_BUCKETS)
            for name, push in pushes:  # kept in a min-heap of RECENT: the oldest on top
                item = (to_ms(push.when), name, push.kind, to_ms(push.tick))
                if len(self._heap) < RECENT:
                    heapq.heappush(self._heap, item)
                else:
                    heapq.heappushpop(self._heap, item)
            if self._bucket >= 0:
                return False
            self.last = [RecentPush(from_ms(w), n, k, from_ms(t))
                         for w, n, k, t in sorted(self._heap, reverse=True)]
            self._bucket, self._heap = 0, []
            return True

    def run_until(self, stop: threading.Event) -> None:
        """Walk until `stop` is set (a thread's loop): a page every WALK_PAUSE_S, a pass begun
        at most once every WALK_PASS_S; a Redis error waits a second and goes on."""
        began = time.monotonic()
        while not stop.is_set():
            try:
                finished = self.step()
            except KiqbeatError:
                stop.wait(1.0)
                continue
            if finished:
                stop.wait(max(0.0, began + WALK_PASS_S - time.monotonic()))
                began = time.monotonic()
            else:
                stop.wait(WALK_PAUSE_S)


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
