"""Every Redis key kiqbeat reads or writes, in one place, with the reason each exists.

`ns` is the configured key prefix: "" for Sidekiq 7+, "exq:" for Exq, "myapp:" for a
Sidekiq 6 app using redis-namespace. kiqbeat's own keys live under the same prefix so
that two apps sharing one Redis keep separate watermarks.
"""

from __future__ import annotations


def progress_bucket(ns: str, bucket: int | str) -> str:
    """Hash: schedule name -> its progress record, for the names in `bucket`
    (redis/progress.py states it): the epoch ms up to which every tick is dealt with (a tick
    above it is pushed, at or below it never is), when kiqbeat first saw the schedule (no
    tick from before is ever pushed), and its last pushes (the newest `history` setting's
    number, default 10). Spread over `limits.STATE_BUCKETS` hashes so that Redis keeps
    each compact; only the scripts write it, in the same step as the jobs."""
    return f"{ns}kiqbeat:progress:{bucket}"


def watermarks(ns: str) -> str:
    """Hash: schedule name -> watermark, epoch ms: the layout before `progress_bucket` (a
    0.1.0 development build's). Read only by the one-time migration (redis/migrate.py,
    lua/migrate.lua, which derives the bucket keys' prefix from it), which moves each name
    into its bucket record and deletes it here; no other script reads it."""
    return f"{ns}kiqbeat:watermarks"


def first_seen(ns: str) -> str:
    """Hash: schedule name -> first-seen, epoch ms: the layout before `progress_bucket`,
    migrated and deleted as `watermarks` is."""
    return f"{ns}kiqbeat:first_seen"


def definitions(ns: str) -> str:
    """Hash: schedule name -> its definition, a JSON object in a document's schedule form.

    The schedule store (DESIGN §7): every schedule kiqbeat runs is here, whoever wrote it.
    A definition written by a document carries `"source"` (the document's location); one
    without it belongs to the API or to another language's writer.
    """
    return f"{ns}kiqbeat:schedules"


def due(ns: str, shard: tuple[int, int] | None = None) -> str:
    """Sorted set: schedule name -> epoch ms at which it next needs planning.

    Its next tick after the watermark, less its lookahead; 0 means "plan me" (new or
    changed). Invocations read only the entries at or below now. With N shards, each shard
    has its own index, and a name's entry lives in shard `crc32(name) % N` (`definitions.shard_of`).
    """
    if shard is None or shard[1] == 1:
        return f"{ns}kiqbeat:due"
    index, count = shard
    return f"{ns}kiqbeat:due:{index}/{count}"


def shards(ns: str) -> str:
    """String: how many shards the due index is split into (absent: one). Recorded by
    `kiqbeat schedules reindex` (and by a writer's first write to an empty store, with the
    writer's count); never by an invocation, which refuses to run with another count (or
    with N > 1 when none is recorded), since the index it would read is not the one writers
    fill."""
    return f"{ns}kiqbeat:shards"


def rejected(ns: str) -> str:
    """Hash: schedule name -> why its stored definition was set aside (invalid).

    Written by an invocation that met the definition; cleared when the definition is
    written again. A set-aside schedule has no index entry until then.
    """
    return f"{ns}kiqbeat:rejected"


def missed(ns: str) -> str:
    """Hash: schedule name -> its recorded missed ticks, as ranges ("AFTER THROUGH REASON"
    lines, core/missed.py): written by the push script with the watermark that passes over
    them, taken out by a backfill as it pushes them; at most 100 ranges a schedule."""
    return f"{ns}kiqbeat:missed"


def history(ns: str) -> str:
    """Hash: schedule name -> its last pushes as text lines ("KIND TICK DELAY [JID]"): the
    layout before `progress_bucket`, migrated and deleted as `watermarks` is."""
    return f"{ns}kiqbeat:history"


def manual(ns: str) -> str:
    """Hash: schedule name -> the jid of its last manual run (`kiqbeat trigger`), so that a
    run re-sent after a lost reply is not pushed twice."""
    return f"{ns}kiqbeat:manual"


def paused(ns: str) -> str:
    """Hash: schedule name -> its pause record, compact JSON {"note", "by", "at", "until"}
    (epoch ms; until null: until resumed). core/pause.py says what it means.

    Its own key, never part of the definition, so that a document rewriting a paused
    schedule leaves it paused. Written by `Store.pause` / `resume` (any writer may HSET or
    HDEL it); read with the definition by the due read; removing a schedule forgets it.
    One field per paused schedule: bounded.
    """
    return f"{ns}kiqbeat:paused"


def calendars(ns: str) -> str:
    """Hash: calendar name -> its dates, a JSON list of "YYYY-MM-DD" strings, sorted (`kiqbeat
    schedules calendar set`, `Store.put_calendar`). A definition written through the API
    whose `except` names one gets its dates written into its own `calendars` (invocations
    never read this key); changing one rewrites those definitions. At most MAX_CALENDARS
    fields of at most MAX_EXCLUDED_DATES dates: bounded."""
    return f"{ns}kiqbeat:calendars"


def runs(ns: str) -> str:
    """Hash: schedule name -> ticks it pushed over its life, for a schedule with `max_runs`
    (invocations and backfills count, manual runs do not). Counted by the push and backfill
    scripts in the step that pushes (redis/lua/life.lua); changing `max_runs` keeps it;
    removing the schedule forgets it. One field per schedule: bounded."""
    return f"{ns}kiqbeat:runs"


def skips(ns: str) -> str:
    """Hash: schedule name -> how many of its next ticks are still to be skipped (`kiqbeat
    schedules skip NAME --count N` adds, the push script takes one per tick it skips and
    drops the field at zero). Removed with the schedule. One field per schedule: bounded."""
    return f"{ns}kiqbeat:skips"


def last_jobs(ns: str) -> str:
    """Hash: schedule name -> the JSON of the last job pushed for an `overlap: skip` or
    `buffer_one` schedule (only those), so the push step finds it byte for byte in its queue or the
    `schedule` set (redis/lua/life.lua `job_waiting`). Removed with the schedule. One field
    per schedule: bounded."""
    return f"{ns}kiqbeat:last_jobs"


def held(ns: str) -> str:
    """Hash: schedule name -> the tick an `overlap: buffer_one` schedule holds while its
    previous job waits or runs (at most one: "TICK RELEASE N\\n", its queue's name, the job's
    JSON; redis/lua/life.lua). Written by the push step that decides to hold it, deleted by
    the one that pushes it (push.lua) and with the schedule. One field per schedule:
    bounded."""
    return f"{ns}kiqbeat:held"


def running_prefix(ns: str) -> str:
    """`running(ns, name)` without the name: the push script appends it."""
    return f"{ns}kiqbeat:running:"


def running(ns: str, name: str) -> str:
    """String: the jid of the schedule's job while a worker runs it, with a TTL (default 1 h).

    Written only by the worker middleware (clients/ruby/lib/kiqbeat/running.rb, Kiqbeat::
    RunningMiddleware; docs/compatibility.md sketches Exq's) for jobs carrying
    `"kiqbeat_schedule": NAME` (pushed for `overlap: skip` schedules): SET ... PX ttl when the
    job starts, deleted when it ends if it still holds that jid. The push step skips an
    `overlap: skip` tick while it exists. One key per running schedule, expiring: bounded.
    """
    return f"{running_prefix(ns)}{name}"


def outcomes_inbox(ns: str) -> str:
    """List: what workers report of the jobs kiqbeat pushed (docs/store.md, "The worker
    protocol": compact JSON entries, LPUSHed by the worker middleware at a job's start and
    end, trimmed to `limits.MAX_OUTCOMES_INBOX`); invocations pop and fold them (fold.lua)
    into `outcomes_bucket`. Bounded even when no invocation runs."""
    return f"{ns}kiqbeat:outcomes:inbox"


def outcomes_bucket(ns: str, bucket: int | str) -> str:
    """Hash: schedule name -> its outcome record (the last N ticks' outcomes and its health,
    lua/fold.lua states the layout), for the names in `bucket` (progress's bucket function).
    Written only by fold.lua; a few bytes a tick, so each bucket stays a listpack."""
    return f"{ns}kiqbeat:outcomes:{bucket}"


def outcomes_errors(ns: str) -> str:
    """Hash: schedule name -> "TICK_MS<TAB>Class: message" of its newest failure, while no
    newer tick has succeeded (fold.lua); one field per failing schedule: bounded."""
    return f"{ns}kiqbeat:outcomes:errors"


def outcomes_changed(ns: str) -> str:
    """Sorted set: schedule name -> sequence number, the schedules whose health the alert
    decision must judge (a failure streak that reached the definition's
    `alert_after_failures` or `pause_after_failures`, a success while an incident is open),
    added by fold.lua, taken away by the decision (incidents.lua) unless added again since;
    at most `limits.MAX_CHANGED_NAMES`, the oldest dropped."""
    return f"{ns}kiqbeat:outcomes:changed"


def outcomes_script(ns: str) -> str:
    """String: "PROTOCOL VERB TARGET HISTORY", the call with which a worker folds its own
    report (docs/store.md, "The worker protocol"), written by invocations whenever it is
    not the call of the fold they run (outcomes/records.py `publish_fold`)."""
    return f"{ns}kiqbeat:outcomes:script"


def documents(ns: str) -> str:
    """Hash: document location -> SHA-256 of the definitions it last applied; and, for a
    document applied by an invocation that parsed it, `document_bytes_field(location)` ->
    the record of the bytes it was applied from (document/fingerprint.py), so that a new
    process running the same bytes does not parse them. The record is trusted only while
    the location's digest is the one it names."""
    return f"{ns}kiqbeat:documents"


def document_bytes_field(source: str) -> str:
    """The `documents` field of the record of a document's bytes ("bytes of LOCATION"; a
    location that happened to be named so would only make its invocations parse)."""
    return f"bytes of {source}"


def document_index(ns: str, source: str) -> str:
    """String: the names and definition digests a document last applied ("NAME\tDIGEST"
    lines, zlib-compressed, base64), from which its next change is a diff."""
    return f"{ns}kiqbeat:document:{source}"


def deadlines(ns: str) -> str:
    """Sorted set: schedule name -> epoch ms at which its earliest outstanding
    `expect_success_within` deadline falls (a pushed tick + the duration). Only schedules
    with the field have an entry; invocations read those scored at or below now (the cost
    follows the deadlines due, never the schedules), and only the incident script
    (redis/lua/incidents.lua) writes it: set after a push (NX), taken away by a success or
    when it opened `silent`."""
    return f"{ns}kiqbeat:deadlines"


def expectations(ns: str) -> str:
    """Hash: schedule name -> "SHA WITHIN ALERT PAUSE": the expectations of the definition
    whose SHA1 is SHA, written by the incident script after each push of a schedule that has
    any, so that an outcome is judged in O(1) without its definition being parsed; a SHA
    that is not the stored definition's (changed, removed) makes it stale (dropped)."""
    return f"{ns}kiqbeat:expectations"


def incidents(ns: str) -> str:
    """Hash: schedule name -> its open incident, JSON {"e": failing | silent | paused,
    "t": opening tick ms, "n": failure streak then}. Opened and closed only by the incident
    script, whose compare-and-set decides each incident once whatever copies race."""
    return f"{ns}kiqbeat:incidents"


def outbox(ns: str) -> str:
    """Stream: the alert events decided (incidents.lua appends; fields k idempotency key,
    s schedule, e event, t tick ms, j jid, x error, n note, at decided ms), trimmed to
    `limits.MAX_OUTBOX_EVENTS`. Each sink is a consumer group: an event is delivered until the
    sink's group acknowledges it (alerts/delivery.py)."""
    return f"{ns}kiqbeat:alerts:outbox"


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


def audit(ns: str) -> str:
    """Stream: the audit trail, one entry per operator action from any entrypoint (who, what,
    which schedule, a note), its id the Redis clock's instant; capped at
    `limits.MAX_AUDIT_ENTRIES` (XADD MAXLEN ~), so it never grows with time."""
    return f"{ns}kiqbeat:audit"


def names(ns: str) -> str:
    """Sorted set: names a plain Redis writer added, changed or removed (docs/store.md's
    protocol: `ZADD kiqbeat:names 0 NAME`), not indexed since. Their facets are unknown until
    kiqbeat indexes them again (redis/names.py), which takes them out; kiqbeat's own writers
    never add here. Before the buckets (`name_ranges`), every name was kept here: such a
    store is brought into the buckets once (redis/names.py `fold`)."""
    return f"{ns}kiqbeat:names"


def name_ranges(ns: str) -> str:
    """Sorted set, every score 0: the lower bound of each bucket of the name index (a name;
    "" for the first). Bucket BOUND is the hash `name_ranges` + ":" + BOUND (its one
    derivation: redis/lua/names.lua, redis/names.py): each indexed name from BOUND up to the
    next bound -> its facets (what the console filters by: enabled, queue, source). At most
    120 a bucket, so Redis keeps each a listpack: the console's prefix search and paging at
    a few dozen bytes a name. Kept by the write script in the same step as the definitions
    (redis/lua/names.lua)."""
    return f"{ns}kiqbeat:name_ranges"


def facets(ns: str) -> str:
    """Hash: the name index's facets before the buckets (`name_ranges`): read by nothing,
    deleted once the store is brought into the buckets (redis/names.py `fold`)."""
    return f"{ns}kiqbeat:facets"


def disabled(ns: str) -> str:
    """Set: the names whose definitions say `enabled: false` (by their facets); kept with
    the name index, so that the overview counts the paused without reading definitions."""
    return f"{ns}kiqbeat:disabled"


def names_built(ns: str) -> str:
    """String "1": the name index covers the store (built once for a store written before
    it existed: redis/names.py)."""
    return f"{ns}kiqbeat:names_built"


def web_session(ns: str, session_id: str) -> str:
    """String with a TTL (the session's 12 hours): a console sign-in's record, compact JSON
    `{"name", "role", "at"}` (the token's name and role, epoch s). The session cookie names
    it; sign-out deletes it, and a cookie whose record is gone is refused (kiqbeat.web.
    sessions). Written by the console only; nothing else reads it."""
    return f"{ns}kiqbeat:web_session:{session_id}"
