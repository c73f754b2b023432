-- kiqbeat's reader of stored definitions, put before the scripts that read them
-- (scripts.py). A definition over MAX_DEFINITION_BYTES (core/limits.py, written before
-- every script) is never read whole: its length is asked first (HSTRLEN, O(1)), so one
-- huge value costs a script no more than a small one, and is never transferred.

-- The definitions of `names` in hash `key`, their lengths in bytes (HSTRLEN: 0 when gone),
-- and how many of the names were read: those up to where the definitions read would pass
-- `budget` bytes (at least one). A definition over the limit, or gone, is false (its
-- length tells which).
local function read_definitions(key, names, budget)
  local lengths, fitting, carried, count = {}, {}, 0, #names
  for j = 1, #names do
    local length = redis.call('HSTRLEN', key, names[j])
    if length <= MAX_DEFINITION_BYTES then
      if j > 1 and carried + length > budget then
        count = j - 1
        break
      end
      carried = carried + length
      fitting[#fitting + 1] = names[j]
    end
    lengths[j] = length
  end
  local read = #fitting > 0 and redis.call('HMGET', key, unpack(fitting)) or {}
  local defs, k = {}, 0
  for j = 1, count do
    if lengths[j] <= MAX_DEFINITION_BYTES then
      k = k + 1
      defs[j] = read[k]
    else
      defs[j] = false
    end
  end
  return defs, lengths, count
end

-- A definition's JSON decoded (nil: not read, as over the limit, not JSON, or not an
-- object or array), kept for the last one asked: write.lua (its source and "enabled"),
-- pause.lua ("enabled") and the name index's facets (names.lua) share one decode of each
-- definition, and Lua's strings are interned, so asking again is a pointer comparison.
local DECODED = {}
local function definition_fields(def)
  if type(def) ~= 'string' then return nil end
  if DECODED.def ~= def then
    local ok, value = pcall(cjson.decode, def)
    DECODED.def, DECODED.value = def, ok and type(value) == 'table' and value or nil
  end
  return DECODED.value
end

-- One stored definition, or false when it is gone or over the limit, and its length (as
-- `read_definitions` gives them, without its tables: write.lua calls it once per operation).
local function read_definition(key, name)
  local length = redis.call('HSTRLEN', key, name)
  if length > MAX_DEFINITION_BYTES then
    return false, length
  end
  return redis.call('HGET', key, name), length
end
