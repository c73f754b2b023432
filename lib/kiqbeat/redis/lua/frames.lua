--[[
kiqbeat's wire format, the Lua side: the one reader of the packed argument that the push,
backfill and run-now scripts take, and the one writer of the jobs they push. Put before
those scripts (scripts.py); redis/frames.py is the one Python encoder.

A packed argument is a flat run of FIELDS, each followed by one space:
  a number or a word: its text ("1700000000000 ", "window ", a SHA1);
  bytes (a name, a job's JSON): their length in bytes, a space, the bytes ("5 daily ").
Nothing else separates anything, so a reader takes a field with one plain `string.find`
for the space and one `string.sub`: no pattern, no captures, no table per group. A name
or a job may hold any byte (spaces, newlines, invalid UTF-8): its length says where it ends.

A request is a list of RECORDS (one per schedule: a push group, a backfill piece). Each
script's header names a record's fields in order. JOB FRAMES are the same everywhere:
  TICK RELEASE JOB: the tick (epoch ms; it names the jid, the watermark and the history
  line), where the job goes (RELEASE 0: into the record's queue now; RELEASE > 0: into the
  `schedule` sorted set, released by the worker at that instant, epoch ms — its own field,
  so a job may be released at another instant than its tick), and its JSON (bytes).

Adding a field: append it to the record's field list in redis/frames.py (the encoder) and
read it in the same position in the script's record reader, after the fields it has now;
both sides state the number of fields a record holds (the first field of a request), so a
library older than the encoder, or the other way round, is refused (KIQBEAT_FORMAT) instead
of misread.
]]

-- The field at `pos` of `body` as text, and where the next one starts.
local function field(body, pos)
  local stop = string.find(body, ' ', pos, true)
  return string.sub(body, pos, stop - 1), stop + 1
end

-- The number field at `pos`, and where the next one starts.
local function number(body, pos)
  local stop = string.find(body, ' ', pos, true)
  return tonumber(string.sub(body, pos, stop - 1)), stop + 1
end

-- The bytes field at `pos`: where its bytes start, their length, and where the next field
-- starts.
local function span(body, pos)
  local stop = string.find(body, ' ', pos, true)
  local length = tonumber(string.sub(body, pos, stop - 1))
  return stop + 1, length, stop + length + 2
end

-- The bytes field at `pos` as a string, and where the next field starts.
local function bytes(body, pos)
  local start, length, next_pos = span(body, pos)
  return string.sub(body, start, start + length - 1), next_pos
end

-- The request's first field, the number of fields its records hold, checked against what
-- this script reads (`fields`); where the records start, or an error reply.
local function expect_format(body, script, fields)
  local count, pos = number(body, 1)
  if count ~= fields then
    return nil, redis.error_reply('KIQBEAT_FORMAT the ' .. script .. ' script reads ' ..
      fields .. ' fields a record, the request holds ' .. tostring(count) ..
      ': kiqbeat and its scripts (or function library) are of different versions')
  end
  return pos
end

-- Jobs, read into flat arrays (one set per call, not per record): `jobs:read(body, pos, n)`
-- appends n job frames and returns where the next field starts; job j is then
-- ticks[j] (a number), tick_texts[j] (its digits), releases[j] (0: into the queue) and
-- starts[j]/lengths[j] (its JSON in `body`).
local function job_frames()
  local jobs = {ticks = {}, tick_texts = {}, releases = {}, starts = {}, lengths = {}, count = 0}
  function jobs:read(body, pos, n)
    local ticks, texts, releases = self.ticks, self.tick_texts, self.releases
    local starts, lengths = self.starts, self.lengths
    local j = self.count
    for _ = 1, n do
      j = j + 1
      local text
      text, pos = field(body, pos)
      texts[j], ticks[j] = text, tonumber(text)
      releases[j], pos = number(body, pos)
      starts[j], lengths[j], pos = span(body, pos)
    end
    self.count = j
    return pos
  end
  function jobs:json(body, j)
    local start = self.starts[j]
    return string.sub(body, start, start + self.lengths[j] - 1)
  end
  return jobs
end

-- Commands take many fields or values at once: BATCH per call (Lua's unpack has a limit).
local BATCH = 500

-- `command key values...` for every value, BATCH at a time.
local function flush(command, key, values)
  for first = 1, #values, BATCH do
    redis.call(command, key, unpack(values, first, math.min(first + BATCH - 1, #values)))
  end
end

-- Where jobs go: `out:add(k, release, json)` queues a job for queue k (KEYS[first_queue + k],
-- named ARGV[first_name + k - 1]) or, with a release instant, for the schedule set;
-- `out:write()` pushes them all: LPUSH per queue (in the order added) with the queue's SADD,
-- ZADD into the schedule set scored in epoch seconds.
local function destinations(first_queue, first_name, queues_key, sched_key)
  local out = {lists = {}, scheduled = {}}
  function out:add(k, release, json)
    if release > 0 then
      local scheduled = self.scheduled
      scheduled[#scheduled + 1] = string.format('%.3f', release / 1000)
      scheduled[#scheduled + 1] = json
    else
      local list = self.lists[k]
      if not list then
        list = {}
        self.lists[k] = list
      end
      list[#list + 1] = json
    end
  end
  function out:write()
    for k, list in pairs(self.lists) do
      flush('LPUSH', KEYS[first_queue + k], list)
      redis.call('SADD', queues_key, ARGV[first_name + k - 1])
    end
    flush('ZADD', sched_key, self.scheduled)
  end
  return out
end
