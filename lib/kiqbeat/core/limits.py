"""Every bound kiqbeat enforces so that one schedule, one operator command or one typo costs
only what it touches (DESIGN §2 "Confined"), in one place; docs/security.md lists them and
says what happens when each is reached.

Values are chosen from what Sidekiq users put in a job, not from what Redis can hold: a
Sidekiq job's JSON is typically under a few KB, and Sidekiq itself warns about large
arguments. Anything beyond these is a mistake or an attack, and is refused or set aside
naming the schedule, never allowed to stop the others.
"""

from __future__ import annotations

# A stored definition (its JSON, as in the definitions hash). Writers refuse larger ones;
# an invocation sets aside a larger one after asking Redis its length (HSTRLEN), without
# ever transferring it.
MAX_DEFINITION_BYTES = 64 * 1024

# Definitions one due read brings back at most, in bytes: with the definition limit, what
# bounds an invocation's memory whatever the store holds (a batch is then cut short and
# the rest read by the next round trip).
MAX_BATCH_DEFINITION_BYTES = 2 * 1024 * 1024

# Shards a due index may be split into (`--shard I/N`, `kiqbeat schedules reindex`).
MAX_SHARDS = 1024

# A backfill that would push more jobs than this asks first (`--yes` or `--max-jobs N`).
BACKFILL_CONFIRM_JOBS = 10_000

# A dry run counts exactly up to this many ticks, and says "N+" beyond.
MAX_COUNTED_TICKS = 10_000_000

# A value from the store or from a user shown in a message, a line or a log: at most this
# many characters, escaped (control, bidi and non-UTF-8 bytes made visible).
MAX_SHOWN_CHARS = 200

# Audit trail entries kept (a Redis stream trimmed with XADD MAXLEN ~, so a few more may stay
# until the next trim); about 150 bytes each. An entry's note is clipped to the second.
MAX_AUDIT_ENTRIES = 10_000
MAX_AUDIT_NOTE_CHARS = 500

# The console's pages and API: rows a page lists at most, and names one request examines at
# most when filtering (by state, queue or source), so that a page costs the same whatever
# the store holds; a filter that matched fewer rows still returns a cursor to go on from.
MAX_PAGE_ROWS = 200
MAX_EXAMINED_PER_PAGE = 2_000
