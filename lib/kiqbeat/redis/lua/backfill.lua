--[[
kiqbeat backfill script: push recorded missed ticks and remove them from the record, atomically.

KEYS[1]  missed hash (name -> recorded missed ranges, "AFTER THROUGH REASON" lines)
KEYS[2]  definitions hash (name -> definition JSON)
KEYS[3]  history hash (name -> last pushes, newest first)
KEYS[4]  queues set
KEYS[5..4+Q]  queue lists, one per distinct queue in this call

ARGV[1]  H, how many pushes each schedule's history keeps (0: none); never fewer than it holds
ARGV[2]  Q, number of queue lists
ARGV[3..2+Q]  queue names, aligned with KEYS[5..]
ARGV[3+Q]  the groups, one per schedule, packed in one string:
  "NAME\n";
  "AFTER THROUGH N TARGET SHA\n": the part of the record this call settles, (AFTER,
    THROUGH] in epoch ms, the number of jobs, the queue they go to (k: queue k), and the
    SHA1 of the definition the jobs were built from;
  N times "TICK LENGTH\n" and LENGTH bytes of job JSON, TICK in (AFTER, THROUGH], ascending.

A job is pushed only if its tick is still recorded: another backfill that pushed it first
removed it, so racing or repeated backfills push each recorded tick once. Then (AFTER,
THROUGH] is removed from the schedule's record (every tick of it was pushed now or before,
or, for --latest-only, deliberately left out), and each pushed job goes into the history
as "b TICK DELAY". A group whose definition changed or went since it was read is left alone
(one swapped for a definition over MAX_DEFINITION_BYTES has changed, and is not read).

All checks run before the first write.

Returns {pushed, already, stale, flags}: stale counts the jobs left alone for a changed
definition; flags holds one character per job in argument order, "1" pushed, "0" not.
]]

local missed_key, defs_key, history_key, queues_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local FIRST_QUEUE = 4
local keep = tonumber(ARGV[1])
local nq = tonumber(ARGV[2])

local err = expect_type(missed_key, 'hash') or expect_type(defs_key, 'hash')
  or expect_type(history_key, 'hash') or expect_type(queues_key, 'set')
  or expect_allowed('HMGET', missed_key, 'f') or expect_allowed('HSET', missed_key, 'f', 'r')
  or expect_allowed('HDEL', missed_key, 'f') or expect_allowed('HMGET', defs_key, 'f')
  or expect_allowed('HSTRLEN', defs_key, 'f')
  or expect_allowed('HMGET', history_key, 'f') or expect_allowed('HSET', history_key, 'f', 'h')
  or expect_allowed('SADD', queues_key, 'q')
use_state(history_key, 'kiqbeat:history')
err = err or state_allowed()
if err then return err end
for k = 1, nq do
  err = expect_type(KEYS[FIRST_QUEUE + k], 'list')
    or expect_allowed('LPUSH', KEYS[FIRST_QUEUE + k], 'job')
  if err then return err end
end

local body = ARGV[3 + nq]
local function line(from)
  local stop = string.find(body, '\n', from, true)
  return string.sub(body, from, stop - 1), stop + 1
end

local groups, names, seen = {}, {}, {}
local pos = 1
while pos <= #body do
  local name, header
  name, pos = line(pos)
  header, pos = line(pos)
  local after, through, n, target, sha =
    string.match(header, '^(%d+) (%d+) (%d+) (%d+) (%x+)$')
  local g = {name = name, after = tonumber(after), through = tonumber(through),
             n = tonumber(n), target = tonumber(target), sha = sha, ticks = {}, jobs = {}}
  for j = 1, g.n do
    local head
    head, pos = line(pos)
    local tick, length = string.match(head, '^(%d+) (%d+)$')
    g.ticks[j] = tonumber(tick)
    g.jobs[j] = string.sub(body, pos, pos + tonumber(length) - 1)
    pos = pos + tonumber(length)
  end
  groups[#groups + 1] = g
  if not seen[name] then
    seen[name] = true
    names[#names + 1] = name
  end
end
if #groups == 0 then return {0, 0, 0, ''} end

-- Each schedule's record and history, read once and kept current across its groups (a
-- call may carry several parts of one schedule), then written once.
local recorded = redis.call('HMGET', missed_key, unpack(names))
-- A definition swapped meanwhile for one over the limit is not read: it has changed.
local defs = read_definitions(defs_key, names, math.huge)
local state = {}
for k, name in ipairs(names) do
  local s = {def = defs[k], done = {}}
  if keep > 0 then
    s.history, err = read_history(name)
    if err then return err end
  end
  if recorded[k] then s.ranges = read_ranges(recorded[k]) end
  state[name] = s
end

local when = clock_ms()
local pushed, already, stale = 0, 0, 0
local flags, lists = {}, {}
for _, g in ipairs(groups) do
  local s = state[g.name]
  if not s.def or redis.sha1hex(s.def) ~= g.sha or not s.ranges then
    if s.ranges then stale = stale + g.n else already = already + g.n end
    for _ = 1, g.n do flags[#flags + 1] = '0' end
  else
    for j = 1, g.n do
      local tick, held = g.ticks[j], false
      for _, range in ipairs(s.ranges) do
        if range[1] and range[1] < tick and tick <= range[2] then held = true break end
      end
      if held then
        local list = lists[g.target] or {}
        lists[g.target] = list
        list[#list + 1] = g.jobs[j]
        pushed = pushed + 1
        flags[#flags + 1] = '1'
        s.done[#s.done + 1] = pushed_line('b', tick, when)
      else
        already = already + 1
        flags[#flags + 1] = '0'
      end
    end
    -- What is left of each range once (AFTER, THROUGH] is taken out.
    local left = {}
    for _, range in ipairs(s.ranges) do
      local a, t, r = range[1], range[2], range[3]
      if not a or t <= g.after or a >= g.through then
        left[#left + 1] = range
      else
        if a < g.after then left[#left + 1] = {a, g.after, r} end
        if g.through < t then left[#left + 1] = {g.through, t, r} end
      end
    end
    s.ranges, s.changed = left, true
  end
end
local histories = {}
for _, name in ipairs(names) do
  local s = state[name]
  if s.changed then write_ranges(missed_key, name, s.ranges) end
  if keep > 0 and #s.done > 0 then
    histories[#histories + 1], histories[#histories + 2] = name,
      remembered(s.history, s.done, keep, true)
  end
end
for k, list in pairs(lists) do
  for first = 1, #list, 500 do
    redis.call('LPUSH', KEYS[FIRST_QUEUE + k], unpack(list, first, math.min(first + 499, #list)))
  end
  redis.call('SADD', queues_key, ARGV[2 + k])
end
write_histories(histories)
return {pushed, already, stale, table.concat(flags)}
