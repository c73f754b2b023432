--[[
kiqbeat incidents script: decide a schedule's incidents (failing, silent, paused) and their
recovery once, whatever copies race, and append each decided event to the outbox and the
audit trail in the same step (alerts/, DESIGN §12).

KEYS[1]  deadlines (sorted set: name -> epoch ms its earliest outstanding success deadline falls)
KEYS[2]  expectations (hash: name -> "SHA WITHIN ALERT PAUSE", the rules of the definition
         whose SHA1 is SHA, as the last invocation that pushed it wrote them)
KEYS[3]  incidents (hash: name -> its incident record, JSON {"e": the open incident's event,
         "" once closed; "t": its opening tick ms; "n": the failure streak then; "c": the tick
         whose success closed the last one})
KEYS[4]  outbox (stream of decided events, trimmed to ARGV[2] entries)
KEYS[5]  audit stream    KEYS[6]  definitions hash    KEYS[7]  paused hash
KEYS[8]  outcome errors hash (name -> "TICK_MS<TAB>Class: message" of its newest failure,
         fold.lua): the failed tick a streak ends on
KEYS[9]  changed names (sorted set: name -> sequence number, fold.lua): the health judged
         here is taken away from it
ARGV[1]  now, epoch ms (the invocation's Redis clock read)
ARGV[2]  the outbox's length bound    ARGV[3]  the audit trail's length bound (approximate)
ARGV[4]  most deadlines looked at (the rest: the next invocation)
ARGV[5]  G, then G sink names: a consumer group of the outbox each (created at the end of
         the stream when missing, before any event is added)
then A, then A times NAME SHA TICK RULES: a tick this invocation pushed of a schedule with
  expectations, the SHA1 of the definition it was planned from, and its rules
  ("WITHIN ALERT PAUSE", ms and counts, 0: none)
then D, then D names: schedules planned with expectations that push nothing (disabled): no deadline
then H, then H times NAME SUCCESS STREAK: a schedule's health as the fold left it
  (core/outcomes.py Health): its newest succeeded tick (0: none) and its failed ticks in a row
  since (the newest failed tick and its error are read from KEYS[8])
then C, then C times NAME SEQ: the changed names this health was read for (KEYS[9]); each
  is removed unless a fold added it again since (its score is no longer SEQ)

Order, in one step: the arms (HSET the rules, ZADD NX the deadline TICK + WITHIN unless a
silent or paused incident is open), the disarms, then each health: a success after an open
incident's opening tick closes it with a `recovered` event, and takes the deadline away when it
falls on this tick or before (the next push sets the next one); a failure after the last close
opens `paused` when the streak since the last pause reaches PAUSE (and returns the name, for the
caller to pause it), else `failing` when it reaches ALERT and nothing is open. A health older
than what was judged (a copy that folded late) changes nothing. Then the deadlines due (score <= now): a schedule whose
rules are stale (its definition changed or went: SHA differs, or it is over
MAX_DEFINITION_BYTES, never read) or that is paused loses it; one without an open incident
opens `silent` unless its outcome record (NS kiqbeat:outcomes:B, read-only) already holds a
success at or after the deadline's tick (a copy that folded it died before deciding: the
deadline moves on as that decision would have moved it). A score or incident tick that is no
instant (inf, nan, out of range, written by hand) is dropped or read as garbled (issue 27). Each event's idempotency key is NAME|EVENT|TICK, TICK
the incident's opening tick (for `recovered`, that of the incident it closes).

Returns {events, to_pause, backlog}: events decided (count), the names to pause, and per sink
(in ARGV order) "PENDING LAG" (entries delivered but not acknowledged, and not yet delivered).
]]

local deadlines, rules_key, incidents, outbox = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local NS = string.sub(deadlines, 1, #deadlines - #'kiqbeat:deadlines')
local audit, defs_key, paused_key, errors_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local changed_key = KEYS[9]
local err = expect_type(deadlines, 'zset') or expect_type(rules_key, 'hash')
  or expect_type(incidents, 'hash') or expect_type(outbox, 'stream')
  or expect_type(audit, 'stream') or expect_type(defs_key, 'hash')
  or expect_type(paused_key, 'hash') or expect_type(errors_key, 'hash')
  or expect_allowed('ZADD', deadlines, 'NX', '1', 'f') or expect_allowed('ZREM', deadlines, 'f')
  or expect_allowed('ZRANGEBYSCORE', deadlines, '0', '1')
  or expect_allowed('HSET', rules_key, 'f', 'v') or expect_allowed('HDEL', rules_key, 'f')
  or expect_allowed('HSET', incidents, 'f', 'v') or expect_allowed('HDEL', incidents, 'f')
  or expect_allowed('XADD', outbox, 'MAXLEN', '1', '*', 'f', 'v')
  or expect_allowed('XADD', audit, 'MAXLEN', '~', '1', '*', 'f', 'v')
  or expect_allowed('HGET', defs_key, 'f') or expect_allowed('HSTRLEN', defs_key, 'f')
  or expect_allowed('HEXISTS', paused_key, 'f')
  or expect_allowed('HGET', errors_key, 'f') or expect_type(changed_key, 'zset')
  or expect_allowed('ZREM', changed_key, 'f')
if err then return err end

local now = tonumber(ARGV[1])
local outbox_len, audit_len, most = ARGV[2], ARGV[3], tonumber(ARGV[4])
local at = 5
local function arg()
  at = at + 1
  return ARGV[at - 1]
end

local sinks = {}
for k = 1, tonumber(arg()) do
  sinks[k] = arg()
  local ok, e = pcall(redis.call, 'XGROUP', 'CREATE', outbox, sinks[k], '$', 'MKSTREAM')
  if not ok and not string.find(tostring(e and e.err or e), 'BUSYGROUP', 1, true) then
    return redis.error_reply(tostring(e and e.err or e))
  end
end

local events = 0
local function emit(name, event, tick, jid, error_text, note, opened)
  tick = ms_text(tick)
  local key = name .. '|' .. event .. '|' .. (opened or tick)
  redis.call('XADD', outbox, 'MAXLEN', outbox_len, '*', 'k', key, 's', name, 'e', event,
    't', tick, 'j', jid or '', 'x', error_text or '', 'n', note or '', 'at', now)
  redis.call('XADD', audit, 'MAXLEN', '~', audit_len, '*', 'actor', 'kiqbeat', 'action', 'alert',
    'name', name, 'note', note or '', 'detail', event .. ' at tick ' .. tick)
  events = events + 1
end

-- The newest succeeded tick in `name`'s outcome record (outcomes.lua), or nil: none, or not
-- a record. Read before a `silent` opens, so a success a fold recorded but whose copy died
-- before deciding still counts (issue 27).
local function recorded_success(name)
  local key = NS .. 'kiqbeat:outcomes:' .. bucket_of(name)
  local ok, raw = pcall(redis.call, 'HGET', key, name)
  local rec = ok and type(raw) == 'string' and decode_outcomes(raw)
  return rec and rec.ls and instant(rec.ls) or nil
end

local function write_incident(name, record)
  redis.call('HSET', incidents, name, cjson.encode({e = record.e, t = ms_text(record.t),
    n = record.n or 0, c = ms_text(record.c or 0)}))
end

-- The rules of `name` when they belong to its current definition: WITHIN, ALERT, PAUSE.
local function rules_of(name)
  local raw = redis.call('HGET', rules_key, name)
  if not raw then return nil end
  local sha, within, alert, pause = string.match(raw, '^(%x+) (%d+) (%d+) (%d+)$')
  -- A definition over MAX_DEFINITION_BYTES is never read (nor planned): stale rules.
  local def = redis.call('HSTRLEN', defs_key, name) <= MAX_DEFINITION_BYTES
    and redis.call('HGET', defs_key, name)
  if not sha or not def or redis.sha1hex(def) ~= sha then
    redis.call('HDEL', rules_key, name)
    return nil
  end
  return tonumber(within), tonumber(alert), tonumber(pause)
end

for _ = 1, tonumber(arg()) do
  local name, sha, tick, rules = arg(), arg(), tonumber(arg()), arg()
  local stored = sha .. ' ' .. rules
  if redis.call('HGET', rules_key, name) ~= stored then
    redis.call('HSET', rules_key, name, stored)
  end
  local within = tonumber(string.match(rules, '^(%d+)'))
  if within and within > 0 then
    -- Armed unless it has one (NX; a score written by hand, inf or nan, is dropped:
    -- deadline.lua) or a silent or paused incident is open.
    if not deadline_of(deadlines, name) then
      local open = read_incident(incidents, name)
      if not open or (open.e ~= 'silent' and open.e ~= 'paused') then
        redis.call('ZADD', deadlines, tick + within, name)
      end
    end
  else
    redis.call('ZREM', deadlines, name)
  end
end

for _ = 1, tonumber(arg()) do
  redis.call('ZREM', deadlines, arg())
end

local to_pause = {}
for _ = 1, tonumber(arg()) do
  local name, success, streak = arg(), tonumber(arg()), tonumber(arg())
  local open, record = read_incident(incidents, name)
  if success > 0 then
    -- A success closes an incident it comes after (an older one, folded late, does not).
    if open and success > open.t then
      record = {e = '', t = open.t, n = 0, c = success}
      write_incident(name, record)
      emit(name, 'recovered', success, '', '', 'after ' .. open.e, ms_text(open.t))
      open = nil
    end
    settle_deadline(deadlines, rules_key, name, success)
  end
  if streak > 0 then
    local newest = redis.call('HGET', errors_key, name)
    local tick, error_text = 0, ''
    if newest then
      local t, text = string.match(newest, '^(%d+)\t(.*)$')
      tick, error_text = tonumber(t) or 0, text or ''
    end
    -- A failure after the last close and after the open incident's opening tick (a copy
    -- folding late never reopens what another closed).
    if tick > (record.c or 0) and not (open and tick <= open.t) then
      local _, alert, pause = rules_of(name)
      local since = streak - ((open and open.e == 'paused' and open.n) or 0)
      if pause and pause > 0 and since >= pause then
        write_incident(name, {e = 'paused', t = tick, n = streak, c = record.c})
        redis.call('ZREM', deadlines, name)
        emit(name, 'paused', tick, '', error_text, 'paused after ' .. since ..
          ' failed ticks in a row (pause_after_failures)')
        to_pause[#to_pause + 1] = name
      elseif alert and alert > 0 and streak >= alert and not open then
        write_incident(name, {e = 'failing', t = tick, n = streak, c = record.c})
        emit(name, 'failing', tick, '', error_text, streak .. ' failed ticks in a row')
      end
    end
  end
end

-- Judged: taken off the changed names unless a fold added them again since.
for _ = 1, tonumber(arg()) do
  local name, seq = arg(), arg()
  local score = redis.call('ZSCORE', changed_key, name)
  if score and tonumber(score) == tonumber(seq) then redis.call('ZREM', changed_key, name) end
end

local due = redis.call('ZRANGEBYSCORE', deadlines, '-inf', now, 'WITHSCORES', 'LIMIT', 0, most)
for k = 1, #due, 2 do
  local name, deadline = due[k], instant(due[k + 1])
  redis.call('ZREM', deadlines, name)  -- a score that is no instant (-inf) is dropped
  local within = deadline and rules_of(name)
  local tick = within and deadline - within
  local success = tick and recorded_success(name)
  -- A success at or after the deadline's tick already in the record (its fold's copy died
  -- before deciding) moves the deadline on as a decided one would: no `silent`.
  if within and within > 0 and tick >= 0 and not (success and success >= tick)
      and redis.call('HEXISTS', paused_key, name) == 0 and not read_incident(incidents, name) then
    local _, record = read_incident(incidents, name)
    write_incident(name, {e = 'silent', t = tick, n = 0, c = record.c})
    emit(name, 'silent', tick, '', '', 'no success within ' .. ms_text(within / 1000) .. ' s of its tick')
  end
end

local backlog = {}
if #sinks > 0 then
  local groups = {}
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', outbox)) do
    local g = {}
    for j = 1, #group, 2 do g[group[j]] = group[j + 1] end
    groups[g['name']] = g
  end
  for k, sink in ipairs(sinks) do
    local g = groups[sink] or {}
    local lag = g['lag']
    if type(lag) ~= 'number' then lag = -1 end  -- unknown (trimmed past the group)
    backlog[k] = (tonumber(g['pending']) or 0) .. ' ' .. lag
  end
end
return {events, to_pause, backlog}
