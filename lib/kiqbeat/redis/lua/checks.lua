-- kiqbeat's checks, put before every script (scripts.py): all run before a script's first
-- write, since Redis does not roll a script back and keeps what a refused call wrote. And what
-- every script shares: a schedule's bucket, the clock, epoch ms as text, commands in batches.

-- The bucket of schedule `name`: SHA1's first 4 hex digits mod STATE_BUCKETS. It holds the
-- schedule's progress record (progress.lua) and its outcome record (outcomes.lua);
-- redis/progress.py's `bucket` is the Python side.
local function bucket_of(name)
  return tonumber(string.sub(redis.sha1hex(name), 1, 4), 16) % STATE_BUCKETS
end

-- A key of another type than the script expects: refused, naming it.
local function expect_type(key, allowed)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= allowed then
    return redis.error_reply('KIQBEAT_WRONGTYPE key ' .. key .. ' holds a ' .. t .. ', expected a ' .. allowed)
  end
  return nil
end

-- Redis checks a script's commands against the user's ACL one by one as they run: ask
-- first (Redis 7+; 6.2 has no way to ask).
local function expect_allowed(command, key, ...)
  if redis.acl_check_cmd and not redis.acl_check_cmd(command, key, ...) then
    return redis.error_reply('KIQBEAT_NOPERM the Redis user may not run ' .. command ..
      ' on ' .. key .. '; grant +' .. string.lower(command) .. ' and the key pattern')
  end
  return nil
end

-- The Redis clock: TIME's {seconds, microseconds}, as strings. In the test suite
-- (TEST_CLOCK_KEY set: redis/clock.py) that many milliseconds later, so a test moves time on
-- instead of sleeping; a user that may not read the key sees TIME as it is.
local function redis_clock()
  local clock = redis.call('TIME')
  local ahead = TEST_CLOCK_KEY and redis.pcall('GET', TEST_CLOCK_KEY)
  if type(ahead) == 'string' then
    local us = tonumber(clock[1]) * 1000000 + tonumber(clock[2]) + (tonumber(ahead) or 0) * 1000
    clock = {string.format('%d', math.floor(us / 1000000)), string.format('%d', us % 1000000)}
  end
  return clock
end

-- A `redis_clock` reading (a fresh one when nil) in epoch ms.
local function clock_ms(clock)
  clock = clock or redis_clock()
  return clock[1] * 1000 + math.floor(clock[2] / 1000)
end

-- Epoch milliseconds as digits (tostring would write a large number in e-notation; '%d'
-- is exact for every whole number below 2^53 on a 64-bit Redis, and cheaper than '%.0f').
local function ms_text(ms)
  return string.format('%d', ms)
end

-- Commands take many fields or values at once: BATCH per call (Lua's unpack has a limit;
-- even, so that a batch of field-value or score-member pairs never splits a pair).
local BATCH = 500

-- `command key values...` for every value, BATCH at a time (none when `values` is empty).
local function flush(command, key, values)
  for first = 1, #values, BATCH do
    redis.call(command, key, unpack(values, first, math.min(first + BATCH - 1, #values)))
  end
end
