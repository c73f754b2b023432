--[[
kiqbeat write script: change schedule definitions and their index entries, atomically.

KEYS[1]  definitions hash    KEYS[2]  progress bucket 0 (the buckets' prefix: progress.lua)
KEYS[3]  rejected hash (name -> why its definition was set aside)
KEYS[4]  documents hash (location -> digest applied)   KEYS[5]  that document's index
KEYS[6]  the shard count the due index is split into
KEYS[7]  missed hash (recorded missed ranges)
KEYS[8]  manual hash (the last manual run's jid)
KEYS[9]  paused hash (pause records: core/pause.py)
KEYS[10], KEYS[11], KEYS[12], KEYS[13]  the life hashes: runs, skips, last job, held tick
  (life.lua)
KEYS[14], KEYS[15], KEYS[16]  the name index: the names plain writers marked, its ranges
  (its buckets derived from it) and its disabled names (names.lua), kept in step with the
  definitions
KEYS[17..]  due indexes (one per shard an operation names)
ARGV[1]  the operations, packed in one string: per operation a line
  "OP K SOURCE_LENGTH EXPECT NAME_LENGTH DEF_LENGTH\n" then SOURCE, NAME and DEF, where
  OP is one of
    put    add or replace; refused when the definition belongs to another source, unless
           both are documents (a document that moved, e.g. from a file to S3, takes over)
    add    add; refused when the name exists
    update replace; refused when missing or another source's
    set    replace whatever its source, only if its SHA1 is EXPECT (pause, resume, a
           forced put or update: `--force-owner`)
    del    remove and forget its state; refused when another source's, unless EXPECT is
           its SHA1 (a caller that read it forces the removal: `--force-owner`; "S" if it
           changed meanwhile)
    reject set the definition aside with the reason DEF, only if its SHA1 is EXPECT, or,
           with EXPECT "big:N", only if it is still N bytes long, over the limit (it was
           not read, and is not now), or, with EXPECT "-", forget a name whose
           definition is gone
  K the due index (KEYS[16 + K]), SOURCE the writer ("" for the API and other languages,
  a document's location for a document), EXPECT a SHA1 or "-".
ARGV[2]  the shard count the writer computed its index keys with: refused unless it is the
  recorded one (recorded if none is)
ARGV[3]  "1" to record a document as applied after the operations (its last call) unless
  one was refused: ARGV[4] its location, ARGV[5] its digest, ARGV[6] its index; else "".
ARGV[7]  the instant of the change, epoch ms ("": the Redis clock); an invocation applying
  a document gives its own `now`, so that replays stay on their own clock.

A definition's source is its JSON's "source" field ("" when absent). A stored definition
over MAX_DEFINITION_BYTES is never read (its length is asked first): it belongs to no one
(any writer may replace or remove it), has changed for "set", and owes nothing read from
it. A DEF over the limit is refused ("L"), whatever the op but reject and del. Writing a definition
sets its index entry to 0 ("plan me") and clears a set-aside reason; writing the same bytes
again changes nothing. Removing forgets the watermark, first-seen, missed ranges, history,
last manual jid, pause record and life state (run count, pending skips, last job, held
tick) too;
writing a definition never touches the pause record. Writing or removing a definition keeps
the name index (names.lua) in step, in the same step.

Changing a planned definition also moves its watermark up to the change (never past the
old definition's next tick, which its index entry gives): the new definition applies to
ticks after the change, and none of the old one's is lost — no backfill, no gap. Pausing
records what the old definition still owed as missed ticks, and resuming owes nothing for
the pause (cut_mark).

Returns {codes, owners}: one character per operation, "+" done, "=" already so, "E" exists,
"M" missing, "O" another source's, "S" changed since read, "L" over the size limit; and the
owning source of each
"O", in order.
]]

local defs_key, bucket_key, rejected_key = KEYS[1], KEYS[2], KEYS[3]
local documents_key, document_key, shards_key = KEYS[4], KEYS[5], KEYS[6]
local missed_key, manual_key, paused_key = KEYS[7], KEYS[8], KEYS[9]
local life = {runs = KEYS[10], skips = KEYS[11], last = KEYS[12], held = KEYS[13]}
local FIRST_DUE = 16
local body, record = ARGV[1], ARGV[3] == '1'

-- Check every key's type and (Redis 7) every permission before the first write
-- (expect_type and expect_allowed: checks.lua).
local err = expect_type(defs_key, 'hash') or expect_type(rejected_key, 'hash')
  or expect_type(missed_key, 'hash') or expect_type(manual_key, 'hash')
  or expect_type(paused_key, 'hash') or life_types(life) or life_allowed(life)
  or names_use(KEYS[14], KEYS[15], KEYS[16])
if err then return err end
for k = FIRST_DUE + 1, #KEYS do
  err = expect_type(KEYS[k], 'zset')
  if err then return err end
end
local checks = {{'HSTRLEN', defs_key, 'n'}, {'HGET', defs_key, 'n'}, {'HSET', defs_key, 'n', 'v'}, {'HDEL', defs_key, 'n'},
  {'HSET', rejected_key, 'n', 'v'},
  {'HDEL', rejected_key, 'n'}, {'HEXISTS', rejected_key, 'n'}, {'HDEL', missed_key, 'n'},
  {'HGET', missed_key, 'n'}, {'HSET', missed_key, 'n', 'v'},
  {'HDEL', manual_key, 'n'}, {'HDEL', paused_key, 'n'}}
for k = FIRST_DUE + 1, #KEYS do
  checks[#checks + 1] = {'ZADD', KEYS[k], '0', 'n'}
  checks[#checks + 1] = {'ZSCORE', KEYS[k], 'n'}
  checks[#checks + 1] = {'ZREM', KEYS[k], 'n'}
end
if record then
  err = expect_type(documents_key, 'hash') or expect_type(document_key, 'string')
  if err then return err end
  checks[#checks + 1] = {'SET', document_key, 'v'}
  checks[#checks + 1] = {'HSET', documents_key, 'n', 'v'}
end
checks[#checks + 1] = {'GET', shards_key}
checks[#checks + 1] = {'SET', shards_key, '1'}
for _, c in ipairs(checks) do
  err = expect_allowed(unpack(c))
  if err then return err end
end
use_state(bucket_key, 'kiqbeat:progress:0')
err = state_allowed() or expect_allowed('HDEL', STATE_NS .. 'kiqbeat:outcomes:0', 'n')
  or expect_allowed('HDEL', STATE_NS .. 'kiqbeat:outcomes:errors', 'n')
if err then return err end
err = expect_type(shards_key, 'string')
if err then return err end
local shards = redis.call('GET', shards_key)
if shards and shards ~= ARGV[2] then
  return redis.error_reply('KIQBEAT_SHARDS the due index is split into ' .. shards ..
    ' shard(s) (' .. shards_key .. '), not ' .. ARGV[2] .. ': write with --shard I/' .. shards ..
    ' (Store(shards=' .. shards .. ')), or, after changing the count, run `kiqbeat schedules ' ..
    'reindex --shard 0/N` first')
end
if not shards then
  redis.call('SET', shards_key, ARGV[2])
end

-- A definition's fields ({} when it is not a JSON object: the invocation that meets it
-- sets it aside).
local function fields(def)
  return definition_fields(def) or {}  -- one decode, shared with the facets (names.lua)
end

local function owner(def)
  local source = fields(def).source
  return type(source) == 'string' and source or ''
end

-- The source holding `current` when `source` may not change it (nil when it may): only its
-- own, or, with `take_over`, a document's from another document.
local function held_by_other(current, source, take_over)
  if not current then return nil end  -- over the limit: no one's
  local held = owner(current)
  if held == source or (take_over and source ~= '' and held ~= '') then
    return nil
  end
  return held
end

-- Removal forgets the state too: nothing of the name stays but its definition, if any
-- (and the name index's entry follows it).
local function forget(name, due_key)
  names_forget(name)
  redis.call('ZREM', due_key, name)
  forget_state(name)
  redis.call('HDEL', rejected_key, name)
  redis.call('HDEL', missed_key, name)
  redis.call('HDEL', manual_key, name)
  redis.call('HDEL', paused_key, name)
  life_forget(life, name)
  -- Its outcome record (in its bucket: checks.lua) and last error; a key of another type
  -- holds neither, and must not stop the call half-way (pcall; the grants are checked
  -- before the first write).
  redis.pcall('HDEL', STATE_NS .. 'kiqbeat:outcomes:' .. bucket_of(name), name)
  redis.pcall('HDEL', STATE_NS .. 'kiqbeat:outcomes:errors', name)
end

local now_ms = tonumber(ARGV[7]) or clock_ms()

-- Whether a definition runs: its "enabled" is not false.
local function enabled(def)
  return fields(def).enabled ~= false
end

-- Where the watermark goes when `current` is replaced by `def`:
-- - in general, up to the change: the old definition's ticks were all dealt with up to its
--   next one, which is at or after its index entry's score (0 = not planned yet: unknown,
--   the mark stays);
-- - a paused definition owes nothing: up to the change;
-- - pausing: up to the change too, and what the old definition still owed (its index entry
--   due, its ticks after the mark not pushed: an outage, stopped invokers) is recorded as
--   missed ("paused"), for a backfill; nothing is lost, and the paused period never pushed.
local function cut_mark(name, due_key, current, def)
  local mark, seen = read_mark(name)
  if not mark then return end  -- none, or garbled: the next invocation refuses it
  local score = tonumber(redis.call('ZSCORE', due_key, name))
  local cut
  if not enabled(current) then
    cut = now_ms - 1
  elseif not enabled(def) then
    cut = now_ms - 1
    if score and score <= now_ms and mark < cut then
      add_ranges(missed_key, name, {{mark, cut, 'paused'}})
    end
  elseif score and score > 0 then
    cut = math.min(now_ms, score) - 1
  end
  if cut and cut > mark then
    write_mark(name, cut, seen)
  end
end

local codes, owners = {}, {}
local pos = 1
while pos <= #body do
  -- Anchored at `pos` (Lua 5.1: a '^' pattern matches there only), without a substring.
  local op, k, source_length, expect, name_length, def_length, after =
    string.match(body, '^(%a+) (%d+) (%d+) (%S+) (%d+) (%d+)\n()', pos)
  pos = after
  local source = string.sub(body, pos, pos + source_length - 1)
  pos = pos + source_length
  local name = string.sub(body, pos, pos + name_length - 1)
  pos = pos + name_length
  local def = string.sub(body, pos, pos + def_length - 1)
  pos = pos + def_length
  local due_key = KEYS[FIRST_DUE + tonumber(k)]
  -- false when gone or over the limit (not read); `exists` tells which.
  local current, length = read_definition(defs_key, name)
  local big = length > MAX_DEFINITION_BYTES
  local exists = current or big
  local held = nil  -- another source's, for the ops that check ownership
  if current and (op == 'put' or op == 'update' or (op == 'del' and expect == '-')) then
    held = held_by_other(current, source, op == 'put')
  end
  local code = '+'
  if op ~= 'reject' and op ~= 'del' and #def > MAX_DEFINITION_BYTES then
    code = 'L'
  elseif op == 'reject' then
    local size = string.match(expect, '^big:(%d+)$')
    if expect == '-' then
      if exists then
        code = 'S'
      else
        forget(name, due_key)
      end
    elseif (size and big and length == tonumber(size))
        or (not size and current and redis.sha1hex(current) == expect) then
      redis.call('HSET', rejected_key, name, def)
      redis.call('ZREM', due_key, name)
    else
      code = 'S'
    end
  elseif op == 'del' then
    if not exists then
      code = 'M'
    elseif expect ~= '-' and redis.sha1hex(current) ~= expect then
      code = 'S'
    elseif held then
      code = 'O'
      owners[#owners + 1] = held
    else
      redis.call('HDEL', defs_key, name)
      forget(name, due_key)
    end
  else
    if op == 'add' and exists then
      code = 'E'
    elseif (op == 'update' or op == 'set') and not exists then
      code = 'M'
    elseif op == 'set' and (not current or redis.sha1hex(current) ~= expect) then
      code = 'S'
    elseif held then
      code = 'O'
      owners[#owners + 1] = held
    elseif current == def then
      code = '='
      if redis.call('HDEL', rejected_key, name) == 1 then
        redis.call('ZADD', due_key, 0, name)  -- set aside (by an older kiqbeat?): decide again
      else
        redis.call('ZADD', due_key, 'NX', 0, name)  -- an index entry lost is planned again
      end
      names_set(name, current)  -- a name index entry lost (or never made) is made
    else
      if exists then
        cut_mark(name, due_key, current, def)
      end
      redis.call('HSET', defs_key, name, def)
      redis.call('ZADD', due_key, 0, name)
      redis.call('HDEL', rejected_key, name)
      names_set(name, def)
    end
  end
  codes[#codes + 1] = code
end
names_flush()
if record and #owners == 0 then  -- with a refusal, the caller records what was applied
  redis.call('SET', document_key, ARGV[6])
  redis.call('HSET', documents_key, ARGV[4], ARGV[5])
end
return {table.concat(codes), owners}
