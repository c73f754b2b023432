--[[
bench/codec.py's measurement (issue 28, item 3: "one codec"): inside Redis, what reading a
push request costs per job, and a progress record per schedule, in kiqbeat's hand codec
(struct frames, frames.lua; the record's head, progress.lua) beside cmsgpack (Redis' own
msgpack). KEYS: none. ARGV[1] groups per request (one job of 330 bytes each), ARGV[2]
rounds. Returns lines of figures (microseconds from TIME around each loop); asserts nothing.
]]
local N, ITER = tonumber(ARGV[1]), tonumber(ARGV[2])
local job = string.rep('x', 330)
local sha = string.rep('a', 40)
-- struct body (frames.lua's GROUP_FORMAT, one job each)
local parts = {struct.pack('>H', 12)}
local mp = {}
for i = 1, N do
  local name = 'schedule-' .. string.format('%07d', i)
  parts[#parts + 1] = struct.pack('>Hc0c40ddBddHdBI4', #name, name, sha, 1.7e12, 1.7e12 + 60000, 0, 0, 0, 1, 0, 0, 0)
  parts[#parts + 1] = struct.pack('>I4', 1) .. struct.pack('>ddI4', 1.7e12, 0, #job) .. job
  mp[i] = {name, sha, 1.7e12, 1.7e12 + 60000, 0, 0, 0, 1, 0, 0, {}, {{1.7e12, 0, job}}}
end
local sbody = table.concat(parts)
local mbody = cmsgpack.pack(mp)
local function t() local x = redis.call('TIME'); return x[1] * 1e6 + x[2] end
local a = t()
for _ = 1, ITER do
  local pos = 3
  local u = struct.unpack
  while pos <= #sbody do
    local name, s, m, nx, new, mi, sk, q, l, o, r
    name, s, m, nx, new, mi, sk, q, l, o, r, pos = u('>Hc0c40ddBddHdBI4', sbody, pos)
    local n; n, pos = u('>I4', sbody, pos)
    local tick, rel, len; tick, rel, len, pos = u('>ddI4', sbody, pos)
    local json = string.sub(sbody, pos, pos + len - 1)
    pos = pos + len
  end
end
local b = t()
for _ = 1, ITER do
  local groups = cmsgpack.unpack(mbody)
  for i = 1, #groups do local g = groups[i]; local json = g[12][1][3] end
end
local c = t()
-- records: a mark, first-seen and 10 history entries
local rec_struct = struct.pack('>I6', 1.7e12) .. string.char(0x80, 0x01) .. string.char(0x00, 0x0a) .. string.rep(string.char(0x22, 0x1e), 10)
local rec_mp = cmsgpack.pack({1.7e12, 120, 0, {2, 30, 2, 30, 2, 30, 2, 30, 2, 30, 2, 30, 2, 30, 2, 30, 2, 30, 2, 30}})
local d = t()
for _ = 1, ITER * N do
  local mark = struct.unpack('>I6', rec_struct)
  local b1, b2 = string.byte(rec_struct, 7, 8)
end
local e = t()
for _ = 1, ITER * N do
  local r = cmsgpack.unpack(rec_mp)
end
local f = t()
for _ = 1, ITER * N do
  local r = cmsgpack.pack({1.7e12, 120, 0, {2, 30, 2, 30, 2, 30, 2, 30, 2, 30, 2, 30, 2, 30, 2, 30, 2, 30, 2, 30}})
end
local g = t()
return {string.format('frames struct %.3f us/job', (b - a) / ITER / N), string.format('frames cmsgpack %.3f us/job', (c - b) / ITER / N),
  string.format('record head struct %.3f us', (e - d) / ITER / N), string.format('record cmsgpack unpack %.3f us', (f - e) / ITER / N),
  string.format('record cmsgpack pack %.3f us', (g - f) / ITER / N), 'bytes struct ' .. #sbody .. ' msgpack ' .. #mbody, 'record bytes struct ' .. #rec_struct .. ' msgpack ' .. #rec_mp}
