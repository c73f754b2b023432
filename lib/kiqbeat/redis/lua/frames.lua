--[[
kiqbeat's wire format, the Lua side: the one reader of the packed argument that the push and
backfill scripts take, and the one writer of the jobs they push. Put before those scripts
(scripts.py); redis/frames.py is the one Python encoder. The format (REQUEST, the records,
JOB) is specified once, in docs/store.md "Encodings"; each script's header names its fields.
Adding a field: docs/store.md says where (both sides at once, FIELDS up by one).
]]

-- The request's first field, the number of fields its records hold, checked against what
-- this script reads (`fields`); where the records start, or an error reply.
local function expect_format(body, script, fields)
  local ok, count, pos = pcall(struct.unpack, '>H', body, 1)
  if not ok or count ~= fields then
    return nil, redis.error_reply('KIQBEAT_FORMAT the ' .. script .. ' script reads ' ..
      fields .. ' fields a record, the request holds ' .. tostring(ok and count or '?') ..
      ': kiqbeat and its scripts (or function library) are of different versions')
  end
  return pos
end

-- The records' fixed parts (docs/store.md "Encodings"), the one place Lua names them:
-- push.lua reads a GROUP (then R RANGEs, N and N jobs), backfill.lua a PIECE (then N and
-- N jobs); a job frame's fixed part is TICK, RELEASE, the JSON's length (its bytes follow).
local GROUP_FORMAT = '>Hc0c40dddddHdBI4'
local RANGE_FORMAT = '>ddBc0d'
local PIECE_FORMAT = '>Hc0c40ddHdBI4'
local JOB_FORMAT = '>ddI4'

-- Jobs, read into flat arrays (one set per call, not per record): `jobs:read(body, pos, n)`
-- appends n job frames and returns where the next field starts; job j is then
-- ticks[j] (epoch ms), releases[j] (0: into the queue) and starts[j]/lengths[j] (its JSON
-- in `body`). A script sets pushed[j] = true for each job it pushes; `jobs:flags()` is the
-- reply's flags: one character per job in argument order, "1" pushed, "0" not.
local function job_frames()
  local jobs = {ticks = {}, releases = {}, starts = {}, lengths = {}, pushed = {}, count = 0}
  function jobs:read(body, pos, n)
    local ticks, releases = self.ticks, self.releases
    local starts, lengths = self.starts, self.lengths
    local unpack_struct = struct.unpack
    local j = self.count
    for _ = 1, n do
      j = j + 1
      local length
      ticks[j], releases[j], length, pos = unpack_struct(JOB_FORMAT, body, pos)
      starts[j], lengths[j] = pos, length
      pos = pos + length
    end
    -- A JSON whose bytes end early (only the last can: any field after it would fail to
    -- unpack) is a request cut short, refused as struct refuses the rest.
    if pos > #body + 1 then error('a job frame cut short') end
    self.count = j
    return pos
  end
  function jobs:json(body, j)
    local start = self.starts[j]
    return string.sub(body, start, start + self.lengths[j] - 1)
  end
  function jobs:flags()
    local flags, pushed = {}, self.pushed
    for j = 1, self.count do flags[j] = pushed[j] and '1' or '0' end
    return table.concat(flags)
  end
  return jobs
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
