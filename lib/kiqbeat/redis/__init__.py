"""The Redis side of kiqbeat (DESIGN §7), by role; `side.RedisSide` owns the client, key
prefix, shard count and scripts and strings the roles together:

- `keys` (every key), `scripts` and `lua/` (the scripts, as EVALSHA or a function library),
  `connection` and `urls` (clients, errors), `clock` (the Redis clock);
- `due`: the due index — what is due, with further reads named; reindex, rescore;
- `definitions`: definitions — read, written (write.lua), size-checked;
- `documents`: documents applied as diffs, their digests and indexes;
- `pushes`: every push — an invocation's (push.lua), a backfill's (backfill.lua), a manual
  run's (trigger.lua);
- `operator_reads`: what `status`, `missed`, `backfill` and `history` read;
- `neighbours` and `scheduler_ui`: living beside sidekiq-scheduler and sidekiq-cron.

"Records" means one thing on both sides: what kiqbeat records per schedule for its
operators, missed ranges and history (`core/records.py` reads them, `lua/records.lua`
writes them).
"""
