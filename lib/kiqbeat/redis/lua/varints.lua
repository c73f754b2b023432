-- kiqbeat's record primitives, specified in docs/store.md "Encodings": varint, zigzag and the
-- span units, the one Lua writer and reader of them. Put before progress.lua and outcomes.lua
-- (scripts.py); core/varints.py is the Python side.

local UNITS_MS = {[0] = 1, 1000, 60000, 3600000}  -- a span's UNIT: ms, s, min, h

-- unit(D): the largest UNIT whose length divides span `d` (ms; 0 is 3, in hours).
local function unit_of(d)
  for u = 3, 1, -1 do
    if d % UNITS_MS[u] == 0 then return u end
  end
  return 0
end

-- A varint longer than this, or above MAX_VARINT_VALUE, is not one (a record written by hand):
-- every value kiqbeat writes fits, and a double holds it exactly.
local MAX_VARINT_BYTES = 8
local MAX_VARINT_VALUE = 2^53

local function varint(v)
  local char, floor = string.char, math.floor
  if v < 128 then return char(v) end
  if v < 16384 then return char(v % 128 + 128, floor(v / 128)) end
  if v < 34359738368 then  -- up to five bytes (a first-seen a year back) without a table
    local a, b = v % 128 + 128, floor(v / 128) % 128 + 128
    if v < 2097152 then return char(a, b, floor(v / 16384)) end
    local c = floor(v / 16384) % 128 + 128
    if v < 268435456 then return char(a, b, c, floor(v / 2097152)) end
    return char(a, b, c, floor(v / 2097152) % 128 + 128, floor(v / 268435456))
  end
  local bytes = {}
  while v >= 128 do
    bytes[#bytes + 1] = v % 128 + 128
    v = math.floor(v / 128)
  end
  bytes[#bytes + 1] = v
  return string.char(unpack(bytes))
end

-- The varint at `pos` of `s` and the position after it (nil when cut short, longer than
-- MAX_VARINT_BYTES or above MAX_VARINT_VALUE).
local function read_varint(s, pos)
  local b, b1, b2, b3 = string.byte(s, pos, pos + 3)
  if not b then return nil, pos end
  if b < 128 then return b, pos + 1 end  -- one byte, as most are
  -- Up to four bytes (a first-seen days back) from the one string.byte above.
  if b1 and b1 < 128 then return b - 128 + b1 * 128, pos + 2 end
  if b2 and b2 < 128 then return b - 128 + (b1 - 128) * 128 + b2 * 16384, pos + 3 end
  if b3 and b3 < 128 then
    return b - 128 + (b1 - 128) * 128 + (b2 - 128) * 16384 + b3 * 2097152, pos + 4
  end
  local v, scale = 0, 1
  for _ = 1, MAX_VARINT_BYTES do
    local c = string.byte(s, pos)
    if not c then return nil, pos end
    v = v + (c % 128) * scale
    pos = pos + 1
    if c < 128 then
      if v > MAX_VARINT_VALUE then return nil, pos end
      return v, pos
    end
    scale = scale * 128
  end
  return nil, pos
end

local function zigzag(v)
  return v >= 0 and 2 * v or -2 * v - 1
end

local function unzigzag(zz)
  return zz % 2 == 0 and zz / 2 or -(zz + 1) / 2
end
