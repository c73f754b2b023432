--[[
kiqbeat push script: push due ticks as Sidekiq jobs and advance their watermarks, atomically.

KEYS[1]  watermarks hash (schedule name -> covered-through epoch ms)
KEYS[2]  first-seen hash (schedule name -> epoch ms)
KEYS[3]  queues set (queue names, for Sidekiq's API and web UI)
KEYS[4]  schedule sorted set (score = epoch seconds) for lookahead jobs
KEYS[5..4+Q]  queue lists, one per distinct queue in this call

ARGV[1]  now, epoch ms (recorded as first-seen for new schedules)
ARGV[2]  Q, number of queue lists
ARGV[3..2+Q]  queue names, aligned with KEYS[5..]
then groups, one per schedule, each:
  name, mark (epoch ms: the watermark to set), missed (count of ticks beyond the window),
  skipped (count of ticks passed over by policy), n (number of jobs), then n times:
  tick (epoch ms), target (0 = schedule set, k >= 1 = queue k), payload (JSON)

Every job whose tick is above the stored watermark is pushed; at or below it, it was
pushed before (or deliberately passed over) and is counted as already pushed. A schedule
without a watermark is new: it gets first-seen and the mark, and none of its jobs (no
backfill). All checks run before the first write, because Redis does not roll a script
back: an error after a write would leave the step half-done.

Returns {pushed, already, missed, skipped, new, flags} where flags holds one character
per job in argument order: "1" pushed, "0" already pushed.
]]

local wm_key, seen_key, queues_key, sched_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now_ms = ARGV[1]
local nq = tonumber(ARGV[2])

local function expect_type(key, allowed)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= allowed then
    return redis.error_reply('KIQBEAT_WRONGTYPE key ' .. key .. ' holds a ' .. t .. ', expected a ' .. allowed)
  end
  return nil
end

-- Pass 1: read and check everything, write nothing.
local err = expect_type(wm_key, 'hash') or expect_type(seen_key, 'hash')
  or expect_type(queues_key, 'set') or expect_type(sched_key, 'zset')
if err then return err end
for k = 1, nq do
  err = expect_type(KEYS[4 + k], 'list')
  if err then return err end
end

local groups = {}
local i = 3 + nq
while i <= #ARGV do
  local g = {name = ARGV[i], mark = tonumber(ARGV[i + 1]), mark_text = ARGV[i + 1],
             missed = tonumber(ARGV[i + 2]), skipped = tonumber(ARGV[i + 3]), n = tonumber(ARGV[i + 4]), first = i + 5}
  local raw = redis.call('HGET', wm_key, g.name)
  if raw then
    g.cur = tonumber(raw)
    if not g.cur then
      return redis.error_reply('KIQBEAT_GARBLED watermark of schedule ' .. g.name .. ' in ' .. wm_key ..
        ' is not a number: ' .. string.sub(raw, 1, 40))
    end
  end
  groups[#groups + 1] = g
  i = g.first + 3 * g.n
end

-- Pass 2: write.
local pushed, already, missed, skipped, new = 0, 0, 0, 0, 0
local flags = {}
local used = {}
for _, g in ipairs(groups) do
  if not g.cur then
    new = new + 1
    redis.call('HSET', wm_key, g.name, g.mark_text)
    redis.call('HSETNX', seen_key, g.name, now_ms)
    for _ = 1, g.n do flags[#flags + 1] = '0' end
  else
    for j = 0, g.n - 1 do
      local at = g.first + 3 * j
      local tick = tonumber(ARGV[at])
      if tick > g.cur then
        local target = tonumber(ARGV[at + 1])
        if target == 0 then
          redis.call('ZADD', sched_key, string.format('%.3f', tick / 1000), ARGV[at + 2])
        else
          redis.call('LPUSH', KEYS[4 + target], ARGV[at + 2])
          used[target] = true
        end
        pushed = pushed + 1
        flags[#flags + 1] = '1'
      else
        already = already + 1
        flags[#flags + 1] = '0'
      end
    end
    if g.mark > g.cur then
      redis.call('HSET', wm_key, g.name, g.mark_text)
      missed = missed + g.missed
      skipped = skipped + g.skipped
    end
  end
end
for k in pairs(used) do
  redis.call('SADD', queues_key, ARGV[2 + k])
end
return {pushed, already, missed, skipped, new, table.concat(flags)}
