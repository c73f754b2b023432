-- kiqbeat's outcome records (NS kiqbeat:outcomes:B), specified in docs/store.md "Encodings":
-- `decode_outcomes` the one Lua reader, `encode_outcomes` the one writer. Put before the fold
-- and incidents scripts, after varints.lua (scripts.py); core/outcomes.py is the Python reader.

local MAX_FIELD = 2^48  -- no field of a record is larger
local LAST_TICK = 253370764800000  -- 9999-01-01T00:00:00Z in ms: no tick from then on

-- A field's varint; a Lua error for a value no record holds (the fold runs under pcall).
local function outcome_field(v)
  if v ~= v or v < 0 or v > MAX_FIELD then error('not a record field: ' .. tostring(v)) end
  return varint(v)
end

-- The field at pos and the position after it; nil when cut short, longer than 7 bytes or
-- above MAX_FIELD (not a record).
local function read_field(s, pos)
  local v, after = read_varint(s, pos)
  if not v or after - pos > 7 or v > MAX_FIELD then return nil, after end
  return v, after
end

local function span(d)
  local u = unit_of(d)
  return (d / UNITS_MS[u]) * 4 + u
end

local function unspan(v)
  local u = v % 4
  return math.floor(v / 4) * UNITS_MS[u]
end

-- The record as a table: {ls = last success tick or nil, beyond = n, entries = {...}}, each
-- entry {t, state, manual, a, v}, newest first. nil when garbled (a fresh record then).
local function decode_outcomes(raw)
  if not raw or #raw < 9 then return nil end
  local newest = struct.unpack('>I6', raw)
  if newest >= LAST_TICK then return nil end
  local pos, ls, beyond, count = 7
  ls, pos = read_field(raw, pos)
  if not ls then return nil end
  beyond, pos = read_field(raw, pos)
  if not beyond then return nil end
  count, pos = read_field(raw, pos)
  if not count or count > MAX_HISTORY then return nil end  -- more than a record keeps
  local rec = {ls = ls > 0 and newest - unspan(ls - 1) or nil, beyond = beyond,
               entries = {}}
  if rec.ls and rec.ls < 0 then return nil end
  local t = newest
  for i = 1, count do
    local head, a, v
    head, pos = read_field(raw, pos)
    if not head then return nil end
    a, pos = read_field(raw, pos)
    if not a then return nil end
    v, pos = read_field(raw, pos)
    if not v then return nil end
    local u = math.floor(head / 8) % 4
    t = t - math.floor(head / 32) * UNITS_MS[u]
    if t < 0 or t + v >= LAST_TICK then return nil end  -- a start is an instant too
    rec.entries[i] = {t = t, state = head % 4, manual = math.floor(head / 4) % 2, a = a, v = v}
  end
  return rec
end

local function encode_outcomes(rec)
  local entries = rec.entries
  if #entries == 0 then return nil end
  local newest = entries[1].t
  local parts = {struct.pack('>I6', newest), outcome_field(rec.ls and 1 + span(newest - rec.ls)
    or 0), outcome_field(rec.beyond), outcome_field(#entries)}
  local previous = newest
  for _, e in ipairs(entries) do
    local d = previous - e.t
    local u = unit_of(d)
    parts[#parts + 1] = outcome_field((d / UNITS_MS[u]) * 32 + u * 8 + e.manual * 4
      + e.state)
    parts[#parts + 1] = outcome_field(e.a)
    parts[#parts + 1] = outcome_field(e.v)
    previous = e.t
  end
  return table.concat(parts)
end
