-- kiqbeat index script: bring names to the name index (names.lua) as their definitions
-- stand, for a store written before the index existed or by plain Redis commands
-- (`kiqbeat schedules reindex`, the console's first start: redis/names.py).
--
-- KEYS[1]  definitions hash    KEYS[2]  the names plain writers marked    KEYS[3]  the
-- index's ranges (its buckets derived from it)    KEYS[4]  its disabled names
-- KEYS[5]  the mark that the index is built
-- ARGV[1]  "1" to record the index as built (KEYS[5] set to 1) after these names, "gone"
--   to only drop those of the names not stored (no definition read), else ""
-- ARGV[2..]  names: each one stored is indexed with its facets (a definition over the limit
--   is not read: "?"), each one not stored leaves the index
-- Returns the number of names indexed (stored ones).
-- Idempotent, and safe beside any writer: each name is judged in this one step.

local err = names_use(KEYS[2], KEYS[3], KEYS[4]) or expect_type(KEYS[1], 'hash')
  or expect_allowed('HSTRLEN', KEYS[1], 'n') or expect_allowed('HGET', KEYS[1], 'n')
  or expect_allowed('HEXISTS', KEYS[1], 'n')
if err then return err end
local indexed = 0
for i = 2, #ARGV do
  if ARGV[1] == 'gone' then
    if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then
      names_forget(ARGV[i])
    end
  else
    local def, length = read_definition(KEYS[1], ARGV[i])
    if length == 0 and not def then
      names_forget(ARGV[i])
    else
      names_set(ARGV[i], def)
      indexed = indexed + 1
    end
  end
end
names_flush()
if ARGV[1] == '1' then
  err = expect_type(KEYS[5], 'string') or expect_allowed('SET', KEYS[5], '1')
  if err then return err end
  redis.call('SET', KEYS[5], '1')
end
return indexed
