--[[
kiqbeat prune script: forget schedules that left the configuration long enough ago.

KEYS[1]  watermarks hash    KEYS[2]  first-seen hash
ARGV[1]  threshold, epoch ms: a mark below it covers no tick any future invocation owes
         (it is older than the missed-jobs window plus the longest lookahead)
ARGV[2]  the configured schedule names, joined by "\n"

Removes, from both hashes, every schedule not configured whose mark is below the threshold;
returns how many. A younger mark is kept: re-adding that schedule soon continues from it.
]]

local keep = {}
for name in string.gmatch(ARGV[2], '[^\n]+') do
  keep[name] = true
end
local threshold = tonumber(ARGV[1])
local gone = {}
local all = redis.call('HGETALL', KEYS[1])
for k = 1, #all, 2 do
  local mark = tonumber(all[k + 1])
  if not keep[all[k]] and mark and mark < threshold then
    gone[#gone + 1] = all[k]
  end
end
for first = 1, #gone, 500 do
  local batch = {unpack(gone, first, math.min(first + 499, #gone))}
  redis.call('HDEL', KEYS[1], unpack(batch))
  redis.call('HDEL', KEYS[2], unpack(batch))
end
return #gone
