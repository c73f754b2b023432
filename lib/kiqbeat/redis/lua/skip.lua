--[[
kiqbeat skip script: add pending skips to one stored schedule (`kiqbeat schedules skip`,
Store.skip), atomically with the check that it exists and the cap on pending skips; the push
step takes them (life.lua). One script, so the least-privilege ACL users need nothing more
(no WATCH/MULTI/EXEC).

KEYS[1]  definitions hash    KEYS[2]  skips hash (name -> ticks still to skip)
ARGV[1]  schedule name    ARGV[2]  skips to add (1 or more)
A schedule may have at most MAX_PENDING_SKIPS pending (core/limits.py, in the header).

Returns {code, pending}: code "+" added (pending: the skips now pending), "M" no such
schedule (nothing written), "C" the cap would be passed (nothing written; pending: the
skips pending), "G" the pending count stored is not a whole number (nothing written; in
place of pending: why, life.lua's life_count).
]]

local defs_key, skips_key = KEYS[1], KEYS[2]
local err = expect_type(defs_key, 'hash') or expect_type(skips_key, 'hash')
  or expect_allowed('HEXISTS', defs_key, 'f') or expect_allowed('HGET', skips_key, 'f')
  or expect_allowed('HINCRBY', skips_key, 'f', '1')
if err then return err end

local name, count = ARGV[1], tonumber(ARGV[2])
if redis.call('HEXISTS', defs_key, name) == 0 then return {'M', 0} end
local pending, why = life_count(skips_key, name, 'ticks to skip')
if pending == nil then return {'G', why} end  -- written by hand: refused by name, kept
pending = math.max(0, pending)
if pending + count > MAX_PENDING_SKIPS then return {'C', pending} end
return {'+', redis.call('HINCRBY', skips_key, name, count)}
