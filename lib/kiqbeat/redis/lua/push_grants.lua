--[[
kiqbeat push checks: the types of push.lua's keys, and every command a push call may run on
them, asked of the ACL (Redis 7+; 6.2 cannot ask, and refuses the command itself). Put
before push.lua, which runs them in every call before its first write, so a key retyped by
hand or a grant revoked refuses the call whole instead of half-way (a TYPE costs about 1 us,
an ask about 0.4 us, a few dozen a call; docs/store.md "Pre-flight").
KEYS: push.lua's; `nq` its queue count. Needs use_state() called first (progress.lua).
]]

-- Every check of push.lua's keys before its first write: their types, then their grants
-- (`life`: push.lua's life keys).
local function push_checked(keys, nq, life)
  local queues_key, due_key, defs_key = keys[2], keys[4], keys[5]
  local rejected_key, missed_key = keys[6], keys[7]
  local err = expect_allowed('TYPE', queues_key)
    or expect_type(queues_key, 'set') or expect_type(keys[3], 'zset')
    or expect_type(due_key, 'zset') or expect_type(defs_key, 'hash')
    or expect_type(rejected_key, 'hash') or expect_type(missed_key, 'hash')
    or life_types(life)
  if err then return err end
  for k = 1, nq do
    err = expect_type(keys[11 + k], 'list')
    if err then return err end
  end
  err = expect_allowed('SADD', queues_key, 'q') or expect_allowed('ZADD', due_key, '0', 'n')
    or expect_allowed('HMGET', defs_key, 'f') or expect_allowed('HSTRLEN', defs_key, 'f')
    or expect_allowed('HDEL', rejected_key, 'f') or expect_allowed('HLEN', rejected_key)
    or expect_allowed('HSET', rejected_key, 'f', 'r') or expect_allowed('ZREM', due_key, 'n')
    or expect_allowed('HGET', missed_key, 'f') or expect_allowed('HSET', missed_key, 'f', 'r')
    or state_allowed() or life_allowed(life)
  if err then return err end
  for k = 1, nq do
    err = expect_allowed('LPUSH', keys[11 + k], 'job') or expect_allowed('LPOS', keys[11 + k], 'job')
    if err then return err end
  end
  return nil
end
