"""Every bound kiqbeat enforces so that one schedule, one operator command or one typo costs
only what it touches (DESIGN §2 "Confined"), in one place; docs/security.md lists them and
says what happens when each is reached.

Values are chosen from what Sidekiq users put in a job, not from what Redis can hold: a
Sidekiq job's JSON is typically under a few KB, and Sidekiq itself warns about large
arguments. Anything beyond these is a mistake or an attack, and is refused or set aside
naming the schedule, never allowed to stop the others.

Measured (tests/integration/test_confined.py and the same runs at other sizes; `kiqbeat
run-once` as a new process in a cgroup v1 memory group, peak = memory.max_usage_in_bytes,
Redis 7.0.15, Python 3.11): an empty store 25 MiB; beside 73 MB of hostile definitions
(40 MB non-JSON, 30 MB valid JSON, one over the limit under a 2,000-character name) 25 MiB,
Redis sending under 6 KB to it; 2,000 or 20,000 valid definitions of 64 KiB, all due,
63-66 MiB. So an invocation's peak memory is about 70 MiB whatever the store holds (the
Kubernetes manifests' 128Mi limit; before these bounds: OOM-killed at 128 MiB, and 512 MiB
for 20,000 definitions of 64 KiB).
"""

from __future__ import annotations

# A stored definition (its JSON, as in the definitions hash). Writers refuse larger ones;
# an invocation sets aside a larger one after asking Redis its length (HSTRLEN), without
# ever transferring it.
MAX_DEFINITION_BYTES = 64 * 1024

# A file holding one definition (`kiqbeat schedules add|put|update --file`): read no further,
# so that a huge file is refused before it is parsed (a 30 MB one held 153 MB while being
# read). Room for YAML comments and indentation around a definition at the limit.
MAX_DEFINITION_FILE_BYTES = 16 * MAX_DEFINITION_BYTES

# Definitions one due read brings back at most, in bytes: with the definition limit, what
# bounds an invocation's memory whatever the store holds (a batch is then cut short and
# the rest read by the next round trip). It also bounds the definitions a push call hashes
# (SHA1) to check they are unchanged, hence the time each call holds Redis. 300 due
# definitions of 64 KiB, three invocations, SLOWLOG, same machine and load: at 2 MiB a push
# call took 6.3-6.9 ms (median; max 13 ms) and a due read 3.2 ms (max 7.2 ms); at 512 KiB,
# 1.5 ms (max 2.0 ms) and 0.8 ms (max 1.7 ms).
MAX_BATCH_DEFINITION_BYTES = 512 * 1024

# Definitions a warm engine keeps parsed (its cache, keyed by the stored bytes), in bytes:
# with the two bounds above, what keeps an invocation's memory bounded when many large
# definitions are due (the cache is emptied when it would pass this).
MAX_PARSED_DEFINITION_BYTES = 16 * 1024 * 1024

# Entries each of `document.validate`'s three caches of checked definitions keeps (templates:
# all but name, args and timing; timings; the text of all but the args), the oldest dropped
# first. Measured with tracemalloc: 3.7 KB per distinct definition in all three (most of it
# the parsed cron), so at most ~15 MB. Enough for bench/store.py's schedules (8 templates,
# 3,060 timings, ~24,500 texts of which a minute's due set meets ~40, each hourly one again
# every hour: ~100 minutes of them kept).
MAX_CHECKED_TEMPLATES = 4_096

# Stored definitions a warm engine keeps parsed (about 2 KB each, with at most
# MAX_PARSED_DEFINITION_BYTES of definitions), and the args' JSON a warm process keeps for
# rendering jobs (only a kept schedule is rendered again, so as many).
MAX_PARSED_DEFINITIONS = 20_000

# Shards a due index may be split into (`--shard I/N`, `kiqbeat schedules reindex`).
MAX_SHARDS = 1024

# A backfill that would push more jobs than this asks first (`--yes` or `--max-jobs N`).
BACKFILL_CONFIRM_JOBS = 10_000

# A dry run counts exactly up to this many ticks, and says "N+" beyond.
MAX_COUNTED_TICKS = 10_000_000

# A value from the store or from a user shown in a message, a line or a log: at most this
# many characters, escaped (control, bidi and non-UTF-8 bytes made visible).
MAX_SHOWN_CHARS = 200

# A natural-language schedule (fugit's `every day at 3am`) longer than this is refused before
# it is read, as fugit refuses it (`Fugit::Nat::MAX_INPUT_LENGTH`).
MAX_NATURAL_CHARS = 256

# Why a definition was set aside, as stored (`keys.rejected`) and shown back: kiqbeat's own
# message (each value in it already clipped to MAX_SHOWN_CHARS), cut here so that a
# definition with thousands of problems stores and shows a bounded reason.
MAX_REASON_CHARS = 2000

# The last instant kiqbeat plans, epoch ms (9999-12-31T23:59:59.999Z, the end of Python's
# datetime): a due index entry scored above it (1e308, +inf: written by hand or by another
# language) would never be planned. Invocations warn about such entries, `kiqbeat status`
# counts and names them, and `kiqbeat schedules reindex` rescores them "plan me" (0).
MAX_PLANNABLE_MS = 253_402_300_799_999

# A schedule's name as an operator's request gives it (`kiqbeat schedules get NAME`, an
# event's "name"): kiqbeat writes names of at most 1,000 characters, but another language
# may have stored longer ones, which the operator must still reach. Linux's longest single
# argument (MAX_ARG_STRLEN), so a name any command line can pass, the event can pass too.
MAX_REQUEST_NAME_CHARS = 131_072
# Audit trail entries kept (a Redis stream trimmed with XADD MAXLEN ~, so a few more may stay
# until the next trim); about 150 bytes each. An entry's note is clipped to the second.
MAX_AUDIT_ENTRIES = 10_000
MAX_AUDIT_NOTE_CHARS = 500
# A pause's note (`schedules pause --note`, core/pause.py): as long as an audit note, so the
# audit entry of the pause carries it whole.
MAX_PAUSE_NOTE_CHARS = MAX_AUDIT_NOTE_CHARS
# `kiqbeat status` names at most this many ended schedules (and counts them all).
MAX_ENDED_LISTED = 20

# The console's pages and API: rows a page lists at most, and names one request examines at
# most when filtering (by state, queue or source), so that a page costs the same whatever
# the store holds; a filter that matched fewer rows still returns a cursor to go on from.
MAX_PAGE_ROWS = 200
MAX_EXAMINED_PER_PAGE = 2_000

# A schedule's `jitter` (core/lifecycle.py): at most a day, and at most the schedule's
# shortest period between two ticks (on a day without a DST change), so a tick's job is
# always delivered before the next tick's: jobs keep their order, and with `overlap: skip`
# a job still waiting for its own offset never makes the next tick skip. A day because a
# longer delay is not jitter but another schedule.
MAX_JITTER_S = 86_400

# `overlap: skip` looks for the schedule's previous job among the first MAX_OVERLAP_SCAN
# jobs of its queue from the head (LPOS ... MAXLEN; LPUSH puts the newest there), inside
# the push step: a scan holds Redis for about 0.4 ms at this length (measured: 10,000
# jobs of 130 bytes, Redis 7, LPOS ... MAXLEN 10000 of a job not there, 0.38 ms), once per
# due `overlap: skip` schedule whose previous job is not found sooner. A previous job with more
# than this many newer jobs still waiting behind it in the same queue is not seen, and
# the tick is pushed (the running marker still holds it back once that job starts).
MAX_OVERLAP_SCAN = 10_000

# A schedule's expectations (alerts/, DESIGN §12): `expect_success_within` at most 31 days (a
# deadline index entry per pushed tick; a longer silence is not a dead-man check but a
# calendar), and `alert_after_failures` / `pause_after_failures` at most this many ticks.
MAX_EXPECT_S = 31 * 86_400
MAX_FAILURE_STREAK = 1_000

# Alert events kept until every sink acknowledged them (the outbox stream, trimmed to this
# length: a webhook down for days loses the oldest, never the invocation's memory or time),
# events one invocation delivers per sink, and how long one delivery may take.
MAX_OUTBOX_EVENTS = 10_000
# Schedules with expectations the metrics show a row of gauges for (bounded cardinality).
MAX_GAUGED_SCHEDULES = 1_000
MAX_DELIVERED_PER_INVOCATION = 50
ALERT_TIMEOUT_S = 2.0

# Pending skips one schedule may hold (`kiqbeat schedules skip NAME --count N`): the push
# script takes them one tick at a time, so a count is bounded by what makes sense to skip
# one by one (a year of hourly ticks); to stop a schedule for longer, pause it.
MAX_PENDING_SKIPS = 10_000

# A schedule's `max_runs`: the run count lives in a Lua number (a double), exact up to 2**53.
MAX_RUNS = 2**53

# Dates one schedule excludes (`except:`, with the calendars it names written in): forty
# years of twenty-five holidays, about 13 KB of a definition's 64 KiB; and the calendars a
# document may define.
MAX_EXCLUDED_DATES = 1_000
MAX_CALENDARS = 100

# Missed ticks counted per schedule, by an invocation (the report's `missed`, the
# MissedRecorded metric) and by `kiqbeat missed` / `backfill --dry-run`'s listing alike: one
# cap, so the two never disagree. Beyond it a count is a lower bound, shown "N+". Counting
# walks the timetable tick by tick: a schedule firing every second that was down for a month
# would otherwise cost millions of steps inside an invocation just to print a number.
MAX_MISSED_COUNTED = 10_000

# A push call (push.lua) is sized by the time it is estimated to hold Redis, not by a count:
# PUSH_US_PER_GROUP per schedule (its watermark, definition SHA1, history and index entry)
# plus PUSH_US_PER_JOB per job (its LPUSH and history line), kept within
# PUSH_CALL_BUDGET_US, so that no call blocks other clients for long (DESIGN §1: at most
# 5 ms at any size; target per call: 99th percentile 2 ms). Measured (Redis 7.0.15, 2 shared
# cores, replaying captured calls: bench/lua_replay.py): one job per schedule, 14-16 us a
# schedule at 10,000 schedules and 16-24 at 200,000-1,000,000 (15 was too low there: calls ran
# 1.7-2.2 ms); one schedule's catch-up of 6,000 ticks, 2.4-2.5 us a job (1.33 ms a call of
# 600). The budget leaves room for a loaded machine.
PUSH_CALL_BUDGET_US = 1_500
PUSH_US_PER_GROUP = 20.0
PUSH_US_PER_JOB = 2.5

# How many small hashes the schedules' progress records (watermark, first-seen and history,
# one field each) are spread over, by a stable hash of the name (redis/progress.py). Redis
# keeps a hash of at most 128 fields (hash-max-listpack-entries; 512 by default) of at most 64
# bytes each (-value) as a listpack, about a fifth of a hash table's size: 16,384 buckets keep
# every bucket under 128 fields up to about 1,500,000 schedules, and a record with the
# default history of 10 is 44-62 bytes (a bucket past either limit only costs more memory).
# Part of the stored layout: changing it loses every watermark.
STATE_BUCKETS = 16_384

# The outcomes inbox (keys.outcomes_inbox) keeps at most this many entries: workers trim it
# as they push (LTRIM), so a deployment whose invocations stop cannot grow it without bound.
MAX_OUTCOMES_INBOX = 100_000
# An invocation folds at most this many inbox entries per script call (a bounded slice:
# no call holds Redis long: about 5 ms at 50 us an entry) and at most FOLD_SLICES calls per
# invocation (its deadline ends it sooner).
FOLD_SLICE = 100
FOLD_SLICES = 400
# The changed names (keys.outcomes_changed, fold.lua) keep at most this many schedules whose
# health the alert decision must judge (the oldest dropped); an invocation judges at most
# CHANGED_PER_INVOCATION of them, oldest first (the rest: the next invocation).
MAX_CHANGED_NAMES = 10_000
CHANGED_PER_INVOCATION = 1_000
# `expires_after` is at most a week (a job older than that is another job), and a
# schedule's `history` (ticks its records keep) at most MAX_HISTORY, as the setting's
# (DEFAULT_HISTORY when not set).
MAX_EXPIRES_AFTER_S = 7 * 86_400.0
MAX_HISTORY = 1000
DEFAULT_HISTORY = 10
# A schedule holding a tick (`overlap: buffer_one`) is planned again this soon, ms: push.lua
# scores its index entry so (`kiqbeat run` then releases the tick within about a second of
# its previous job's end), and the report's next due instant says so.
HELD_RECHECK_MS = 1000
# `kiqbeat report` looks for a pushed job still waiting among this many jobs at each end of
# its queue and in the `schedule` set around its ticks (one bounded round trip).
MAX_WAITING_SCAN = 1000
# Sidekiq's Ruby JSON parser refuses nesting deeper than 100 (the job sent straight to Dead,
# unrun); the job hash itself is level 1. A stored definition (level 1, its args and payload
# below it) deeper than this is refused as it is read (core/json_text.py): no valid one is,
# and writers of YAML and other readers recurse on it.
MAX_JSON_DEPTH = 100
