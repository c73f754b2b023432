"""Every Redis key kiqbeat reads or writes, in one place, with the reason each exists.

`ns` is the configured key prefix: "" for Sidekiq 7+, "exq:" for Exq, "myapp:" for a
Sidekiq 6 app using redis-namespace. kiqbeat's own keys live under the same prefix so
that two apps sharing one Redis keep separate watermarks.
"""

from __future__ import annotations


def watermarks(ns: str) -> str:
    """Hash: schedule name -> epoch milliseconds up to which every tick is dealt with.

    One field per schedule (bounded state); a tick above the mark is pushed, at or below
    it never is. Only the push script writes it, in the same step as the jobs.
    """
    return f"{ns}kiqbeat:watermarks"


def first_seen(ns: str) -> str:
    """Hash: schedule name -> epoch milliseconds when kiqbeat first saw the schedule.

    Written once (HSETNX); read by `status` and the fault harness to prove no tick from
    before a schedule existed was pushed.
    """
    return f"{ns}kiqbeat:first_seen"


def queue(ns: str, name: str) -> str:
    """List: a Sidekiq queue; workers BRPOP it, so pushing is LPUSH."""
    return f"{ns}queue:{name}"


def queues(ns: str) -> str:
    """Set: the names of all queues, which Sidekiq's web UI and API list."""
    return f"{ns}queues"


def schedule(ns: str) -> str:
    """Sorted set: jobs to run later, scored by epoch seconds; the worker's poller moves them."""
    return f"{ns}schedule"
