--[[
kiqbeat trigger script: push one job of a schedule now ("run now"), and remember it.

KEYS[1]  definitions hash    KEYS[3]  queues set
KEYS[2]  progress bucket 0 (kiqbeat:progress:0): its prefix names every bucket (progress.lua)
KEYS[4]  the queue list      KEYS[5]  manual hash (name -> jid of its last manual run)
ARGV[1]  schedule name       ARGV[2]  SHA1 of the definition the job was built from
ARGV[3]  H, how many pushes the history keeps (never fewer than it holds)    ARGV[4]  queue name
ARGV[5]  the job's jid       ARGV[6]  the job's instant, epoch ms    ARGV[7]  job JSON
(built by redis/frames.py `manual_run`, the one encoder of every push request)

Pushed only while the definition is the one the job was built from, and only once: the
call re-sent after a lost reply (redis-py retries) finds its jid as the schedule's last
manual run's. The job goes into the history as "m TICK DELAY JID" (a manual job's jid is
not derived from its instant, so it is kept). Returns 1 when pushed, 2 when this jid was
pushed already, 0 when the definition changed or went meanwhile (one swapped for a
definition over MAX_DEFINITION_BYTES has changed, and is not read).
]]

local defs_key, bucket_key, queues_key, queue_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local manual_key = KEYS[5]
local err = expect_type(defs_key, 'hash') or expect_type(bucket_key, 'hash')
  or expect_type(queues_key, 'set') or expect_type(queue_key, 'list')
  or expect_type(manual_key, 'hash') or expect_allowed('HGET', manual_key, 'f')
  or expect_allowed('HSET', manual_key, 'f', 'j')
  or expect_allowed('HSTRLEN', defs_key, 'f') or expect_allowed('HGET', defs_key, 'f')
  or expect_allowed('SADD', queues_key, 'q') or expect_allowed('LPUSH', queue_key, 'job')
use_state(bucket_key, 'kiqbeat:progress:0')
err = err or state_allowed()
if err then return err end

if redis.call('HGET', manual_key, ARGV[1]) == ARGV[5] then return 2 end
local def = read_definition(defs_key, ARGV[1])  -- false when over the limit: changed
if not def or redis.sha1hex(def) ~= ARGV[2] then return 0 end
local keep = tonumber(ARGV[3])
local mark, seen, newest, tail, bad
if keep > 0 then mark, seen, newest, tail, bad = read_state_parts(ARGV[1]) end
if bad then return bad end
redis.call('HSET', manual_key, ARGV[1], ARGV[5])
redis.call('LPUSH', queue_key, ARGV[7])
redis.call('SADD', queues_key, ARGV[4])
if keep > 0 then
  write_state_parts(ARGV[1], mark, seen, remembered_parts(newest, tail,
    {pushed_line('m', tonumber(ARGV[6]), clock_ms(), ARGV[5])}, 1, keep, true))
end
return 1
