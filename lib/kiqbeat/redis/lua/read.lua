--[[
kiqbeat read script: stored definitions for the operator's reads (kiqbeat.store.Store), each
read only after its length is asked, in the same atomic step.

KEYS[1]  definitions hash (name -> definition JSON)
ARGV     the names

Returns {definitions, lengths, count}: for the first `count` names, its definition (nil
when gone or over MAX_DEFINITION_BYTES: not read) and its length in bytes (HSTRLEN: 0 when
gone); `count` stops where the definitions read would pass MAX_BATCH_DEFINITION_BYTES (at
least one name): the caller asks again for the rest. Cost: one HSTRLEN per name and one
HMGET, whatever the size of any one definition.
]]

local err = expect_type(KEYS[1], 'hash')
if err then return err end
local defs, lengths, count = read_definitions(KEYS[1], ARGV, MAX_BATCH_DEFINITION_BYTES)
return {defs, lengths, count}
