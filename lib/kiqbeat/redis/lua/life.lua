--[[
A schedule's life state (issue 20, tests/support/life.py `fates`), the one place that reads and
writes it: one small hash per concept, one field per schedule, removed with the schedule
(write.lua's forget, `life_forget`):

  runs hash   name -> ticks pushed over its life (invocations and backfills; manual runs
              do not count), kept only for a schedule with `max_runs`; changing `max_runs`
              keeps it.
  skips hash  name -> ticks still to skip (`kiqbeat schedules skip NAME --count N`); the
              field goes when the last is used.
  last hash   name -> the JSON of the last job pushed for an `overlap: skip` or
              `buffer_one` schedule, to find it again, byte for byte, in its queue or the
              `schedule` set.
  held hash   name -> the tick an `overlap: buffer_one` schedule holds until its previous
              job ends (push.lua), at most one: "TICK RELEASE N\n" (epoch ms; RELEASE 0:
              into a queue) then the N bytes of its queue's name, then the job's JSON.

`life` = {runs = key, skips = key, last = key, held = key or nil (backfill.lua has none)}.
Put before push.lua, backfill.lua and write.lua (scripts.py).
]]

-- The life keys' grants (nil: all fine).
local function life_allowed(life)
  return expect_allowed('HGET', life.runs, 'n') or expect_allowed('HINCRBY', life.runs, 'n', '1')
    or expect_allowed('HGET', life.skips, 'n') or expect_allowed('HLEN', life.skips)
    or expect_allowed('HINCRBY', life.skips, 'n', '1') or expect_allowed('HDEL', life.skips, 'n')
    or expect_allowed('HGET', life.last, 'n') or expect_allowed('HSET', life.last, 'n', 'v')
    or expect_allowed('HDEL', life.runs, 'n') or expect_allowed('HDEL', life.last, 'n')
    or (life.held and (expect_allowed('HLEN', life.held)
      or expect_allowed('HGET', life.held, 'n') or expect_allowed('HSET', life.held, 'n', 'v')
      or expect_allowed('HDEL', life.held, 'n')))
    or nil
end

-- The life keys' types (nil: all fine).
local function life_types(life)
  return expect_type(life.runs, 'hash') or expect_type(life.skips, 'hash')
    or expect_type(life.last, 'hash') or (life.held and expect_type(life.held, 'hash')) or nil
end

-- `text` quoted for a reason a person reads: bytes outside printable ASCII as \xHH, so
-- that a reason is always text (never bytes that are not UTF-8) and forges no line.
local function life_shown(text)
  return "'" .. string.gsub(text, "[^%w%p ]", function(c)
    return string.format('\\x%02x', string.byte(c))
  end) .. "'"
end

-- A stored value as a reason names it (`life_shown`): its first 40 bytes and its size when
-- longer.
local function life_value(raw)
  if #raw <= 40 then return life_shown(raw) end
  return life_shown(string.sub(raw, 1, 40)) .. '... (' .. #raw .. ' bytes)'
end

-- A life counter of the schedule as kiqbeat writes it (HINCRBY: a whole number): its value,
-- 0 when there is none; nil and why, naming the key and the value, for anything else (issue
-- 26: "1e308" or "abc" written by hand). A script never counts on such a value, nor calls
-- HINCRBY on it (which would fail the call for every schedule in it): the schedule is set
-- aside with that reason instead.
local function life_count(key, name, what)
  local raw = redis.call('HGET', key, name)
  if not raw then return 0 end
  if #raw <= 16 and string.find(raw, '^%-?%d+$') then return tonumber(raw) end
  return nil, key .. ' holds ' .. life_value(raw) .. ' for it, not a whole number of ' .. what ..
    ' (HDEL that field or set it right, then ZADD kiqbeat:due 0 NAME or write the definition again)'
end

-- The ticks the schedule pushed over its life (0: none counted); nil and why when the
-- stored count is not a whole number.
local function runs_of(life, name)
  return life_count(life.runs, name, 'ticks pushed')
end

local function add_runs(life, name, n)
  if n > 0 then redis.call('HINCRBY', life.runs, name, n) end
end

-- True when some schedule has skips pending (one HLEN a call, so the others pay nothing).
local function any_skips(life)
  return redis.call('HLEN', life.skips) > 0
end

-- Ticks still to skip (0: none); nil and why when the stored count is not a whole number.
local function skips_of(life, name)
  local n, why = life_count(life.skips, name, 'ticks to skip')
  if n == nil then return nil, why end
  return math.max(0, n)
end

-- Take `n` of the schedule's pending skips; the field goes with the last one.
local function use_skips(life, name, n)
  if n <= 0 then return end
  if redis.call('HINCRBY', life.skips, name, -n) <= 0 then
    redis.call('HDEL', life.skips, name)
  end
end

-- True when the schedule's previous job still waits or runs: its running marker
-- (`running_key`, set by the worker middleware) exists, or the last job pushed is still in
-- the `schedule` set or among the first MAX_OVERLAP_SCAN jobs of `queue_key` from the head
-- (LPUSH puts the newest there: it is found while fewer than that many jobs were pushed
-- after it and still wait).
local function job_waiting(life, name, sched_key, queue_key, running_key)
  if redis.call('EXISTS', running_key) == 1 then return true end
  local last = redis.call('HGET', life.last, name)
  if not last then return false end
  if redis.call('ZSCORE', sched_key, last) then return true end
  return redis.call('LPOS', queue_key, last, 'MAXLEN', MAX_OVERLAP_SCAN) ~= false
end

local function remember_job(life, name, json)
  redis.call('HSET', life.last, name, json)
end

-- True when some schedule holds a tick (one HLEN a call, so that a store where none does
-- pays nothing more).
local function any_held(life)
  return redis.call('HLEN', life.held) > 0
end

-- True when `name` can be a queue's name, as a definition's `queue` is one: UTF-8 text
-- without spaces or control characters (a held record written by hand must not push into,
-- nor name in the queues set, a queue no definition could).
local function queue_name_ok(name)
  if #name == 0 or #name > 1000 or string.find(name, '[%c%s]') then return false end
  local i, n = 1, #name
  while i <= n do
    local c = string.byte(name, i)
    local len = (c < 0x80 and 1) or (c >= 0xC2 and c <= 0xDF and 2)
      or (c >= 0xE0 and c <= 0xEF and 3) or (c >= 0xF0 and c <= 0xF4 and 4) or 0
    if len == 0 or i + len - 1 > n then return false end
    for k = i + 1, i + len - 1 do
      local b = string.byte(name, k)
      if b < 0x80 or b > 0xBF then return false end
    end
    i = i + len
  end
  return true
end

-- The tick the schedule holds, as {tick, release, queue, json} (nil: none); nil and why,
-- naming the key and the value, for a value that is not one (written by hand): the script
-- never pushes it, and sets the schedule aside with that reason instead.
local function held_of(life, name)
  local raw = redis.call('HGET', life.held, name)
  if not raw then return nil end
  local tick, release, n, at = string.match(raw, '^(%d+) (%d+) (%d+)\n()')
  if tick and #tick <= 15 and #release <= 15 and #n <= 5 then
    n = tonumber(n)
    local queue, json = string.sub(raw, at, at + n - 1), string.sub(raw, at + n)
    if #queue == n and queue_name_ok(queue) and #json > 0 and tonumber(tick) <= ENDED_MS
        and tonumber(release) <= ENDED_MS then
      return {tick = tonumber(tick), release = tonumber(release), queue = queue, json = json}
    end
  end
  return nil, life.held .. ' holds ' .. life_value(raw) .. ' for it, not a held tick (HDEL that ' ..
    'field, then ZADD kiqbeat:due 0 NAME or write the definition again)'
end

-- Hold a tick: its job, to push once the previous job has ended.
local function hold_job(life, name, tick, release, queue, json)
  redis.call('HSET', life.held, name, string.format('%d %d %d\n', tick, release, #queue) ..
    queue .. json)
end

local function drop_held(life, name)
  redis.call('HDEL', life.held, name)
end

-- Removal: nothing of the name's life stays.
local function life_forget(life, name)
  redis.call('HDEL', life.runs, name)
  redis.call('HDEL', life.skips, name)
  redis.call('HDEL', life.last, name)
  if life.held then redis.call('HDEL', life.held, name) end
end
