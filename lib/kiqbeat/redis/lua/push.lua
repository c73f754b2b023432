--[[
kiqbeat push script: push due ticks as Sidekiq jobs and advance their watermarks, atomically.

KEYS[1]  the old layout's watermarks hash: its prefix names the state buckets (progress.lua)
KEYS[2]  the old layout's first-seen hash (read and emptied as names are written)
KEYS[3]  queues set (queue names, for Sidekiq's API and web UI)
KEYS[4]  schedule sorted set (score = epoch seconds) for lookahead jobs
KEYS[5]  due index (sorted set: name -> epoch ms the schedule next needs planning)
KEYS[6]  definitions hash (name -> definition JSON)
KEYS[7]  rejected hash (name -> why a definition was set aside)
KEYS[8]  missed hash (name -> recorded missed ranges, "AFTER THROUGH REASON" lines)
KEYS[9]  the old layout's history hash (progress.lua reads the buckets first)
KEYS[10..9+Q]  queue lists, one per distinct queue in this call

ARGV[1]  now, epoch ms (recorded as first-seen for new schedules)
ARGV[2]  H, how many pushes each schedule's history keeps (0: none)
ARGV[3]  Q, number of queue lists
ARGV[4..3+Q]  queue names, aligned with KEYS[10..]
ARGV[4+Q]  the groups, one per schedule, packed in one string (one argument instead of
  thousands: packing arguments one by one is what a client spends its time on):
  "NAME\n" (names hold no control characters);
  "MARK MISSED SKIPPED N TARGET NEW NEXT SHA R\n": the watermark to set (epoch ms), ticks
    beyond the window (counted), ticks passed over by policy (counted), the number of jobs,
    the queue they go to (k >= 1: queue k), 1 if the schedule had no watermark when
    planned, the index entry that goes with MARK (epoch ms the schedule next needs
    planning), the SHA1 of the definition it was planned from, and the number of missed
    ranges to record;
  R times "AFTER THROUGH REASON COUNT\n": ticks in (AFTER, THROUGH] passed over, why
    ("window" or "policy"), and how many (core/plan.py);
  N times "TICK LENGTH\n" and LENGTH bytes of job JSON; TICK is epoch ms, negative for a
    job into the schedule set (scored by its instant).

A group whose definition has changed or gone since it was read is left alone entirely (its
index entry says "plan me" again, or it was removed): the next invocation plans it afresh.
A definition is compared (SHA1) only after its length is asked: one swapped meanwhile for
one over MAX_DEFINITION_BYTES has changed, and is not read.
Whenever a group's mark is applied, or equals the stored one (a re-plan that found nothing
to push), its index entry is set to NEXT in the same step (and a set-aside reason left from
an earlier definition is cleared: this one was read and planned); a stored mark beyond the group's
was set by a copy that planned further, and that copy set the index.

Every job whose tick is above the stored watermark and the schedule's first-seen is pushed;
at or below the watermark, it was pushed before (or deliberately passed over), and at or
below first-seen (a watermark set back by hand) it was never owed: either way it is counted
as already pushed. Each pushed
job goes into its schedule's history ("t TICK DELAY", DELAY = the Redis clock - TICK: see
records.lua), which keeps the newest H.

The missed ranges of a group whose mark is applied are recorded with it, clipped to above
the stored watermark (what lies at or below it another copy dealt with, and recorded): a
recorded tick is therefore never pushed by an invocation, and recorded once. They are
clipped to above the schedule's first-seen too (no pre-history): a watermark set back by
hand (to 0, say) must not record decades as owed. A range that
starts where the schedule's last one ends, for the same reason, extends it; at most 100
ranges are kept, the oldest "policy" ones dropped first (records.lua).

A schedule without a watermark is new. A group planned as new (NEW 1) registers it: first-seen
= ARGV[1], the mark, and its jobs, which are the ticks in (now, now + lookahead] going to the
schedule set; only jobs whose tick is above now are pushed, so nothing from before
first-seen ever is (no pre-history). A group planned as new that finds a watermark lost a
race to another copy and is left alone entirely, jobs included: moving the mark from the
other copy's `now` to its own could jump over a tick between the two, and its ticks between
the two `now`s would predate the other copy's first-seen. (The planner never splits a new
group across calls, so a watermark found here is never one this invocation wrote.) A group
planned with a watermark that has since gone (the schedule was removed meanwhile, and
perhaps added again) is left alone too: its index entry says "plan me" if it is back.

All checks run before the first write: Redis does not roll a script back, and it refuses a
script for lack of memory only at its first write, so once the first write is done the rest
complete.

Returns {pushed, already, missed, skipped, new, stale, recorded, flags}: stale counts the
groups left alone for a changed definition, recorded the ticks recorded as missed, and flags holds one character per job in argument order:
"1" pushed, "0" not pushed (already pushed, or left alone).
]]

local wm_key, seen_key, queues_key, sched_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local due_key, defs_key, rejected_key = KEYS[5], KEYS[6], KEYS[7]
local missed_key, history_key = KEYS[8], KEYS[9]
local FIRST_QUEUE = 9
local now_ms = ARGV[1]
local keep = tonumber(ARGV[2])
local nq = tonumber(ARGV[3])


-- Pass 1: read and check everything, write nothing.
local err = expect_allowed('TYPE', wm_key) or expect_allowed('HGET', wm_key, 'f')
if err then return err end
err = expect_type(wm_key, 'hash') or expect_type(seen_key, 'hash')
  or expect_type(queues_key, 'set') or expect_type(sched_key, 'zset')
  or expect_type(due_key, 'zset') or expect_type(defs_key, 'hash')
  or expect_type(rejected_key, 'hash') or expect_type(missed_key, 'hash')
  or expect_type(history_key, 'hash')
if err then return err end
for k = 1, nq do
  err = expect_type(KEYS[FIRST_QUEUE + k], 'list')
  if err then return err end
end

err = expect_allowed('HSET', wm_key, 'f', '0') or expect_allowed('HSETNX', seen_key, 'f', '0')
  or expect_allowed('SADD', queues_key, 'q') or expect_allowed('ZADD', due_key, '0', 'n')
  or expect_allowed('HMGET', defs_key, 'f') or expect_allowed('HSTRLEN', defs_key, 'f')
  or expect_allowed('HDEL', rejected_key, 'f')
  or expect_allowed('HGET', missed_key, 'f') or expect_allowed('HSET', missed_key, 'f', 'r')
  or expect_allowed('HGET', seen_key, 'f')
  or expect_allowed('HMGET', history_key, 'f') or expect_allowed('HSET', history_key, 'f', 'h')
use_state(wm_key, 'kiqbeat:watermarks')
err = err or state_allowed()
if err then return err end
for k = 1, nq do
  err = expect_allowed('LPUSH', KEYS[FIRST_QUEUE + k], 'job')
  if err then return err end
end
local zadd_checked = false

local body = ARGV[4 + nq]
local function line(from)
  local stop = string.find(body, '\n', from, true)
  return string.sub(body, from, stop - 1), stop + 1
end

local groups = {}
local pos = 1
while pos <= #body do
  local name, header
  name, pos = line(pos)
  header, pos = line(pos)
  local mark, missed, skipped, n, target, new, next_due, sha, r =
    string.match(header, '^(%d+) (%d+) (%d+) (%d+) (%d+) ([01]) (%d+) (%x+) (%d+)$')
  local g = {name = name, mark = tonumber(mark), mark_text = mark, missed = tonumber(missed),
             skipped = tonumber(skipped), n = tonumber(n), target = tonumber(target),
             new = new == '1', next_due = next_due, sha = sha, ticks = {}, starts = {},
             lengths = {}, ranges = {}}
  for j = 1, tonumber(r) do
    local range
    range, pos = line(pos)
    local after, through, reason, count = string.match(range, '^(%d+) (%d+) (%l+) (%d+)$')
    g.ranges[j] = {tonumber(after), tonumber(through), reason, tonumber(count)}
  end
  for j = 1, g.n do
    local head
    head, pos = line(pos)
    local tick, length = string.match(head, '^(-?%d+) (%d+)$')
    g.ticks[j], g.starts[j], g.lengths[j] = tonumber(tick), pos, tonumber(length)
    pos = pos + g.lengths[j]
  end
  groups[#groups + 1] = g
  if not zadd_checked and g.n > 0 and g.ticks[g.n] < 0 then
    err = expect_allowed('ZADD', sched_key, '0', 'job')
    if err then return err end
    zadd_checked = true
  end
end

-- Commands take many fields or values at once: BATCH per call (Lua's unpack has a limit).
local BATCH = 500
for first = 1, #groups, BATCH do
  local last = math.min(first + BATCH - 1, #groups)
  local names = {}
  for k = first, last do names[#names + 1] = groups[k].name end
  -- A definition swapped meanwhile for one over the limit is not read: it has changed.
  local defs = read_definitions(defs_key, names, math.huge)
  for k = first, last do
    local g, def = groups[k], defs[k - first + 1]
    g.stale = not def or redis.sha1hex(def) ~= g.sha
    g.cur, g.seen, err = read_mark(g.name)
    if not err and keep > 0 then g.history, err = read_history(g.name) end
    if err then return err end
  end
end

local function flush(command, key, values)
  for first = 1, #values, BATCH do
    redis.call(command, key, unpack(values, first, math.min(first + BATCH - 1, #values)))
  end
end

-- Pass 2: write.
local pushed, already, missed, skipped, new, stale, recorded = 0, 0, 0, 0, 0, 0, 0
local when = clock_ms()
local flags = {}
local histories = {} -- name, history, name, history...
local lists = {}     -- queue k -> jobs, in push order
local scheduled = {} -- score, job, score, job...
local index = {}     -- next due, name, next due, name...
local planned = {}   -- names whose index entry is set

-- Queue every job of g whose tick is above floor (epoch ms); count the others as already.
local function push_above(g, floor)
  local done = {}
  for j = 1, g.n do
    local tick = g.ticks[j]
    if math.abs(tick) > floor then
      local job = string.sub(body, g.starts[j], g.starts[j] + g.lengths[j] - 1)
      if tick < 0 then
        scheduled[#scheduled + 1] = string.format('%.3f', -tick / 1000)
        scheduled[#scheduled + 1] = job
      else
        local list = lists[g.target]
        if not list then
          list = {}
          lists[g.target] = list
        end
        list[#list + 1] = job
      end
      pushed = pushed + 1
      flags[#flags + 1] = '1'
      done[#done + 1] = pushed_line('t', math.abs(tick), when)
    else
      already = already + 1
      flags[#flags + 1] = '0'
    end
  end
  if keep > 0 and #done > 0 then
    histories[#histories + 1], histories[#histories + 2] = g.name,
      remembered(g.history, done, keep)
  end
end

-- Record g's missed ranges above `floor` (the stored mark and first-seen), extending the
-- last one where they meet.
local function record(g, floor)
  local ranges = {}
  for _, range in ipairs(g.ranges) do
    local after, through = math.max(range[1], floor), range[2]
    if after < through then
      ranges[#ranges + 1] = {after, through, range[3]}
      -- Clipped by another copy's mark: its share of the count, as near as instants tell.
      recorded = recorded + math.floor(range[4] * (through - after) / (through - range[1]) + 0.5)
    end
  end
  if #ranges > 0 then add_ranges(missed_key, g.name, ranges) end
end

local function reindex(g)
  index[#index + 1], index[#index + 2] = g.next_due, g.name
  planned[#planned + 1] = g.name
end

for _, g in ipairs(groups) do
  if g.stale then
    stale = stale + 1
    for _ = 1, g.n do flags[#flags + 1] = '0' end
  elseif (g.new and g.cur) or (not g.new and not g.cur) then
    -- New, but another copy registered it first; or planned with a watermark that has gone
    -- since (removed, maybe added again: its index entry says "plan me"): left alone.
    for _ = 1, g.n do flags[#flags + 1] = '0' end
  elseif not g.cur then
    new = new + 1
    write_mark(g.name, g.mark, tonumber(now_ms))
    reindex(g)
    push_above(g, tonumber(now_ms))
  else
    -- No pre-history: a watermark set back below first-seen (by hand, to 0 say) must not
    -- push or record the window's ticks from before the schedule was first seen. First-seen
    -- is read once, and only when there is a tick to push or a range to record.
    local floor = g.cur
    if g.n > 0 or (g.mark > g.cur and #g.ranges > 0) then
      floor = math.max(floor, g.seen)
    end
    push_above(g, floor)
    if g.mark > g.cur then
      write_mark(g.name, g.mark, g.seen)
      missed = missed + g.missed
      skipped = skipped + g.skipped
      if #g.ranges > 0 then record(g, floor) end
      reindex(g)
    elseif g.mark == g.cur then
      reindex(g)
    end
  end
end
for k, list in pairs(lists) do
  flush('LPUSH', KEYS[FIRST_QUEUE + k], list)
  redis.call('SADD', queues_key, ARGV[3 + k])
end
flush('ZADD', sched_key, scheduled)
flush('ZADD', due_key, index)
flush('HDEL', rejected_key, planned)
write_histories(histories)
return {pushed, already, missed, skipped, new, stale, recorded, table.concat(flags)}
