--[[
kiqbeat push pre-flight: push.lua's key-type and ACL checks, run before a push call whose
keys were not checked yet (redis/pushes.py `Pusher.preflight`: once per process, again after
a failed call), not in every push call.

KEYS and ARGV: push.lua's, as the push call they come before (its header names them).
Returns "OK", or the refusal of the first key that fails: KIQBEAT_WRONGTYPE (a key of
another type than push.lua expects) or KIQBEAT_NOPERM (a command the Redis user may not
run on a key; Redis 7+ only: 6.2 has no way to ask, and refuses the command itself).

Writes nothing. What push.lua still checks itself in every call: the types of the keys it
first touches with a write, every grant (push_grants.lua: cheap, and a grant revoked since
this ran must refuse the call whole), and what depends on what a call carries: the
`schedule` set's ZADD (only when a job is released later), the running markers and ZSCORE
of an `overlap` group, a held job's queue. A key retyped by hand, or a
grant revoked, after this ran and before a push call: docs/store.md "Pre-flight".
]]

local bucket_key, queues_key, sched_key = KEYS[1], KEYS[2], KEYS[3]
local due_key, defs_key, rejected_key, missed_key = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local life = {runs = KEYS[8], skips = KEYS[9], last = KEYS[10], held = KEYS[11]}
local FIRST_QUEUE = 11
local nq = tonumber(ARGV[3])

local err = expect_allowed('TYPE', queues_key)
if err then return err end
err = expect_type(queues_key, 'set') or expect_type(sched_key, 'zset')
  or expect_type(due_key, 'zset') or expect_type(defs_key, 'hash')
  or expect_type(rejected_key, 'hash') or expect_type(missed_key, 'hash')
  or life_types(life)
if err then return err end
for k = 1, nq do
  err = expect_type(KEYS[FIRST_QUEUE + k], 'list')
  if err then return err end
end

use_state(bucket_key, 'kiqbeat:progress:0')
return push_allowed(KEYS, nq) or 'OK'
