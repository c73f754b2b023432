--[[
kiqbeat due script: the Redis clock and one batch of the schedules due for planning.

KEYS[1]  due index (sorted set: name -> epoch ms it next needs planning; 0 = "plan me")
KEYS[2]  definitions hash (name -> definition JSON)
KEYS[3]  progress bucket 0 (kiqbeat:progress:0): its prefix names every bucket, each name's
  derived by progress.lua's `state_key_of`
KEYS[4]  paused hash (name -> pause record JSON: core/pause.py)
ARGV[1]  plan up to this instant, epoch ms; "" for the Redis clock
ARGV[2]  offset into the due entries   ARGV[3]  at most this many (a batch)

Returns {seconds, microseconds, sizes, bytes, more, next}: TIME's two numbers, then the
entries scored at or below the instant (lowest first) as two strings that Python reads with
one struct.iter_unpack and slices (redis/due.py `read_due`, the one reader), not as
thousands of bulk strings: `sizes` holds one SIZES_FORMAT record per entry (24 bytes,
big-endian): the name's length (I4), the definition's length as read (i4; -1 when not read:
gone, or over MAX_DEFINITION_BYTES), its length in bytes (I4; HSTRLEN, asked before
anything is read: 0 when gone), the mark (d, epoch ms: exact, every mark is a whole number
below 2^53; -1 when none, -2 when garbled), the pause record's length (i4; -1 when none); `bytes` is, per
entry, its name, definition and pause record, those lengths' bytes one after the other.
`more` is 1 when due entries may follow this batch (it holds ARGV[3] names, or was cut short
once the definitions it carries passed MAX_BATCH_DEFINITION_BYTES), 0 when there are none;
`next` is the lowest score above the instant, as Redis writes it ("" when none): when the
index next comes due (`kiqbeat run` sleeps until then). Cost: two range reads, one HSTRLEN
per name, one HMGET of definitions, one HLEN of the paused hash (and an HMGET of pauses
when it holds any) and one HGET per name's progress record,
whatever the size of the store or of any one definition. A progress record that is not one
(a mark that is not a whole number, written by hand) gives the mark -2: the engine sets that
schedule aside, naming the key; the others are read as usual.
]]

local clock = redis_clock()
local err = expect_type(KEYS[1], 'zset') or expect_type(KEYS[2], 'hash')
  or expect_type(KEYS[3], 'hash') or expect_type(KEYS[4], 'hash')
if err then return err end
local upto = ARGV[1]
if upto == '' then
  upto = ms_text(clock_ms(clock))
end
local names = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', upto, 'LIMIT', ARGV[2], ARGV[3])
local after = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. upto, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
local next_due = after[2] or ''
if #names == 0 then
  return {clock[1], clock[2], '', '', 0, next_due}
end
local more = #names == tonumber(ARGV[3]) and 1 or 0
local defs, lengths, count = read_definitions(KEYS[2], names, MAX_BATCH_DEFINITION_BYTES)
if count < #names then  -- cut short: the rest are read by the next call
  names = {unpack(names, 1, count)}
  more = 1
end
use_state(KEYS[3], 'kiqbeat:progress:0')
-- Pause records: none to read when the hash is empty, as it mostly is.
local pauses = redis.call('HLEN', KEYS[4]) > 0 and redis.call('HMGET', KEYS[4], unpack(names))
  or {}
-- One entry's sizes (redis/due.py SIZES, the same format).
local SIZES_FORMAT = '>IiIdi'
local pack = struct.pack
local sizes, parts = {}, {}
for j = 1, #names do
  local mark, _, bad = read_mark(names[j])
  if bad then
    -- A record that is not one (written by hand) costs only its schedule: -2 tells the
    -- engine to set it aside (redis/due.py GARBLED_MARK); any other error stops the read.
    if not garbled_reason(bad) then return bad end
    mark = -2
  end
  local name, def, pause = names[j], defs[j], pauses[j]
  sizes[j] = pack(SIZES_FORMAT, #name, def and #def or -1, lengths[j], mark or -1,
    pause and #pause or -1)
  parts[#parts + 1] = name
  if def then parts[#parts + 1] = def end
  if pause then parts[#parts + 1] = pause end
end
return {clock[1], clock[2], table.concat(sizes), table.concat(parts), more, next_due}
