-- kiqbeat's name index, put before the scripts that write or remove definitions
-- (scripts.py: write.lua, index.lua), kept in the same atomic step as the definition:
--   kiqbeat:names   sorted set, every score 0: every stored name (the console's prefix
--                   search and paging, ZRANGEBYLEX)
--   kiqbeat:facets  hash: name -> what the console filters by, JSON [ENABLED, QUEUE,
--                   SOURCE] (ENABLED 0 or 1; SOURCE "" for the API's and other languages'),
--                   or "?" when the definition is not read (over the limit) or is not a
--                   JSON object with string "queue"/"source" (set aside by an invocation)
--   kiqbeat:disabled  set: the names whose facets say "enabled": false (SCARD: the count)
-- A name's membership of kiqbeat:disabled is set from its facets whenever they are, so any
-- sequence of these calls, in any order and repeated, leaves the set equal to the facets
-- held (the index's build is idempotent and runs beside writers; a plain Redis writer
-- that drops a name's facets only makes the next call that meets it derive them again).

local NAMES = {}

-- The keys the calls below write (the calling script's KEYS), type-checked and, on Redis 7,
-- permission-checked before any write (expect_type, expect_allowed: checks.lua).
local function names_use(names_key, facets_key, disabled_key)
  NAMES.names, NAMES.facets, NAMES.disabled = names_key, facets_key, disabled_key
  local err = expect_type(names_key, 'zset') or expect_type(facets_key, 'hash')
    or expect_type(disabled_key, 'set')
  if err then return err end
  local checks = {{'ZADD', names_key, '0', 'n'}, {'ZREM', names_key, 'n'},
    {'HGET', facets_key, 'n'}, {'HSET', facets_key, 'n', 'v'}, {'HDEL', facets_key, 'n'},
    {'SADD', disabled_key, 'n'}, {'SREM', disabled_key, 'n'}}
  for _, c in ipairs(checks) do
    err = expect_allowed(unpack(c))
    if err then return err end
  end
  return nil
end

-- The facets of a definition as stored (false: over the limit, not read).
local function facets_of(def)
  if type(def) ~= 'string' then return '?' end
  local ok, value = pcall(cjson.decode, def)
  if not ok or type(value) ~= 'table' then return '?' end
  local queue, source = value.queue, value.source
  if queue == nil then queue = 'default' end
  if source == nil then source = '' end
  if type(queue) ~= 'string' or type(source) ~= 'string' then return '?' end
  return cjson.encode({value.enabled == false and 0 or 1, queue, source})
end

-- `name` is stored with definition `def` (false: over the limit, not read).
local function names_set(name, def)
  redis.call('ZADD', NAMES.names, 0, name)
  local old = redis.call('HGET', NAMES.facets, name)
  local new = facets_of(def)
  if old ~= new then
    redis.call('HSET', NAMES.facets, name, new)
  end
  if string.sub(new, 1, 3) == '[0,' then
    redis.call('SADD', NAMES.disabled, name)
  elseif not old or string.sub(old, 1, 3) == '[0,' then
    redis.call('SREM', NAMES.disabled, name)
  end
end

-- `name` has no definition any more.
local function names_forget(name)
  redis.call('ZREM', NAMES.names, name)
  redis.call('HDEL', NAMES.facets, name)
  redis.call('SREM', NAMES.disabled, name)
end
