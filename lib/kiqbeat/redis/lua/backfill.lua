--[[
kiqbeat backfill script: push recorded missed ticks and remove them from the record, atomically.

KEYS[1]  missed hash (name -> recorded missed ranges, "AFTER THROUGH REASON" lines)
KEYS[2]  definitions hash (name -> definition JSON)
KEYS[3]  progress bucket 0 (kiqbeat:progress:0): its prefix names every bucket (progress.lua)
KEYS[4]  queues set
KEYS[5], KEYS[6], KEYS[7]  the life hashes: runs, skips, last job (life.lua)
KEYS[8]  schedule sorted set (where an invocation's lookahead jobs wait: `overlap: skip`)
KEYS[9..8+Q]  queue lists, one per distinct queue in this call

ARGV[1]  H, how many pushes each schedule's history keeps (0: none); never fewer than it holds
ARGV[2]  Q, number of queue lists
ARGV[3..2+Q]  queue names, aligned with KEYS[9..]
ARGV[3+Q]  the pieces, one per part of a schedule's record, in one packed argument
  (docs/store.md "Encodings"): first the number of fields a piece holds (8), then per
  piece, in order (frames.lua PIECE_FORMAT): NAME (H length, bytes); SHA (c40), the SHA1 of the
  definition the jobs were built from; AFTER and THROUGH, the part of the record this call
  settles, (AFTER, THROUGH] in epoch ms; QUEUE (H), k: the jobs' queue is KEYS[8+k] named
  ARGV[2+k]; LIMIT, the schedule's max_runs (0: none); OVERLAP (B), 1 for `overlap: skip`;
  N (I4), then N job frames
  (frames.lua: TICK RELEASE JOB, RELEASE 0, TICK in (AFTER, THROUGH], ascending). A field
  is added before N, as in push.lua.
ARGV[4+Q]  the running markers' key prefix (keys.running without the name)

A job is pushed only if its tick is still recorded: another backfill that pushed it first
removed it, so racing or repeated backfills push each recorded tick once. Then (AFTER,
THROUGH] is removed from the schedule's record (every tick of it was pushed now or before,
or, for --latest-only, deliberately left out), and each pushed job goes into the history
as "b TICK DELAY". With LIMIT, each pushed tick counts as one of the schedule's runs
(life.lua) and none is pushed once the count has reached LIMIT: those are taken out of
the record unpushed (the schedule has ended; they are counted as already dealt with). A group whose definition changed or went since it was read is left alone
(one swapped for a definition over MAX_DEFINITION_BYTES has changed, and is not read).
A group whose run count (life.lua) is not a whole number, or whose progress record is not
one (progress.lua), is left alone too, and named in `aside` with the reason (its record kept).

With OVERLAP (`overlap: skip`, issue 26), a backfill keeps the promise an invocation keeps:
while the schedule's previous job still waits or runs (life.lua `job_waiting`), it pushes
none of its ticks; otherwise it pushes one, the oldest still recorded, and remembers it as
the schedule's last job. Only the ticks up to the one pushed leave the record: the rest stay
recorded (the schedule named in `held`) for a later backfill, once that job has run.

All checks run before the first write.

Returns {pushed, already, stale, flags, held, aside}: stale counts the jobs left alone for a
changed definition; flags holds one character per job in argument order, "1" pushed, "0"
not; held names the schedules whose ticks were kept recorded for `overlap: skip`; aside is
name, reason, name, reason...
]]

local missed_key, defs_key, bucket_key, queues_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local life = {runs = KEYS[5], skips = KEYS[6], last = KEYS[7]}
local sched_key = KEYS[8]
local FIRST_QUEUE = 8
local keep = tonumber(ARGV[1])
local nq = tonumber(ARGV[2])
local running_prefix = ARGV[4 + nq]
local PIECE_FIELDS = 8

local err = expect_type(missed_key, 'hash') or expect_type(defs_key, 'hash')
  or expect_type(bucket_key, 'hash') or expect_type(queues_key, 'set')
  or expect_allowed('HMGET', missed_key, 'f') or expect_allowed('HSET', missed_key, 'f', 'r')
  or expect_allowed('HDEL', missed_key, 'f') or expect_allowed('HMGET', defs_key, 'f')
  or expect_allowed('HSTRLEN', defs_key, 'f') or expect_allowed('SADD', queues_key, 'q')
  or life_types(life) or life_allowed(life)
  or expect_type(sched_key, 'zset') or expect_allowed('ZSCORE', sched_key, 'job')
use_state(bucket_key, 'kiqbeat:progress:0')
err = err or state_allowed()
if err then return err end
for k = 1, nq do
  err = expect_type(KEYS[FIRST_QUEUE + k], 'list')
    or expect_allowed('LPUSH', KEYS[FIRST_QUEUE + k], 'job')
    or expect_allowed('LPOS', KEYS[FIRST_QUEUE + k], 'job')
  if err then return err end
end

local body = ARGV[3 + nq]
local pos
pos, err = expect_format(body, 'backfill', PIECE_FIELDS)
if err then return err end
local p_name, p_sha, p_after, p_through, p_target, first_job, n_jobs = {}, {}, {}, {}, {}, {}, {}
local p_limit, p_overlap = {}, {}
local jobs = job_frames()
local names, seen = {}, {}
local np = 0
while pos <= #body do
  np = np + 1
  local n
  p_name[np], p_sha[np], p_after[np], p_through[np], p_target[np], p_limit[np],
    p_overlap[np], n, pos = struct.unpack(PIECE_FORMAT, body, pos)
  first_job[np], n_jobs[np] = jobs.count + 1, n
  pos = jobs:read(body, pos, n)
  if not seen[p_name[np]] then
    seen[p_name[np]] = true
    names[#names + 1] = p_name[np]
  end
end
if np == 0 then return {0, 0, 0, '', {}, {}} end
for i = 1, np do
  if p_overlap[i] == 1 then
    err = expect_allowed('EXISTS', running_prefix .. p_name[i])
    if err then return err end
  end
end

-- Each schedule's record and history, read once and kept current across its pieces (a
-- call may carry several parts of one schedule), then written once.
local recorded = redis.call('HMGET', missed_key, unpack(names))
-- A definition swapped meanwhile for one over the limit is not read: it has changed.
local defs = read_definitions(defs_key, names, math.huge)
-- A progress record that is not one (written by hand) costs only its schedule: named in
-- `aside` with the reason, its ticks and record left as they are.
local state, aside = {}, {}
for k, name in ipairs(names) do
  local s = {def = defs[k], done = {}}
  if keep > 0 then
    s.mark, s.seen, s.newest, s.tail, err = read_state_parts(name)
    if err then
      s.why = garbled_reason(err)
      if not s.why then return err end
      aside[#aside + 1], aside[#aside + 2] = name, s.why
    end
  end
  if recorded[k] then s.ranges = read_ranges(recorded[k]) end
  state[name] = s
end
-- Run counts, read and checked before the first write (life.lua `runs_of`).
for i = 1, np do
  local s = state[p_name[i]]
  if p_limit[i] > 0 and s.runs == nil and not s.why then
    s.runs, s.why = runs_of(life, p_name[i])
    s.ran = 0
    if s.why then aside[#aside + 1], aside[#aside + 2] = p_name[i], s.why end
  end
end

local when = clock_ms()
local pushed, already, stale = 0, 0, 0
local held_back, held_seen = {}, {}  -- names whose ticks stay recorded for overlap
local out = destinations(FIRST_QUEUE, 3, queues_key, nil)
for i = 1, np do
  local s, n = state[p_name[i]], n_jobs[i]
  local after, through = p_after[i], p_through[i]
  if s.why then  -- named in `aside`: its record stays as it is, nothing pushed
  elseif not s.def or redis.sha1hex(s.def) ~= p_sha[i] or not s.ranges then
    if s.ranges then stale = stale + n else already = already + n end
  else
    local overlap = p_overlap[i] == 1
    if overlap and s.busy == nil then
      s.busy = job_waiting(life, p_name[i], sched_key, KEYS[FIRST_QUEUE + p_target[i]],
        running_prefix .. p_name[i])
    end
    for j = first_job[i], first_job[i] + n - 1 do
      local tick, held = jobs.ticks[j], false
      for _, range in ipairs(s.ranges) do
        if range[1] and range[1] < tick and tick <= range[2] then held = true break end
      end
      if held and overlap and s.busy then
        -- Its previous job waits or runs: this tick and the rest stay recorded.
        if through > after then through = math.max(after, jobs.ticks[j] - 1) end
        if not held_seen[p_name[i]] then
          held_seen[p_name[i]] = true
          held_back[#held_back + 1] = p_name[i]
        end
        break
      end
      if held and p_limit[i] > 0 then
        if s.runs + s.ran >= p_limit[i] then
          held = false
        else
          s.ran = s.ran + 1
        end
      end
      if held then
        out:add(p_target[i], jobs.releases[j], jobs:json(body, j))
        pushed = pushed + 1
        jobs.pushed[j] = true
        s.done[#s.done + 1] = pushed_line('b', tick, when)
        if overlap then
          remember_job(life, p_name[i], jobs:json(body, j))
          s.busy = true
        end
      else
        already = already + 1
      end
    end
    -- What is left of each range once (AFTER, THROUGH] is taken out.
    local left = {}
    for _, range in ipairs(s.ranges) do
      local a, t, r = range[1], range[2], range[3]
      if not a or t <= after or a >= through then
        left[#left + 1] = range
      else
        if a < after then left[#left + 1] = {a, after, r} end
        if through < t then left[#left + 1] = {through, t, r} end
      end
    end
    s.ranges, s.changed = left, true
  end
end
for _, name in ipairs(names) do
  local s = state[name]
  if s.changed then write_ranges(missed_key, name, s.ranges) end
  if s.ran then add_runs(life, name, s.ran) end
  if keep > 0 and #s.done > 0 then  -- its watermark as read: a backfill never moves it
    write_state_parts(name, s.mark, s.seen, remembered_parts(s.newest, s.tail, s.done,
      #s.done, keep, true))
  end
end
out:write()
return {pushed, already, stale, jobs:flags(), held_back, aside}
