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
  NAMES.names, NAMES.facets_key, NAMES.disabled = names_key, facets_key, disabled_key
  local err = expect_type(names_key, 'zset') or expect_type(facets_key, 'hash')
    or expect_type(disabled_key, 'set')
  if err then return err end
  local checks = {{'ZADD', names_key, '0', 'n'}, {'ZREM', names_key, 'n'},
    {'HSET', facets_key, 'n', 'v'}, {'HDEL', facets_key, 'n'},
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
  if type(queue) ~= 'string' or type(source) ~= 'string' then return '?' end
  return cjson.encode({value.enabled == false and 0 or 1, queue, source})
end

-- What this call leaves each name it met as, applied by `names_flush` in a few commands
-- whatever the number of names (a command per name and key costs a script about 1 us more):
-- NAMES.met the names in the order first met, NAMES.left[name] its facets, or false
-- when it has no definition any more. Only the last state of a name counts, as it would
-- with one command each, and the calling script reads none of these keys meanwhile.
NAMES.met, NAMES.left = {}, {}

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

-- Apply what `names_set` and `names_forget` recorded (the calling script's last step): the
-- facets written whatever they were (the same value changes nothing), the disabled set
-- following them.
local function names_flush()
  local scored, facets, gone, disabled, enabled = {}, {}, {}, {}, {}
  for _, name in ipairs(NAMES.met) do
    local held = NAMES.left[name]
    if held then
      scored[#scored + 1], scored[#scored + 2] = 0, name
      facets[#facets + 1], facets[#facets + 2] = name, held
      local into = string.sub(held, 1, 3) == '[0,' and disabled or enabled
      into[#into + 1] = name
    else
      gone[#gone + 1] = name
      enabled[#enabled + 1] = name
    end
  end
  flush('ZADD', NAMES.names, scored)
  flush('HSET', NAMES.facets_key, facets)
  flush('SADD', NAMES.disabled, disabled)
  flush('SREM', NAMES.disabled, enabled)
  flush('ZREM', NAMES.names, gone)
  flush('HDEL', NAMES.facets_key, gone)
  NAMES.met, NAMES.left = {}, {}
end
