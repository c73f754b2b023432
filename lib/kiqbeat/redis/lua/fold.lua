--[[
kiqbeat fold script: fold worker reports of kiqbeat's jobs into the schedules' outcome records,
atomically (docs/store.md, "The worker protocol"; lib/kiqbeat/outcomes/records.py is the one
Python reader of the same layout). Two callers, one fold: a worker folds its own report as it
writes it (the entries given in ARGV), and an invocation folds what workers left in the inbox
instead (those without the script: an old middleware, NOSCRIPT, another language).

KEYS[1]  the inbox list (NS kiqbeat:outcomes:inbox); workers without the script LPUSH, this
         pops the oldest. The other keys are NS (KEYS[1] less its name) and a fixed name:
  NS kiqbeat:schedules         definitions hash (name -> definition JSON): an entry for a name
                               without one is dropped; a definition's `history` sets how many
                               ticks its record keeps
  NS kiqbeat:outcomes:errors   hash: name -> "TICK_MS<TAB>Class: message" of its newest
                               failure, while no newer tick has succeeded
  NS kiqbeat:outcomes:changed  sorted set: name -> sequence number, the schedules whose health
                               the alert decision must judge (below), at most MAX_CHANGED
  NS kiqbeat:deadlines, NS kiqbeat:expectations, NS kiqbeat:incidents (incidents.lua's)

ARGV[1]  K: 0, fold the entries ARGV[3..] (a worker's call, at most 100); else pop and fold
         up to K entries of the inbox (a bounded slice: no call holds Redis long)
ARGV[2]  N, ticks a record keeps unless the definition says otherwise (0: none kept)
ARGV[3..]  K = 0: the entries, each one JSON report as the inbox would hold it

The records live in NS kiqbeat:outcomes:B, B the schedule's bucket (`bucket_of`, checks.lua:
its progress record's too), name -> the outcome record, specified in docs/store.md
"Encodings" (the limits a reader keeps too). A stored record that is not one is read as a
fresh record: it costs only that schedule's record, never a loop or an error (issue 27).
Each schedule's fold runs under pcall after the RPOP, so no Lua error there loses the other
schedules' popped entries.

Folding an entry {"s","t","j","e","at","a","d","x","m"} into its tick's entry: `started`
marks it running unless an end of this attempt or a later one is recorded; `succeeded`,
`failed` and `expired` replace anything of an earlier or the same attempt (a retry that
succeeds turns a failed tick into a success); a success is never undone by a failure of an
earlier attempt. A tick older than every kept entry of a full record is dropped.

Only what the alert decision (incidents.lua) could act on goes to Python: a schedule is
added to the changed names (a new sequence number, the oldest dropped beyond MAX_CHANGED)
when its record changed and either an entry folded grew its failed ticks in a row (a failed
end, or a retry's start: the attempt before it failed) to a length the decision acts on (with
no incident open: the definition's smaller `alert_after_failures` or `pause_after_failures`,
which may open `failing` or `paused`; with one open: `pause_after_failures`, counted since
the last pause when the open incident is one; never once more per failure while nothing is
left to decide), or its newest success moved on while its incident record is open (it may
close with `recovered`).
A success that moves on otherwise takes the deadline of a schedule whose definition has
`expect_success_within` away here, as the decision would (deadline.lua): a steady stream of successes costs an invocation nothing. `silent` is
decided from the deadlines due, which read the record.

Returns {taken, dropped, left, notified}: the entries taken (from the inbox or ARGV), those
dropped (garbled, an unknown schedule, too old), the entries still in the inbox (0 for a
worker's call: not looked at), and the schedules added to the changed names.
]]

local inbox = KEYS[1]
local K = tonumber(ARGV[1])
local DEFAULT_N = tonumber(ARGV[2])
local NS = string.sub(inbox, 1, #inbox - #'kiqbeat:outcomes:inbox')
local PREFIX = NS .. 'kiqbeat:outcomes:'
local defs_key, errors_key = NS .. 'kiqbeat:schedules', PREFIX .. 'errors'
local changed_key = PREFIX .. 'changed'
local deadlines_key, rules_key = NS .. 'kiqbeat:deadlines', NS .. 'kiqbeat:expectations'
local incidents_key = NS .. 'kiqbeat:incidents'
local MAX_GIVEN = 100  -- entries one worker call may give
local STATE = {started = 0, succeeded = 1, failed = 2, expired = 3}
local RUNNING, SUCCEEDED, FAILED, EXPIRED = 0, 1, 2, 3
local floor = math.floor

if not K or not DEFAULT_N or (K == 0 and #ARGV - 2 > MAX_GIVEN) then
  return redis.error_reply('KIQBEAT_ARGS fold.lua takes K N [ENTRY...] (at most '
    .. MAX_GIVEN .. ' entries)')
end
-- The invocation's fold checks the keys' types first (a clear refusal); a worker's call
-- does not (seven calls of its few): a key of another type makes its call fail, and the
-- worker writes the report to the inbox, where the invocation's fold refuses it by name.
if K > 0 then
  local refused = expect_type(inbox, 'list') or expect_type(defs_key, 'hash')
    or expect_type(errors_key, 'hash') or expect_type(changed_key, 'zset')
    or expect_type(deadlines_key, 'zset') or expect_type(rules_key, 'hash')
    or expect_type(incidents_key, 'hash')
  if refused then return refused end
end

-- Whether an entry once failed (failed, or running a retry).
local function counted(e)
  return e.state == FAILED or (e.state == RUNNING and e.a > 1)
end

local function history_of(definition)
  if not string.find(definition, '"history"', 1, true) then return DEFAULT_N end
  local ok, parsed = pcall(cjson.decode, definition)
  local n = ok and type(parsed) == 'table' and parsed.history
  if type(n) == 'number' and n >= 0 and n == floor(n) then return math.min(n, MAX_HISTORY) end
  return DEFAULT_N
end

-- A valid entry's fields, or nil.
local function parsed_entry(text)
  local ok, e = pcall(cjson.decode, text)
  if not ok or type(e) ~= 'table' then return nil end
  local s, t, ev, a = e.s, e.t, STATE[e.e], e.a
  if type(s) ~= 'string' or s == '' or #s > 1000 or type(t) ~= 'number' or t < 0
      or t ~= floor(t) or t >= LAST_TICK or not ev then return nil end
  if type(a) ~= 'number' or a < 1 or a ~= floor(a) then a = 1 end
  local d = e.d
  if type(d) ~= 'number' or d ~= d or d < 0 then d = 0 end
  local at = e.at
  if type(at) ~= 'number' or at ~= at then at = t end
  local j = e.j
  return {s = s, t = t, ev = ev, a = math.min(a, 1000000), d = floor(math.min(d, 2^40)),
          -- a start is an instant too: before 9999 (records.py reads it as one)
          start = floor(math.max(0, math.min(at - t, 2^40, LAST_TICK - 1 - t))),
          manual = (type(j) == 'string' and string.sub(j, 1, 6) == 'manual') and 1 or 0,
          x = type(e.x) == 'string' and string.sub(e.x, 1, 200) or 'Error',
          m = type(e.m) == 'string' and string.sub(e.m, 1, 200) or ''}
end

-- Apply one entry to a record; whether it changed.
local function apply(rec, e, keep)
  local entries = rec.entries
  local at = nil
  for i, old in ipairs(entries) do
    if old.t == e.t then at = i break end
    if old.t < e.t then at = -i break end
  end
  local entry
  if at and at > 0 then
    entry = entries[at]
  else
    if not at and #entries >= keep then return false end  -- older than all kept
    entry = {t = e.t, state = -1, manual = e.manual, a = 0, v = 0}
    table.insert(entries, at and -at or #entries + 1, entry)
  end
  if e.ev == RUNNING then
    if entry.state >= 0 and (entry.a > e.a or (entry.a == e.a and entry.state ~= RUNNING)
                             or entry.state == SUCCEEDED or entry.state == EXPIRED) then
      return false
    end
    entry.state, entry.a, entry.v = RUNNING, e.a, e.start
  else
    if entry.state == SUCCEEDED and e.ev ~= SUCCEEDED and entry.a >= e.a then return false end
    -- An end of an earlier attempt than the one recorded (a late or repeated copy, e.g. a
    -- worker's inbox copy of a report its call had folded) changes nothing.
    if entry.state >= 0 and entry.a > e.a then return false end
    entry.state, entry.a, entry.v = e.ev, e.a, (e.ev == EXPIRED and 0 or e.d)
  end
  return true
end

-- Recount the failure streak and trim to `keep`, after each entry applied.
local function settle(rec, keep)
  local entries = rec.entries
  for _, e in ipairs(entries) do
    if e.state == SUCCEEDED then
      if not rec.ls or e.t > rec.ls then rec.ls, rec.beyond = e.t, 0 end
      break
    end
  end
  while #entries > keep do
    local gone = table.remove(entries)
    if counted(gone) and (not rec.ls or gone.t > rec.ls) then rec.beyond = rec.beyond + 1 end
  end
end

local taken
if K == 0 then
  taken = {unpack(ARGV, 3)}
else
  taken = redis.call('RPOP', inbox, K)
  if not taken then return {0, 0, 0, 0} end
end
local by_name, order, dropped = {}, {}, 0
for _, text in ipairs(taken) do
  local e = parsed_entry(text)
  if not e then
    dropped = dropped + 1
  else
    local list = by_name[e.s]
    if not list then
      list = {}
      by_name[e.s] = list
      order[#order + 1] = e.s
    end
    list[#list + 1] = e
  end
end

-- Failed ticks in a row (core/outcomes.py health's count): those beyond the record, and the
-- kept ones that once failed, newer than the last success.
local function streak_of(rec)
  local streak = rec.beyond
  for _, e in ipairs(rec.entries) do
    if counted(e) and (not rec.ls or e.t > rec.ls) then streak = streak + 1 end
  end
  return streak
end

-- One schedule's entries folded into its record (raw: as stored, nil or garbled: fresh), in
-- Lua only (no Redis call): whether it changed, the record, the newest failure folded,
-- whether a failure streak stood before, the entries dropped, the last success tick after
-- and before, and whether an entry grew the streak to a length on which the decision could
-- act (`acts(streak)`, asked only then: it may read the incident). Judged after each entry,
-- as the record is settled after each: folding entries one call each (a worker's) or many
-- in one call (the inbox's) makes the same record and the same changed names.
-- Runs under pcall.
local function fold_record(raw, list, keep, acts)
  local rec = decode_outcomes(raw) or {ls = nil, beyond = 0, entries = {}}
  local ls_before = rec.ls
  local streak = streak_of(rec)
  local streak_before = streak > 0
  local changed, failure, lost, reached = false, nil, 0, false
  for _, e in ipairs(list) do
    if apply(rec, e, keep) then
      settle(rec, keep)
      changed = true
      if e.ev == FAILED and (not failure or e.t >= failure.t) then failure = e end
      local now = streak_of(rec)
      if now > streak and not reached then reached = acts(now) end
      streak = now
    else
      lost = lost + 1
    end
  end
  local record = nil
  if changed then record = encode_outcomes(rec) end
  return changed, record, failure, streak_before, lost, rec.ls, ls_before, reached
end

-- The definition's positive `alert_after_failures` and `pause_after_failures` (nil: none).
local function failure_rules(definition)
  if type(definition) ~= 'string'
      or not string.find(definition, '_after_failures"', 1, true) then return nil, nil end
  local ok, parsed = pcall(cjson.decode, definition)
  if not ok or type(parsed) ~= 'table' then return nil, nil end
  local function count(n)
    if type(n) == 'number' and n >= 1 then return n end
    return nil
  end
  return count(parsed.alert_after_failures), count(parsed.pause_after_failures)
end

-- Add `name` to the changed names with the next sequence number (a score that is no
-- number, written by hand, restarts the count: it costs only the order).
local notified = 0
local function notify(name)
  local last = redis.call('ZRANGE', changed_key, -1, -1, 'WITHSCORES')
  local seq = tonumber(last[2])
  if not seq or seq ~= seq or seq < 0 or seq >= 2^50 then seq = 0 end
  redis.call('ZADD', changed_key, seq + 1, name)
  local over = redis.call('ZCARD', changed_key) - MAX_CHANGED
  if over > 0 then  -- the oldest go (ZRANGE and ZREM: commands kiqbeat's ACL grants already)
    redis.call('ZREM', changed_key, unpack(redis.call('ZRANGE', changed_key, 0, over - 1)))
  end
  notified = notified + 1
end

for _, name in ipairs(order) do
  -- A definition over MAX_DEFINITION_BYTES is never read: the default history then.
  local size = redis.call('HSTRLEN', defs_key, name)
  local definition = size > MAX_DEFINITION_BYTES
    or (size > 0 and redis.call('HGET', defs_key, name))
  local list = by_name[name]
  local keep = 0
  if definition == true then keep = DEFAULT_N
  elseif definition then keep = history_of(definition) end
  local key = PREFIX .. bucket_of(name)
  local raw = keep > 0 and redis.pcall('HGET', key, name)
  if keep == 0 or type(raw) == 'table' then  -- no schedule, or a bucket of another type
    dropped = dropped + #list
  else
    -- Whether the decision could act on a failure streak this long (incidents.lua): open
    -- `failing` or `paused` when no incident is open, else pause once the streak reaches
    -- PAUSE (counted since the last pause, when the open incident is one: resume clears
    -- the streak). Not once more per failure while nothing is left to decide: in a storm
    -- the changed names hold only that, so each is judged (issue 27). The definition and
    -- the incident (read as the decision reads it: `read_incident`, deadline.lua) are read
    -- only when a streak grows.
    local alert, pause, open, asked = nil, nil, nil, false
    local function acted_on(streak)
      if not asked then
        alert, pause = failure_rules(definition)
        if alert or pause then open = read_incident(incidents_key, name) end
        asked = true
      end
      local fewest = (alert and pause) and math.min(alert, pause) or alert or pause
      if not fewest then return false end
      if open == nil then return streak >= fewest end
      -- paused (and perhaps resumed since): PAUSE more failures pause it again; the open
      -- incident's streak is the one it opened on
      local since = streak - (open.e == 'paused' and open.n or 0)
      return pause ~= nil and since >= pause
    end
    local ok, changed, record, failure, streak_before, lost, ls, ls_before, reached = pcall(
      fold_record, raw, list, keep, acted_on)
    if not ok then  -- a record that is not one: this schedule starts a fresh record
      ok, changed, record, failure, streak_before, lost, ls, ls_before, reached = pcall(
        fold_record, false, list, keep, acted_on)
    end
    if not ok then changed, lost = false, #list end
    dropped = dropped + lost
    if changed then
      redis.call('HSET', key, name, record)
      -- The last error exists only while a failure streak does, or until a success newer
      -- than it (an expired end may have replaced the failure in the record): read it only
      -- then.
      local last_error = false
      if failure or streak_before or (ls and ls ~= ls_before) then
        last_error = redis.call('HGET', errors_key, name)
      end
      if failure then
        local old_t = last_error and tonumber(string.match(last_error, '^(%d+)\t'))
        if not old_t or failure.t >= old_t then
          last_error = failure.t .. '\t' .. failure.x .. ': ' .. failure.m
          redis.call('HSET', errors_key, name, last_error)
        end
      end
      if last_error and ls then
        local old_t = tonumber(string.match(last_error, '^(%d+)\t'))
        if not old_t or old_t <= ls then
          redis.call('HDEL', errors_key, name)
          last_error = false
        end
      end
      if reached then
        notify(name)
      elseif ls and (not ls_before or ls > ls_before) then
        if read_incident(incidents_key, name) then
          notify(name)
        elseif type(definition) == 'string'
            and string.find(definition, 'expect_success_within"', 1, true) then
          -- (a deadline left by a definition that lost the field is dropped when due)
          settle_deadline(deadlines_key, rules_key, name, ls)
        end
      end
    end
  end
end
return {#taken, dropped, K > 0 and redis.call('LLEN', inbox) or 0, notified}
