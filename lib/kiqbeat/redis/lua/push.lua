--[[
kiqbeat push script: push due ticks as Sidekiq jobs and advance their watermarks, atomically.

KEYS[1]  progress bucket 0 (kiqbeat:progress:0): its prefix names every bucket, each
  schedule's derived from its name by progress.lua's `state_key_of` (the one derivation;
  keys.progress_bucket in Python)
KEYS[2]  queues set (queue names, for Sidekiq's API and web UI)
KEYS[3]  schedule sorted set (score = epoch seconds) for lookahead jobs
KEYS[4]  due index (sorted set: name -> epoch ms the schedule next needs planning)
KEYS[5]  definitions hash (name -> definition JSON)
KEYS[6]  rejected hash (name -> why a definition was set aside)
KEYS[7]  missed hash (name -> recorded missed ranges, "AFTER THROUGH REASON" lines)
KEYS[8], KEYS[9], KEYS[10], KEYS[11]  the life hashes: runs, skips, last job, held tick
  (life.lua)
KEYS[12..11+Q]  queue lists, one per distinct queue in this call
Derived, not declared: the running markers (ARGV[5+Q] .. name) and a held job's queue
(the queue lists' prefix .. its queue's name).

ARGV[1]  now, epoch ms (recorded as first-seen for new schedules)
ARGV[2]  H, how many pushes each schedule's history keeps (0: none)
ARGV[3]  Q, number of queue lists
ARGV[4..3+Q]  queue names, aligned with KEYS[12..]
ARGV[4+Q]  the groups, one per schedule, in one packed argument (docs/store.md "Encodings":
  one argument instead of thousands, one struct.unpack a group and a job): first the number
  of fields a group holds (12), then per group, in this order (frames.lua GROUP_FORMAT):
  NAME (H length, bytes); SHA, the SHA1 of the definition it was planned from (c40; all
  "0": none); MARK, the watermark to set (epoch ms); NEXT, the index entry that goes with
  MARK (epoch ms the schedule next needs planning); STORED, the watermark it was planned
  from (epoch ms; -1: it had none, the schedule is new); MISSED, ticks beyond the window
  (counted); SKIPPED, ticks passed over by policy (counted); QUEUE (H), k: its jobs' queue
  is KEYS[11+k] named ARGV[3+k]; LIMIT, the schedule's max_runs (0: none); OVERLAP (B), 0
  `allow`, 1 `skip`, 2 `buffer_one` (core/plan.py OVERLAP_CODES);
  R (I4), then R missed ranges (RANGE_FORMAT), each AFTER THROUGH REASON (B length, bytes)
  COUNT: ticks in (AFTER, THROUGH] passed over, why ("window" or "policy"), and how many
  (core/plan.py);
  N (I4), then N job frames (frames.lua: TICK RELEASE JOB; RELEASE 0 into the queue, else
    into the schedule set released at that instant), ticks ascending.
  A field added per group goes after OVERLAP, before the two lists: read where the others
  are read below, and written in the same place by redis/frames.py, the count of fields
  going up by one on both sides.
ARGV[5+Q]  the running markers' key prefix (keys.running without the name)

A schedule's life (tests/support/life.py `fates`, the reference): each job whose tick is above
the floor below meets, in this order, the schedule's pending skips (life.lua), which take
the first ones (not pushed, not counted, in history as "s TICK DELAY"); with LIMIT, its
run count, which the pushes count up to LIMIT and no further (the rest are passed over);
with OVERLAP, whether its previous job still waits or runs (life.lua `job_waiting`): then
the tick is not pushed but recorded as missed with reason "overlap", and at most one job
of the group is pushed; with `buffer_one` (OVERLAP 2), the first such tick is held instead
(life.lua's held hash; not missed, counted as a run) unless the schedule holds one already.
The mark passes all of them. Before any of its jobs, a group whose schedule holds a tick
(whatever its OVERLAP now) looks at its previous job the same way: once it has ended, the
held job is pushed as it was built (into the queue it names, or the `schedule` set until
its RELEASE instant; history "t TICK DELAY"; counted in `pushed`, `released`) and the
record deleted, in this step. While a schedule still holds a tick after the step, its index
entry is at most ARGV[1] + HELD_RECHECK_MS (core/limits.py), so it is planned again that
soon. A schedule whose run count has reached LIMIT has ended: its index entry is ENDED_MS
(never due) instead of NEXT (or, while it holds a tick, that recheck). Skipped, limited and
overlapped ticks are counted in `skipped`; overlapped ones in `recorded` too.
A held record that is not one (written by hand) sets its schedule aside (below).

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
checks.lua `clock_ms`), which keeps the newest H.

The missed ranges of a group whose mark is applied are recorded with it, clipped to above
the stored watermark (what lies at or below it another copy dealt with, and recorded): a
recorded tick is therefore never pushed by an invocation, and recorded once. They are
clipped to above the schedule's first-seen too (no pre-history): a watermark set back by
hand (to 0, say) must not record decades as owed. A range that
starts where the schedule's last one ends, for the same reason, extends it; at most 100
ranges are kept, the oldest "policy" ones dropped first (records.lua).

A group planned from a watermark above the stored one is left alone entirely, jobs
included: its jobs start above STORED, so applying it would jump over the ticks between the
two, never to be pushed. The store then lost writes since the due read that planned it (a
failover to a replica that lacked them; a due read answered by the old master, the push by
the new one; a watermark set back by hand); its index entry, written with the stored
watermark, says when to plan it from there (DESIGN §2, docs/reliability.md).

A schedule without a watermark is new. A group planned as new (STORED -1) registers it:
first-seen = ARGV[1], the mark, and its jobs, which are the ticks in (now, now + lookahead]
going to the schedule set; only jobs whose tick is above now are pushed, so nothing from
before first-seen ever is (no pre-history). A group planned as new that finds a watermark
lost a race to another copy and is left alone entirely, jobs included: moving the mark from
the other copy's `now` to its own could jump over a tick between the two, and its ticks
between the two `now`s would predate the other copy's first-seen. (The planner never splits
a new group across calls, so a watermark found here is never one this invocation wrote.) A
group planned with a watermark that has since gone (the schedule was removed meanwhile, and
perhaps added again) is left alone too: its index entry says "plan me" if it is back.

All checks run before the first write: Redis does not roll a script back, and it refuses a
script for lack of memory only at its first write, so once the first write is done the rest
complete. The keys' types and grants are checked first, in every call (pass 1 below;
docs/store.md "Pre-flight").

A group whose life counter (runs, skips) is not a whole number, whose held record is not one
(or names a queue whose key is not a list, or that this Redis user may not LPUSH or LPOS),
or whose progress record is not one (written by hand) is set aside instead: its reason
goes into the rejected hash, its index entry goes, nothing of it is pushed.

Returns {pushed, already, missed, skipped, new, stale, recorded, flags, by_reason, applied,
aside, released}: stale counts the groups left alone for a changed definition or a
watermark below the one they were planned from, recorded
the ticks recorded as missed, and flags holds one character per job in argument order:
"1" pushed, "0" not pushed (already pushed, or left alone). by_reason splits what the
script itself passed over and recorded, "SKIP LIMIT OVERLAP RECORDED_WINDOW" (pending skips
taken, ticks past max_runs, ticks passed over for overlap, and of `recorded` those of
reason "window"), then "HOLDING" (the schedules of this call still holding a tick after it;
the held ticks pushed are in `pushed`, and listed in `released`); applied holds one
character per group: "1" when its mark was applied (its MISSED and SKIPPED are counted);
aside the groups set aside, as name, reason, name, reason...; released the held jobs pushed
(not in flags: no job of the arguments), as NAME TICK RELEASE QUEUE, NAME TICK...: RELEASE 0
when the job went into QUEUE, else the instant the `schedule` set releases it (epoch ms).
]]

local bucket_key, queues_key, sched_key = KEYS[1], KEYS[2], KEYS[3]
local due_key, defs_key, rejected_key, missed_key = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local life = {runs = KEYS[8], skips = KEYS[9], last = KEYS[10], held = KEYS[11]}
local FIRST_QUEUE = 11
local now_ms = ARGV[1]
local keep = tonumber(ARGV[2])
local nq = tonumber(ARGV[3])
local running_prefix = ARGV[5 + nq]
local GROUP_FIELDS = 12


-- Pass 1: read and check everything, write nothing. First every key's type, then every
-- command the call may run on it, asked of the ACL (Redis 7+; 6.2 cannot ask, and refuses
-- the command itself), in every call (a TYPE costs about 1 us, an ask about 0.4 us, a few
-- dozen a call), so a key retyped by hand or a grant revoked refuses the call whole
-- instead of failing it half-way.
use_state(bucket_key, 'kiqbeat:progress:0')
local err = expect_allowed('TYPE', queues_key)
  or expect_type(queues_key, 'set') or expect_type(sched_key, 'zset')
  or expect_type(due_key, 'zset') or expect_type(defs_key, 'hash')
  or expect_type(rejected_key, 'hash') or expect_type(missed_key, 'hash')
  or life_types(life)
if err then return err end
for k = 1, nq do
  err = expect_type(KEYS[FIRST_QUEUE + k], 'list')
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
  local queue_key = KEYS[FIRST_QUEUE + k]
  err = expect_allowed('LPUSH', queue_key, 'job') or expect_allowed('LPOS', queue_key, 'job')
  if err then return err end
end

-- The groups, field by field into flat arrays (group i's jobs are jobs first_job[i] ..
-- first_job[i] + n_jobs[i] - 1, its ranges likewise).
local body = ARGV[4 + nq]
local pos
pos, err = expect_format(body, 'push', GROUP_FIELDS)
if err then return err end
local names, shas, marks, nexts, storeds = {}, {}, {}, {}, {}
local misseds, skippeds, targets, first_job, n_jobs = {}, {}, {}, {}, {}
local limits, overlaps = {}, {}
local first_range, n_ranges = {}, {}
local r_after, r_through, r_reason, r_count = {}, {}, {}, {}
local jobs = job_frames()
local unpack_struct = struct.unpack
local ng = 0
while pos <= #body do
  ng = ng + 1
  local r
  names[ng], shas[ng], marks[ng], nexts[ng], storeds[ng], misseds[ng], skippeds[ng], targets[ng],
    limits[ng], overlaps[ng], r, pos = unpack_struct(GROUP_FORMAT, body, pos)
  first_range[ng], n_ranges[ng] = #r_after + 1, r
  for _ = 1, r do
    local j = #r_after + 1
    r_after[j], r_through[j], r_reason[j], r_count[j], pos = unpack_struct(RANGE_FORMAT, body,
      pos)
  end
  local n
  n, pos = unpack_struct('>I4', body, pos)
  first_job[ng], n_jobs[ng] = jobs.count + 1, n
  pos = jobs:read(body, pos, n)
end
for j = 1, jobs.count do  -- a job for the schedule set: may the user ZADD it?
  if jobs.releases[j] > 0 then
    err = expect_allowed('ZADD', sched_key, '0', 'job')
    if err then return err end
    break
  end
end
-- Whether any schedule holds a tick (nothing more is read about held ticks when none does).
local holding_any = any_held(life)
for i = 1, ng do
  if overlaps[i] > 0 or holding_any then
    err = expect_allowed('EXISTS', running_prefix .. names[i])
      or expect_allowed('ZSCORE', sched_key, 'job')
    if err then return err end
  end
end

-- The stored state each group is checked against, one record each (progress.lua):
-- watermark and first-seen (`curs`, `seens`, nil when none), history (in parts: `newests`,
-- `tails`), and whether its definition is the one it was planned from.
local curs, seens, newests, tails, stales = {}, {}, {}, {}, {}
local garbled_states = {}  -- group i's progress record is not one: why
for first = 1, ng, BATCH do
  local last = math.min(first + BATCH - 1, ng)
  -- A definition swapped meanwhile for one over the limit is not read: it has changed.
  local defs = read_definitions(defs_key, {unpack(names, first, last)}, math.huge)
  for k = first, last do
    local def = defs[k - first + 1]
    stales[k] = not def or redis.sha1hex(def) ~= shas[k]
    curs[k], seens[k], newests[k], tails[k], err = read_state_parts(names[k])
    if err then
      -- A record that is not one (written by hand since the due read) costs only its
      -- schedule: set aside below; any other error stops the call.
      garbled_states[k] = garbled_reason(err)
      if not garbled_states[k] then return err end
    end
  end
end

-- Set-aside reasons to clear (reindex): none to look for when the hash is empty, as it
-- mostly is.
local any_rejected = redis.call('HLEN', rejected_key) > 0

-- Each group's life counters (life.lua), read and checked before the first write: a group
-- whose stored count is not a whole number is set aside with the reason (`asides`), never
-- counted on, so one hand-written value costs only its schedule.
local skips_pending = any_skips(life)
local skips_v, runs_v, asides = {}, {}, {}
local helds = {}  -- group i's held tick (life.lua `held_of`), nil: none
-- The key of queue `name` (a held job's, which may be another than its group's).
local queue_prefix = nil
if nq > 0 then
  queue_prefix = string.sub(KEYS[FIRST_QUEUE + 1], 1, #KEYS[FIRST_QUEUE + 1] - #ARGV[4])
end
for i = 1, ng do
  local why
  if skips_pending then skips_v[i], why = skips_of(life, names[i]) else skips_v[i] = 0 end
  if why == nil and limits[i] > 0 then runs_v[i], why = runs_of(life, names[i]) end
  if why == nil and holding_any then
    helds[i], why = held_of(life, names[i])
    local held = helds[i]
    if held and held.queue ~= ARGV[3 + targets[i]] then
      -- Held for a queue the schedule no longer names: it goes there, as it was built.
      held.key = queue_prefix .. held.queue
      -- A queue this Redis user may not touch costs only this schedule (asked before TYPE,
      -- which the user may not run on it either: a refused call would end the script).
      local denied = expect_allowed('TYPE', held.key)
        or expect_allowed('LPUSH', held.key, 'job') or expect_allowed('LPOS', held.key, 'job')
      local kind = not denied and redis.call('TYPE', held.key)['ok']
      if denied then
        why = 'its held job names queue ' .. life_shown(held.queue) .. ': ' ..
          string.sub(denied.err, #'KIQBEAT_NOPERM ' + 1) .. ' (or HDEL ' .. life.held ..
          ' NAME, then ZADD kiqbeat:due 0 NAME)'
      elseif kind ~= 'list' and kind ~= 'none' then
        why = 'its held job names queue ' .. life_shown(held.queue) .. ', whose key ' ..
          life_shown(held.key) .. ' is a ' .. kind .. ', not a list (HDEL ' .. life.held ..
          ' NAME, then ZADD kiqbeat:due 0 NAME)'
      end
    end
  end
  runs_v[i] = runs_v[i] or 0
  why = why or garbled_states[i]
  if why then asides[i] = 'schedule ' .. life_shown(names[i]) .. ': ' .. why end
end

-- Pass 2: write.
local pushed, already, missed, skipped, new, stale, recorded = 0, 0, 0, 0, 0, 0, 0
local n_skip, n_limit, n_overlap, recorded_window = 0, 0, 0, 0
local n_holding = 0
local released = {}  -- the held jobs pushed: name, tick, release (0: queue), queue...
local holding = {}   -- group i's schedule holds a tick after this step
local applied = {}   -- group i: '1' when its mark was applied
local when = clock_ms()
local out = destinations(FIRST_QUEUE, 4, queues_key, sched_key)
local histories = {} -- group i's new history, its TAIL (nil: unchanged; NEWEST in `newests`)
local lines = {}     -- the history lines of the group at hand, oldest first
local index = {}     -- next due, name, next due, name...
local planned = {}   -- names whose index entry is set
local ended = {}     -- group i's schedule has reached its max_runs

-- Queue every job of group i whose tick is above floor (epoch ms) that its schedule's life
-- lets through (header); count the others as already pushed. Returns the ranges of ticks
-- passed over for overlap, to record after the group's own.
local function push_above(i, floor)
  local count = 0
  local ticks, releases = jobs.ticks, jobs.releases
  local k, name, limit = targets[i], names[i], limits[i]
  local skips, runs = skips_v[i], runs_v[i]
  local busy, overlap, buffer = nil, overlaps[i] > 0, overlaps[i] == 2
  local used, ran, last = 0, 0, nil
  local overlapped = {}
  local held, remembered = helds[i], nil
  if held then
    -- The previous job went where the held one was built to go (its queue then).
    local waiting = job_waiting(life, name, sched_key, held.key or KEYS[FIRST_QUEUE + k],
      running_prefix .. name)
    if overlap then busy = waiting end
    if not waiting then
      -- Its previous job has ended: the held job goes first, as it was built.
      if held.release > when then
        out:add(k, held.release, held.json)
      elseif held.key then
        redis.call('LPUSH', held.key, held.json)
        redis.call('SADD', queues_key, held.queue)
      else
        out:add(k, 0, held.json)
      end
      drop_held(life, name)
      pushed = pushed + 1
      local at = #released
      released[at + 1], released[at + 2] = name, held.tick
      released[at + 3] = held.release > when and held.release or 0
      released[at + 4] = held.queue
      count = count + 1
      if keep > 0 then lines[count] = pushed_line('t', held.tick, when) end
      remembered, held = held.json, nil
      busy = overlap
    end
  end
  -- An overlap range starts where the group's own ranges end (it comes after them).
  local prev = floor
  for r = first_range[i], first_range[i] + n_ranges[i] - 1 do
    prev = math.max(prev, r_through[r])
  end
  for j = first_job[i], first_job[i] + n_jobs[i] - 1 do
    local tick = ticks[j]
    if tick <= floor then
      already = already + 1
    else
      if skips > used then
        used = used + 1
        count = count + 1
        if keep > 0 then lines[count] = pushed_line('s', tick, when) end
        skipped, n_skip = skipped + 1, n_skip + 1
      elseif limit > 0 and runs + ran >= limit then
        skipped, n_limit = skipped + 1, n_limit + 1
      else
        if overlap and busy == nil then
          busy = job_waiting(life, name, sched_key, KEYS[FIRST_QUEUE + k],
            running_prefix .. name)
        end
        if busy and buffer and not held then
          -- The first tick due while the previous job waits or runs: held, not missed.
          held = {tick = tick}
          hold_job(life, name, tick, releases[j], ARGV[3 + k], jobs:json(body, j))
          ran = ran + 1
        elseif busy then
          local range = overlapped[#overlapped]
          if range and range[2] == prev then
            range[2] = tick
          else
            overlapped[#overlapped + 1] = {prev, tick, 'overlap'}
          end
          skipped, recorded, n_overlap = skipped + 1, recorded + 1, n_overlap + 1
        else
          out:add(k, releases[j], jobs:json(body, j))
          pushed, ran, last = pushed + 1, ran + 1, j
          busy = overlap
          jobs.pushed[j] = true
          count = count + 1
          if keep > 0 then lines[count] = pushed_line('t', tick, when) end
        end
      end
      prev = tick
    end
  end
  use_skips(life, name, used)
  if limit > 0 then
    add_runs(life, name, ran)
    ended[i] = runs + ran >= limit
  end
  if last then remembered = jobs:json(body, last) end
  if overlap and remembered then remember_job(life, name, remembered) end
  if held then
    holding[i] = true
    n_holding = n_holding + 1
  end
  if keep > 0 and count > 0 then
    newests[i], histories[i] = remembered_parts(newests[i], tails[i], lines, count, keep)
  end
  return overlapped
end

-- Record group i's missed ranges above `floor` (the stored mark and first-seen), extending
-- the last one where they meet.
local function record(i, floor)
  local ranges = {}
  for j = first_range[i], first_range[i] + n_ranges[i] - 1 do
    local after, through = math.max(r_after[j], floor), r_through[j]
    if after < through then
      ranges[#ranges + 1] = {after, through, r_reason[j]}
      -- Clipped by another copy's mark: its share of the count, as near as instants tell.
      local share = math.floor(r_count[j] * (through - after) / (through - r_after[j]) + 0.5)
      recorded = recorded + share
      if r_reason[j] == 'window' then recorded_window = recorded_window + share end
    end
  end
  if #ranges > 0 then add_ranges(missed_key, names[i], ranges) end
end

-- Group i's index entry: NEXT, or ENDED_MS once its schedule reached its max_runs (read
-- here when no job of the group was looked at).
local function reindex(i)
  if ended[i] == nil and limits[i] > 0 then
    ended[i] = runs_v[i] >= limits[i]
  end
  local next_ms = ended[i] and ENDED_MS or nexts[i]
  if holding[i] then next_ms = math.min(next_ms, tonumber(now_ms) + HELD_RECHECK_MS) end
  index[#index + 1], index[#index + 2] = ms_text(next_ms), names[i]
  planned[#planned + 1] = names[i]
end

local set_aside = {}  -- name, reason, name, reason...
for i = 1, ng do
  local cur = curs[i]
  applied[i] = '0'
  if stales[i] then
    stale = stale + 1
  elseif asides[i] then
    redis.call('HSET', rejected_key, names[i], asides[i])
    redis.call('ZREM', due_key, names[i])
    set_aside[#set_aside + 1], set_aside[#set_aside + 2] = names[i], asides[i]
  elseif cur and cur < storeds[i] then
    -- Planned from a watermark above the stored one (lost since the due read: header).
    stale = stale + 1
  elseif (storeds[i] < 0) == (cur ~= nil) then
    -- New, but another copy registered it first; or planned with a watermark that has gone
    -- since (removed, maybe added again: its index entry says "plan me"): left alone.
  elseif not cur then
    new = new + 1
    applied[i] = '1'
    local overlapped = push_above(i, tonumber(now_ms))
    write_state_parts(names[i], marks[i], tonumber(now_ms), newests[i],
      histories[i] or tails[i])
    if #overlapped > 0 then add_ranges(missed_key, names[i], overlapped) end
    reindex(i)
  else
    -- No pre-history: a watermark set back below first-seen (by hand, to 0 say) must not
    -- push or record the window's ticks from before the schedule was first seen (read with
    -- the watermark, in the same record).
    local floor = math.max(cur, seens[i] or 0)
    local overlapped = push_above(i, floor)
    if marks[i] > cur then
      write_state_parts(names[i], marks[i], seens[i], newests[i], histories[i] or tails[i])
      missed = missed + misseds[i]
      skipped = skipped + skippeds[i]
      applied[i] = '1'
      if n_ranges[i] > 0 then record(i, floor) end
      if #overlapped > 0 then add_ranges(missed_key, names[i], overlapped) end
      reindex(i)
    elseif marks[i] == cur then
      reindex(i)
    end
    if marks[i] <= cur and histories[i] then
      write_state_parts(names[i], cur, seens[i], newests[i], histories[i])
    end
  end
end
out:write()
flush('ZADD', due_key, index)
if any_rejected then flush('HDEL', rejected_key, planned) end
return {pushed, already, missed, skipped, new, stale, recorded, jobs:flags(),
  n_skip .. ' ' .. n_limit .. ' ' .. n_overlap .. ' ' .. recorded_window .. ' ' .. n_holding,
  table.concat(applied),
  set_aside, released}
