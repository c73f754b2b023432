-- kiqbeat's name index, put before the scripts that write it (scripts.py: write.lua,
-- index.lua; redis/names.py reads it), kept by the writers in the same atomic step as the
-- definition:
--   kiqbeat:name_ranges        sorted set, every score 0: the lower bound of each of the
--                              index's buckets (a name; "" for the first)
--   kiqbeat:name_ranges:BOUND  hash (a bucket): each indexed name from BOUND up to the next
--                              bound -> its FACETS, what the console filters by: ENABLED
--                              ("0" or "1"), QUEUE, "\0", SOURCE ("" for the API's and other
--                              languages'), or "?" when the definition is not read (over the
--                              limit) or is not a JSON object with string "queue"/"source"
--   kiqbeat:names              sorted set: names a plain Redis writer added, changed or
--                              removed (docs/store.md's protocol), not indexed since: their
--                              facets are unknown until a call below meets them again
--   kiqbeat:disabled           set: the names whose facets say "enabled": false (SCARD)
-- A bucket holds at most NAMES_BUCKET names, so Redis keeps it a compact listpack (under
-- hash-max-listpack-entries: 128 in the stock redis.conf; a name or facets over
-- hash-max-listpack-value, 64 bytes, only costs more memory); a fuller one is written again as buckets of NAMES_FILL,
-- an empty one goes (but the first). Every order here is Redis' own (byte order, as
-- ZRANGEBYLEX compares): Lua's string comparison follows the server's locale, and is never
-- used.
-- A name's membership of kiqbeat:disabled is set from its facets whenever they are, so any
-- sequence of these calls, in any order and repeated, leaves the index equal to the
-- definitions they met (the index's build is idempotent and runs beside writers).

local NAMES = {met = {}, left = {}, moved = {}}
local NAMES_BUCKET, NAMES_FILL = 120, 96

-- The bucket whose lower bound is `bound` (the one documented derivation of its key).
local function names_bucket(bound)
  return NAMES.ranges .. ':' .. bound
end

-- The bound of the bucket that holds `name` ("" below every other bound, or with none).
local function names_bound(name)
  return redis.call('ZREVRANGEBYLEX', NAMES.ranges, '[' .. name, '-', 'LIMIT', 0, 1)[1] or ''
end

-- Bucket `key`'s names, and each one's facets (HMGET a BATCH at a time: a bucket written by
-- hand may hold more than Lua unpacks at once).
local function names_read(key)
  local names, held = redis.call('HKEYS', key), {}
  for first = 1, #names, BATCH do
    local part = {unpack(names, first, math.min(first + BATCH - 1, #names))}
    local facets = redis.call('HMGET', key, unpack(part))
    for i, name in ipairs(part) do held[name] = facets[i] end
  end
  return names, held
end

-- Every lookup by name (ZREVRANGEBYLEX, ZRANGEBYLEX) needs every bound scored 0: a bound
-- scored otherwise (written by hand) sends the names past it to the wrong bucket and hides
-- hundreds of others from the console. Before a call looks anything up, such a bound goes,
-- and the names of its bucket are placed again with the call's (NAMES.moved: not met by
-- the call, so a plain writer's mark on one stays).
local function names_repair()
  for _, off in ipairs({{'-inf', '(0'}, {'(0', '+inf'}}) do
    for _, bound in ipairs(redis.call('ZRANGEBYSCORE', NAMES.ranges, off[1], off[2])) do
      redis.call('ZREM', NAMES.ranges, bound)
      local key = names_bucket(bound)
      if redis.call('TYPE', key)['ok'] == 'hash' then
        local names, held = names_read(key)
        for _, name in ipairs(names) do
          if NAMES.left[name] == nil then
            NAMES.met[#NAMES.met + 1], NAMES.left[name] = name, held[name]
            NAMES.moved[name] = true
          end
        end
      end
      redis.call('DEL', key)
    end
  end
end

-- The keys the calls below write (the calling script's KEYS; the buckets are derived from
-- the ranges' key), type-checked and, on Redis 7, permission-checked before any write
-- (expect_type, expect_allowed: checks.lua).
local function names_use(pending_key, ranges_key, disabled_key)
  NAMES.pending, NAMES.ranges, NAMES.disabled = pending_key, ranges_key, disabled_key
  local err = expect_type(pending_key, 'zset') or expect_type(ranges_key, 'zset')
    or expect_type(disabled_key, 'set')
  if err then return err end
  local bucket, sorting = names_bucket(''), ranges_key .. '\0'
  local checks = {{'ZREM', pending_key, 'n'}, {'ZADD', ranges_key, '0', 'n'},
    {'ZREM', ranges_key, 'n'}, {'ZREVRANGEBYLEX', ranges_key, '+', '-'},
    {'ZRANGEBYSCORE', ranges_key, '0', '0'},
    {'HSET', bucket, 'n', 'v'}, {'HDEL', bucket, 'n'}, {'HLEN', bucket},
    {'HKEYS', bucket}, {'HMGET', bucket, 'n'}, {'DEL', bucket}, {'ZADD', sorting, '0', 'n'},
    {'ZRANGE', sorting, '0', '-1'}, {'DEL', sorting},
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

-- Write bucket `bound` again as fresh buckets of NAMES_FILL names each, the last one the
-- rest (a fresh key is a listpack again; names added in order, as an import adds them,
-- leave buckets 80 % full): the first keeps `bound`, each other is bounded by its first
-- name. Redis orders the names (a sorted set, deleted at once).
local function names_split(bound, key)
  local names, held = names_read(key)
  local sorting = NAMES.ranges .. '\0'
  -- Last first: a bucket's names are mostly in order (a split writes them so, an import
  -- adds them so), and a small sorted set finds a member's place from its first member.
  local scored = {}
  for i = #names, 1, -1 do scored[#scored + 1], scored[#scored + 2] = 0, names[i] end
  redis.call('DEL', sorting)
  flush('ZADD', sorting, scored)
  names = redis.call('ZRANGE', sorting, 0, -1)
  redis.call('DEL', sorting, key)
  for first = 1, #names, NAMES_FILL do
    local part_bound = first == 1 and bound or names[first]
    local fields = {}
    for i = first, math.min(first + NAMES_FILL - 1, #names) do
      fields[#fields + 1], fields[#fields + 2] = names[i], held[names[i]]
    end
    redis.call('ZADD', NAMES.ranges, 0, part_bound)
    flush('HSET', names_bucket(part_bound), fields)
  end
end

-- Bring the names of one bucket to what this call leaves them as.
local function names_apply(bound, names)
  local key = names_bucket(bound)
  local set, gone = {}, {}
  for _, name in ipairs(names) do
    local held = NAMES.left[name]
    if held then
      set[#set + 1], set[#set + 2] = name, held
    else
      gone[#gone + 1] = name
    end
  end
  local size = redis.pcall('HLEN', key)
  if type(size) == 'table' then  -- refused: not a hash (written by hand), or another cause
    if not string.find(tostring(size.err), 'WRONGTYPE', 1, true) then
      redis.call('HLEN', key)  -- the refusal, raised
    end
    redis.call('DEL', key)  -- its names come back by a reindex
  end
  flush('HDEL', key, gone)
  if #set > 0 then
    if bound == '' then
      redis.call('ZADD', NAMES.ranges, 0, bound)  -- the first bucket is always there
    end
    flush('HSET', key, set)
  end
  size = redis.call('HLEN', key)
  if size > NAMES_BUCKET then
    names_split(bound, key)
  elseif size == 0 and bound ~= '' then
    redis.call('ZREM', NAMES.ranges, bound)
  end
end

-- Apply what `names_set` and `names_forget` recorded (the calling script's last step): each
-- name's facets written whatever they were (the same value changes nothing), its plain
-- writer's mark taken out, the disabled set following its facets.
local function names_flush()
  names_repair()
  local buckets, order, met, disabled, enabled = {}, {}, {}, {}, {}
  for _, name in ipairs(NAMES.met) do
    local bound = names_bound(name)
    if not buckets[bound] then
      buckets[bound] = {}
      order[#order + 1] = bound
    end
    local names = buckets[bound]
    names[#names + 1] = name
    if not NAMES.moved[name] then met[#met + 1] = name end
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
  NAMES.met, NAMES.left, NAMES.moved = {}, {}, {}
end
