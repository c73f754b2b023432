-- kiqbeat's name index, put before the scripts that write or read it (scripts.py: write.lua,
-- index.lua; redis/names.py reads it), kept by the writers in the same atomic step as the definition:
--   kiqbeat:name_ranges        sorted set, every score 0: the lower bound of each of the
--                              index's buckets (a name; "" for the first)
--   kiqbeat:name_ranges:BOUND  sorted set, every score 0 (a bucket): one member per indexed
--                              name from BOUND up to the next bound, NAME "\0" FACETS, where
--                              FACETS (what the console filters by) is ENABLED ("0" or "1"),
--                              QUEUE, "\0", SOURCE ("" for the API's and other languages'),
--                              or "?" when the definition is not read (over the limit) or is
--                              not a JSON object with string "queue"/"source" (set aside)
--   kiqbeat:names              sorted set: names a plain Redis writer added, changed or
--                              removed (docs/store.md's protocol), not indexed since: their
--                              facets are unknown until a call below meets them again
--   kiqbeat:disabled           set: the names whose facets say "enabled": false (SCARD)
-- A bucket holds at most NAMES_BUCKET members, so Redis keeps it a compact listpack (under
-- zset-max-listpack-entries, 128 by default; a member over zset-max-listpack-value, 64
-- bytes, only costs more memory); a fuller one is written again as halves, an empty one
-- goes (but the first). Every order here is Redis' own (byte order, ZRANGEBYLEX): Lua's
-- string comparison follows the server's locale, and is never used.
-- A name's membership of kiqbeat:disabled is set from its facets whenever they are, so any
-- sequence of these calls, in any order and repeated, leaves the index equal to the
-- definitions they met (the index's build is idempotent and runs beside writers).

local NAMES = {met = {}, left = {}}
local NAMES_BUCKET, NAMES_FILL = 120, 96

-- The bucket whose lower bound is `bound` (the one documented derivation of its key).
local function names_bucket(bound)
  return NAMES.ranges .. ':' .. bound
end

-- The name of an index member (before its first "\0").
local function names_member_name(member)
  local at = string.find(member, '\0', 1, true)
  return at and string.sub(member, 1, at - 1) or member
end

-- The bound of the bucket that holds `name` ("" below every other bound, or with none).
local function names_bound(name)
  return redis.call('ZREVRANGEBYLEX', NAMES.ranges, '[' .. name, '-', 'LIMIT', 0, 1)[1] or ''
end

-- The keys the calls below write (the calling script's KEYS; the buckets are derived from
-- the ranges' key), type-checked and, on Redis 7, permission-checked before any write
-- (expect_type, expect_allowed: checks.lua).
local function names_use(pending_key, ranges_key, disabled_key)
  NAMES.pending, NAMES.ranges, NAMES.disabled = pending_key, ranges_key, disabled_key
  local err = expect_type(pending_key, 'zset') or expect_type(ranges_key, 'zset')
    or expect_type(disabled_key, 'set')
  if err then return err end
  local bucket = names_bucket('')
  local checks = {{'ZREM', pending_key, 'n'}, {'ZADD', ranges_key, '0', 'n'},
    {'ZREM', ranges_key, 'n'}, {'ZREVRANGEBYLEX', ranges_key, '+', '-'},
    {'ZADD', bucket, '0', 'n'}, {'ZREM', bucket, 'n'}, {'ZRANGEBYLEX', bucket, '-', '+'},
    {'ZRANGE', bucket, '0', '-1'}, {'ZCARD', bucket}, {'DEL', bucket},
    {'SADD', disabled_key, 'n'}, {'SREM', disabled_key, 'n'}}
  for _, c in ipairs(checks) do
    err = expect_allowed(unpack(c))
    if err then return err end
  end
  return nil
end

-- The facets of a definition as stored (false: over the limit, not read).
local function facets_of(def)
  local value = definition_fields(def)
  if not value then return '?' end
  local queue, source = value.queue, value.source
  if queue == nil then queue = 'default' end
  if source == nil then source = '' end
  if type(queue) ~= 'string' or type(source) ~= 'string'
    or string.find(queue, '\0', 1, true) then
    return '?'
  end
  return (value.enabled == false and '0' or '1') .. queue .. '\0' .. source
end

-- What this call leaves each name it met as, applied by `names_flush` a bucket at a time:
-- NAMES.met the names in the order first met, NAMES.left[name] its facets, or false
-- when it has no definition any more. Only the last state of a name counts, as it would
-- with one command each, and the calling script reads none of these keys meanwhile.

-- `name` is stored with definition `def` (false: over the limit, not read).
local function names_set(name, def)
  if NAMES.left[name] == nil then NAMES.met[#NAMES.met + 1] = name end
  NAMES.left[name] = facets_of(def)
end

-- `name` has no definition any more.
local function names_forget(name)
  if NAMES.left[name] == nil then NAMES.met[#NAMES.met + 1] = name end
  NAMES.left[name] = false
end

-- Write bucket `bound`'s members again as fresh buckets of NAMES_FILL each, the last one
-- the rest (a fresh key is a listpack again; names added in order, as an import adds them,
-- leave buckets 80 % full): the first keeps `bound`, each other is bounded by the name of its
-- first member. Members come in Redis' order; a score not 0 (written by hand) is 0 again.
local function names_split(bound, key)
  local members = redis.call('ZRANGE', key, 0, -1)
  redis.call('DEL', key)
  local size = NAMES_FILL
  for first = 1, #members, size do
    local part_bound = first == 1 and bound or names_member_name(members[first])
    local scored = {}
    for i = first, math.min(first + size - 1, #members) do
      scored[#scored + 1], scored[#scored + 2] = 0, members[i]
    end
    redis.call('ZADD', NAMES.ranges, 0, part_bound)
    flush('ZADD', names_bucket(part_bound), scored)
  end
end

-- Bring the names of one bucket to what this call leaves them as.
local function names_apply(bound, names)
  local key = names_bucket(bound)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= 'zset' then
    redis.call('DEL', key)  -- written by hand: its names are listed again after a reindex
  end
  local old, new = {}, {}
  for _, name in ipairs(names) do
    local held = NAMES.left[name] and name .. '\0' .. NAMES.left[name]
    local found = redis.call('ZRANGEBYLEX', key, '[' .. name .. '\0', '(' .. name .. '\1')
    if not (held and #found == 1 and found[1] == held) then
      for _, member in ipairs(found) do old[#old + 1] = member end
      if held then new[#new + 1], new[#new + 2] = 0, held end
    end
  end
  flush('ZREM', key, old)
  if #new > 0 then
    redis.call('ZADD', NAMES.ranges, 0, bound)
    flush('ZADD', key, new)
  end
  local size = redis.call('ZCARD', key)
  if size > NAMES_BUCKET then
    names_split(bound, key)
  elseif size == 0 and bound ~= '' then
    redis.call('ZREM', NAMES.ranges, bound)
  end
end

-- Apply what `names_set` and `names_forget` recorded (the calling script's last step): each
-- name's member written whatever it was (the same member changes nothing), its plain
-- writer's mark taken out, the disabled set following its facets.
local function names_flush()
  local buckets, order, met, disabled, enabled = {}, {}, {}, {}, {}
  for _, name in ipairs(NAMES.met) do
    local bound = names_bound(name)
    if not buckets[bound] then
      buckets[bound] = {}
      order[#order + 1] = bound
    end
    local names = buckets[bound]
    names[#names + 1] = name
    met[#met + 1] = name
    local held = NAMES.left[name]
    local into = held and string.sub(held, 1, 1) == '0' and disabled or enabled
    into[#into + 1] = name
  end
  for _, bound in ipairs(order) do
    names_apply(bound, buckets[bound])
  end
  flush('ZREM', NAMES.pending, met)
  flush('SADD', NAMES.disabled, disabled)
  flush('SREM', NAMES.disabled, enabled)
  NAMES.met, NAMES.left = {}, {}
end
