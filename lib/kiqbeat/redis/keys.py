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


# ---------------------------------------------------------------------------- neighbours'
# Keys of sidekiq-scheduler (and exq-scheduler) and sidekiq-cron: kiqbeat reads them to
# refuse a job both would run, and writes the Recurring Jobs tab's (scheduler_ui.py says
# what the tab reads in each).


def schedules_key(ns: str) -> str:
    """Hash: name -> JSON spec; sidekiq-scheduler's (or exq-scheduler's) schedule, the tab's
    list of jobs."""
    return f"{ns}schedules"


def states_key(ns: str) -> str:
    """Hash: name -> JSON {"enabled": bool}; written only by the tab's toggle button."""
    return f"{ns}sidekiq-scheduler:states"


def last_times_key(ns: str) -> str:
    """Hash: name -> time string of the last push (the tab's "Last run")."""
    return f"{ns}sidekiq-scheduler:last_times"


def next_times_key(ns: str) -> str:
    """Hash: name -> time string of the next push (the tab's "Next run")."""
    return f"{ns}sidekiq-scheduler:next_times"


def pushed_key(ns: str, name: str) -> str:
    """Sorted set sidekiq-scheduler adds each push of `name` to; expires 24 h after the last."""
    return f"{ns}sidekiq-scheduler:pushed:{name}"


def cron_job_key(ns: str, name: str) -> str:
    """Hash: sidekiq-cron's job of that name (its poller enqueues every such job)."""
    return f"{ns}cron_job:{name}"


def schedules_changed_key(ns: str) -> str:
    """Sorted set of edited names that a dynamic sidekiq-scheduler reloads; never written here."""
    return f"{ns}schedules_changed"
