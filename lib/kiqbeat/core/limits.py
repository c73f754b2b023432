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

# The last instant kiqbeat plans, epoch ms (9999-12-31T23:59:59.999Z, the end of Python's
# datetime): a due index entry scored above it (1e308, +inf: written by hand or by another
# language) would never be planned. Invocations warn about such entries, `kiqbeat status`
# counts and names them, and `kiqbeat schedules reindex` rescores them "plan me" (0).
MAX_PLANNABLE_MS = 253_402_300_799_999
