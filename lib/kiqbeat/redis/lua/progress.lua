-- kiqbeat's private per-schedule state, put before the scripts that read or write it
-- (scripts.py; redis/progress.py is the one Python reader and writer of the same layout).
--
-- Each schedule's state lives in two small hashes chosen by a stable hash of its name
-- (bucket = the first 4 hex digits of SHA1(name) modulo STATE_BUCKETS), so that each holds
-- a few dozen fields and Redis keeps it as a compact listpack:
--   NS kiqbeat:watermarks:B  name -> 12 bytes: the watermark then first-seen, epoch ms, each
--                            an unsigned 48-bit big-endian integer (first-seen 0: unknown);
--   NS kiqbeat:history:B     name -> the last pushes, newest first, one entry each:
--                            varint HEAD, varint zigzag(DELAY ms), and for a manual run a
--                            varint length and its jid; HEAD = zigzag(D) * 8 + UNIT * 4 + KIND
--                            (KIND 0 tick, 1 backfill, 2 manual, 3 skipped; D the tick in ms, or s when
--                            UNIT is 1, for the newest entry, and the previous entry's tick
--                            less this one's for the others).
-- The layout before it (hashes NS kiqbeat:watermarks, kiqbeat:first_seen, kiqbeat:history
-- keyed by name, in text) is still read for a name the new one lacks, and deleted for that
-- name when its state is next written: an upgraded deployment keeps every mark.

local STATE_NS = nil
local LEGACY = {}  -- legacy hash -> whether it exists (asked once per call)
local BUCKETS = {} -- name -> its bucket's suffix

-- Set the key prefix from one of the script's keys (`key` ends with `suffix`).
local function use_state(key, suffix)
  STATE_NS = string.sub(key, 1, #key - #suffix)
end

local function legacy_key(role)
  local key = STATE_NS .. role
  if LEGACY[key] == nil then
    LEGACY[key] = redis.call('TYPE', key)['ok'] ~= 'none'  -- TYPE: granted already (checks.lua)
  end
  return LEGACY[key] and key or nil
end

local function bucket_of(name)
  local b = BUCKETS[name]
  if not b then
    b = tostring(tonumber(string.sub(redis.sha1hex(name), 1, 4), 16) % STATE_BUCKETS)
    BUCKETS[name] = b
  end
  return b
end

local function marks_key_of(name)
  return STATE_NS .. 'kiqbeat:watermarks:' .. bucket_of(name)
end

local function history_key_of(name)
  return STATE_NS .. 'kiqbeat:history:' .. bucket_of(name)
end

-- Before the first write: may the user read and write the buckets? (checks.lua)
local function state_allowed()
  local m, h = STATE_NS .. 'kiqbeat:watermarks:0', STATE_NS .. 'kiqbeat:history:0'
  return expect_allowed('HGET', m, 'f') or expect_allowed('HSET', m, 'f', 'v')
    or expect_allowed('HDEL', m, 'f') or expect_allowed('HGET', h, 'f')
    or expect_allowed('HSET', h, 'f', 'v') or expect_allowed('HDEL', h, 'f')
end

-- HGET that answers a key of another type with kiqbeat's refusal instead of raising.
local function hget_checked(key, name)
  local value = redis.pcall('HGET', key, name)
  if type(value) == 'table' and value.err then
    return nil, expect_type(key, 'hash') or redis.error_reply(value.err)
  end
  return value
end

local function garbled(name, key, raw)
  return redis.error_reply("KIQBEAT_GARBLED watermark of schedule '" .. name .. "' in " ..
    key .. ' is not a number: ' .. string.sub(raw, 1, 40))
end

-- A schedule's watermark and first-seen (epoch ms; nil, nil when it has none), or an error
-- reply as a third value. Reads the old layout when the new one has nothing.
local function read_mark(name)
  local key = marks_key_of(name)
  local raw, err = hget_checked(key, name)
  if err then return nil, nil, err end
  if raw then
    if #raw ~= 12 then return nil, nil, garbled(name, key, raw) end
    local mark, seen = struct.unpack('>I6I6', raw)
    return mark, seen
  end
  local old = legacy_key('kiqbeat:watermarks')
  if not old then return nil, nil end
  raw, err = hget_checked(old, name)
  if err then return nil, nil, err end
  if not raw then return nil, nil end
  local mark = tonumber(raw)
  if not mark or not string.match(raw, '^%d+$') then return nil, nil, garbled(name, old, raw) end
  local seen_key = legacy_key('kiqbeat:first_seen')
  local seen = seen_key and tonumber(redis.call('HGET', seen_key, name) or nil) or 0
  return mark, seen
end

-- Store a schedule's watermark and first-seen (0: unknown), dropping any old-layout copy.
local function write_mark(name, mark, seen)
  redis.call('HSET', marks_key_of(name), name, struct.pack('>I6I6', mark, seen or 0))
  local old = legacy_key('kiqbeat:watermarks')
  if old then redis.call('HDEL', old, name) end
  old = legacy_key('kiqbeat:first_seen')
  if old then redis.call('HDEL', old, name) end
end

local function varint(v)
  local bytes = {}
  while v >= 128 do
    bytes[#bytes + 1] = v % 128 + 128
    v = math.floor(v / 128)
  end
  bytes[#bytes + 1] = v
  return string.char(unpack(bytes))
end

-- The varint at `pos` of `s` and the position after it (nil when cut short).
local function read_varint(s, pos)
  local v, scale = 0, 1
  while true do
    local b = string.byte(s, pos)
    if not b then return nil, pos end
    v = v + (b % 128) * scale
    pos = pos + 1
    if b < 128 then return v, pos end
    scale = scale * 128
  end
end

-- tick, backfill, manual run (with its jid), skipped (`kiqbeat schedules skip`)
local KIND_CODE = {t = 0, b = 1, m = 2, s = 3}
local KIND_LETTER = {[0] = 't', [1] = 'b', [2] = 'm', [3] = 's'}

-- One push, for the history: {kind letter, tick ms, delay ms (push instant - tick), jid}.
-- (A fifth argument, the tick's digits, is the text layout's and not needed here.)
local function pushed_line(kind, tick, when, jid)
  return {kind, tick, when - tick, jid}
end

-- An entry's bytes; `d` its tick (the newest) or its distance below the previous one.
local function history_entry(entry, d)
  local unit = 0
  if d % 1000 == 0 then
    unit, d = 1, d / 1000
  end
  local zz = d >= 0 and 2 * d or -2 * d - 1
  local delay = entry[3]
  local bytes = varint(zz * 8 + unit * 4 + KIND_CODE[entry[1]])
    .. varint(delay >= 0 and 2 * delay or -2 * delay - 1)
  if entry[1] == 'm' then bytes = bytes .. varint(#entry[4]) .. entry[4] end
  return bytes
end

-- The entry at `pos` of `blob` as {kind, d, delay, jid} and the position after it (nil when
-- garbled).
local function read_entry(blob, pos)
  local head, delay, length
  head, pos = read_varint(blob, pos)
  if not head then return nil end
  delay, pos = read_varint(blob, pos)
  if not delay then return nil end
  local code = head % 4
  local zz = math.floor(head / 8)
  local d = zz % 2 == 0 and zz / 2 or -(zz + 1) / 2
  if math.floor(head / 4) % 2 == 1 then d = d * 1000 end
  local entry = {KIND_LETTER[code] or 't', d, delay % 2 == 0 and delay / 2 or -(delay + 1) / 2}
  if code == 2 then
    length, pos = read_varint(blob, pos)
    if not length then return nil end
    entry[4] = string.sub(blob, pos, pos + length - 1)
    pos = pos + length
  end
  return entry, pos
end

-- How many entries a history holds.
local function history_count(blob)
  local count, pos = 0, 1
  while blob and pos <= #blob do
    local entry
    entry, pos = read_entry(blob, pos)
    if not entry then break end
    count = count + 1
  end
  return count
end

-- An old-layout history ("KIND TICK DELAY [JID]" lines, newest first) in the new layout.
local function converted_history(text)
  local out, previous = {}, nil
  for l in string.gmatch(text, '[^\n]+') do
    local kind, tick, delay, jid = string.match(l, '^([tbm]) (%d+) (%-?%d+) ?(%S*)$')
    if kind then
      tick = tonumber(tick)
      out[#out + 1] = history_entry({kind, tick, tonumber(delay), jid},
        previous and previous - tick or tick)
      previous = tick
    end
  end
  return table.concat(out)
end

-- A schedule's history in the new layout (nil when none), or an error reply second.
local function read_history(name)
  local key = history_key_of(name)
  local blob, err = hget_checked(key, name)
  if err then return nil, err end
  if blob then return blob end
  local old = legacy_key('kiqbeat:history')
  if not old then return nil end
  local text
  text, err = hget_checked(old, name)
  if err then return nil, err end
  return text and converted_history(text) or nil
end

-- A schedule's history `old` with the pushes done[first..last] (pushed_line's entries,
-- oldest first) on top, keeping the newest `keep` — or, with `no_shorter` (an operator's
-- backfill or run now, whose own history setting may be smaller than the deployment's), at
-- least as many as it held: bounded all the same, by the larger of the two settings. Only
-- the old newest entry is re-encoded; the rest of `old` is copied as it is.
local function remembered(old, done, first, last, keep, no_shorter)
  if no_shorter and old then keep = math.max(keep, history_count(old)) end
  local parts, previous = {}, nil
  for j = last, math.max(first, last - keep + 1), -1 do
    local tick = done[j][2]
    parts[#parts + 1] = history_entry(done[j], previous and previous - tick or tick)
    previous = tick
  end
  local left = keep - #parts
  if old and left > 0 and #old > 0 then
    local first, pos = read_entry(old, 1)
    if first then
      parts[#parts + 1] = history_entry(first, previous and previous - first[2] or first[2])
      local stop = pos
      for _ = 2, left do
        if stop > #old then break end
        local entry, after = read_entry(old, stop)
        if not entry then break end
        stop = after
      end
      parts[#parts + 1] = string.sub(old, pos, stop - 1)
    end
  end
  return table.concat(parts)
end

-- Store histories: `pairs` is name, history, name, history...; drops old-layout copies.
local function write_histories(pairs)
  local old = legacy_key('kiqbeat:history')
  for j = 1, #pairs, 2 do
    redis.call('HSET', history_key_of(pairs[j]), pairs[j], pairs[j + 1])
    if old then redis.call('HDEL', old, pairs[j]) end
  end
end

-- Forget a schedule's watermark, first-seen and history, in both layouts.
local function forget_state(name)
  redis.call('HDEL', marks_key_of(name), name)
  redis.call('HDEL', history_key_of(name), name)
  for _, role in ipairs({'kiqbeat:watermarks', 'kiqbeat:first_seen', 'kiqbeat:history'}) do
    local old = legacy_key(role)
    if old then redis.call('HDEL', old, name) end
  end
end
