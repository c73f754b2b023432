--[[
kiqbeat push grants: every command a push call may run on its keys, asked of the ACL (Redis
7+; 6.2 cannot ask, and refuses the command itself). Put before push_checks.lua (the
pre-flight, which checks the types too) and push.lua, which asks again in every call before
its first write: a grant revoked after the pre-flight then refuses the call whole instead of
half-way (each ask costs about 0.4 us, a few per call; docs/store.md "Pre-flight").
KEYS: push.lua's; `nq` its queue count. Needs use_state() called first (progress.lua).
]]

local function push_allowed(keys, nq)
  local queues_key, due_key, defs_key = keys[2], keys[4], keys[5]
  local rejected_key, missed_key = keys[6], keys[7]
  local err = expect_allowed('SADD', queues_key, 'q') or expect_allowed('ZADD', due_key, '0', 'n')
    or expect_allowed('HMGET', defs_key, 'f') or expect_allowed('HSTRLEN', defs_key, 'f')
    or expect_allowed('HDEL', rejected_key, 'f') or expect_allowed('HLEN', rejected_key)
    or expect_allowed('HSET', rejected_key, 'f', 'r') or expect_allowed('ZREM', due_key, 'n')
    or expect_allowed('HGET', missed_key, 'f') or expect_allowed('HSET', missed_key, 'f', 'r')
    or state_allowed()
    or life_allowed({runs = keys[8], skips = keys[9], last = keys[10], held = keys[11]})
  if err then return err end
  for k = 1, nq do
    err = expect_allowed('LPUSH', keys[11 + k], 'job') or expect_allowed('LPOS', keys[11 + k], 'job')
    if err then return err end
  end
  return nil
end
