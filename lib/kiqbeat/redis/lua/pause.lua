--[[
kiqbeat pause script: write or delete one schedule's pause record (core/pause.py), atomically
with the check that the schedule exists and the watermark's move that goes with it.

KEYS[1]  definitions hash    KEYS[2]  paused hash (name -> pause record JSON)
KEYS[3]  the schedule's due index    KEYS[5]  missed hash
KEYS[4]  progress bucket 0 (kiqbeat:progress:0): its prefix names every bucket (progress.lua)
ARGV[1]  schedule name
ARGV[2]  the pause record to write; "" to resume (delete it)
ARGV[3]  the instant of the change, epoch ms (the caller's Redis clock read)

First, a record found (in force or ended) has its span passed over: the watermark moves up
to the earlier of its end and the change (ARGV[3] - 1), so nothing of an earlier pause is
ever pushed nor recorded. Then:
- pausing a schedule whose definition runs (not "enabled": false) and whose index entry
  is due records what it still owed (its ticks after the watermark, up to the change:
  stopped invokers) as missed ("paused"), for a backfill, and moves the watermark to the
  change, as pausing always did; the ticks of the pause are then passed over by planning;
- resuming deletes the record and sets the index entry to "plan me" (0; ZADD XX: an entry
  removed meanwhile stays removed), so the next invocation plans from the watermark.
The definition is never written: a document's next write of it leaves the pause in place.
Pausing a schedule not in the definitions hash writes nothing. Returns {code, previous}:
code "+" written or deleted, "M" no such schedule; previous the record it replaced or
deleted (false when none).
]]

local defs_key, paused_key, due_key = KEYS[1], KEYS[2], KEYS[3]
local bucket_key, missed_key = KEYS[4], KEYS[5]
local err = expect_type(defs_key, 'hash') or expect_type(paused_key, 'hash')
  or expect_type(due_key, 'zset') or expect_type(bucket_key, 'hash')
  or expect_type(missed_key, 'hash')
  or expect_allowed('HSTRLEN', defs_key, 'f') or expect_allowed('HMGET', defs_key, 'f')
  or expect_allowed('HGET', paused_key, 'f') or expect_allowed('HSET', paused_key, 'f', 'v')
  or expect_allowed('HDEL', paused_key, 'f') or expect_allowed('ZADD', due_key, 'XX', '0', 'f')
  or expect_allowed('ZSCORE', due_key, 'f') or expect_allowed('HGET', missed_key, 'f')
  or expect_allowed('HSET', missed_key, 'f', 'v')
use_state(bucket_key, 'kiqbeat:progress:0')
err = err or state_allowed()
if err then return err end

local name, record, now_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local cut = now_ms - 1
local def, length = read_definition(defs_key, name)
if record ~= '' and length == 0 then return {'M', redis.call('HGET', paused_key, name)} end

local previous = redis.call('HGET', paused_key, name)
local mark, seen, garbled_mark = read_mark(name)
if garbled_mark then return garbled_mark end
if previous and mark then  -- an earlier pause's span: passed over
  local ok, value = pcall(cjson.decode, previous)
  local through = ok and type(value) == 'table' and tonumber(value['until']) or cut
  mark = math.max(mark, math.min(cut, through))
  write_mark(name, mark, seen)
end

if record == '' then
  if previous then
    redis.call('HDEL', paused_key, name)
    redis.call('ZADD', due_key, 'XX', 0, name)
  end
  return {'+', previous}
end

local runs = (definition_fields(def) or {}).enabled ~= false  -- false: over the limit, runs
local score = tonumber(redis.call('ZSCORE', due_key, name))
if mark and mark < cut then
  if runs and score and score <= now_ms then
    add_ranges(missed_key, name, {{mark, cut, 'paused'}})
  end
  write_mark(name, cut, seen)
end
redis.call('HSET', paused_key, name, record)
return {'+', previous}
