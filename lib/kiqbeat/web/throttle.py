"""The console's throttle on token guesses: a wrong token costs its sender time.

Every wrong token presented — the sign-in form's, a bearer token of the API or /metrics —
takes one from two token buckets: its client address's (`PER_ADDRESS_BURST`, one back every
`PER_ADDRESS_REFILL_S`) and the console's as a whole (`OVERALL_BURST`, one back every
`OVERALL_REFILL_S`). While an address's bucket is empty, every token it presents (right or
wrong: a different answer for a right one would tell a guesser it was right) is answered
429 with Retry-After, before it is compared. While the overall bucket is empty, so is every
address with a wrong token in the last few minutes; an address with none is still served,
so a flood of guesses from many addresses cannot lock the console's users out.

Held in process, not in Redis: a flood of guesses costs the Redis that every Sidekiq client
shares nothing, and a guess is refused with no round trip. With N replicas a guesser gets N
times the rate; against tokens of at least 72 estimated bits (auth.MIN_TOKEN_BITS) even
N x 2 guesses a second never comes near. Behind a proxy, run `kiqbeat web --proxy-headers`
so that the address is the client's, not the proxy's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

PER_ADDRESS_BURST = 10
PER_ADDRESS_REFILL_S = 6.0  # ten wrong tokens a minute, sustained, per address
OVERALL_BURST = 100
OVERALL_REFILL_S = 0.5  # two a second, sustained, for the whole console
MAX_ADDRESSES = 10_000  # addresses remembered (the oldest forgotten first)


@dataclass
class _Bucket:
    tokens: float
    at: float


def _level(bucket: _Bucket, now: float, burst: int, refill_s: float) -> float:
    return min(float(burst), bucket.tokens + (now - bucket.at) / refill_s)


class Throttle:
    """Token buckets of wrong tokens, per client address and overall."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *,
                 per_address: tuple[int, float] = (PER_ADDRESS_BURST, PER_ADDRESS_REFILL_S),
                 overall: tuple[int, float] = (OVERALL_BURST, OVERALL_REFILL_S)) -> None:
        self.clock = clock
        (self.burst, self.refill_s), (self.all_burst, self.all_refill_s) = per_address, overall
        self._addresses: dict[str, _Bucket] = {}
        self._overall = _Bucket(float(self.all_burst), clock())
        self._lock = threading.Lock()

    def wait_s(self, address: str) -> float:
        """0 when `address` may present a token now; else the seconds until it may."""
        now = self.clock()
        with self._lock:
            bucket = self._addresses.get(address)
            if bucket is None:
                return 0.0
            mine = _level(bucket, now, self.burst, self.refill_s)
            if mine < 1:
                return (1 - mine) * self.refill_s
            overall = _level(self._overall, now, self.all_burst, self.all_refill_s)
            if overall < 1 and mine < self.burst:
                return (1 - overall) * self.all_refill_s
            return 0.0

    def failed(self, address: str) -> None:
        """Count a wrong token from `address`."""
        now = self.clock()
        with self._lock:
            bucket = self._addresses.pop(address, None) or _Bucket(float(self.burst), now)
            bucket.tokens = _level(bucket, now, self.burst, self.refill_s) - 1
            bucket.at = now
            self._addresses[address] = bucket  # to the end: the most recent
            self._overall.tokens = _level(self._overall, now, self.all_burst,
                                          self.all_refill_s) - 1
            self._overall.at = now
            while len(self._addresses) > MAX_ADDRESSES:
                del self._addresses[next(iter(self._addresses))]
