-- kiqbeat's private per-schedule state, put before the scripts that read or write it, after
-- varints.lua (scripts.py; redis/progress.py is the one Python reader and writer of the same
-- layout).
--
-- Each schedule's state is ONE field of ONE small hash chosen by a stable hash of its name
-- (`bucket_of`, checks.lua), so that each bucket holds a few dozen fields and Redis keeps it
-- as a compact listpack (a field's value stays under hash-max-listpack-value, 64 bytes, with
-- the default history of 10):
--   NS kiqbeat:progress:B  name -> the progress record (watermark, first-seen, history),
--                          specified in docs/store.md "Encodings".
-- The layout before it (three hashes of text) is migrated once, before an invocation reads
-- any state (migrate.lua): no script here reads it.

local STATE_NS = nil
local STATE_PREFIX = nil -- the bucket keys' prefix: STATE_NS .. 'kiqbeat:progress:'
local NO_MARK = 281474976710655  -- 2^48 - 1: a record that holds a history but no watermark

-- Set the key prefix from one of the script's keys (`key` ends with `suffix`).
local function use_state(key, suffix)
  STATE_NS = string.sub(key, 1, #key - #suffix)
  STATE_PREFIX = STATE_NS .. 'kiqbeat:progress:'
end

local STATE_KEYS = {}  -- name -> its bucket's key, worked out once per name a call
local BUCKET_KEYS = {} -- bucket number -> its key

local function state_key_of(name)
  local key = STATE_KEYS[name]
  if key then return key end
  local bucket = bucket_of(name)
  key = BUCKET_KEYS[bucket]
  if not key then
    key = STATE_PREFIX .. bucket
    BUCKET_KEYS[bucket] = key
  end
  STATE_KEYS[name] = key
  return key
end

-- Before the first write: may the user read and write the buckets? (checks.lua)
local function state_allowed()
  local b = STATE_NS .. 'kiqbeat:progress:0'
  return expect_allowed('HGET', b, 'f') or expect_allowed('HSET', b, 'f', 'v')
    or expect_allowed('HDEL', b, 'f')
end

-- HGET that answers a key of another type with kiqbeat's refusal instead of raising.
local function hget_checked(key, name)
  local value = redis.pcall('HGET', key, name)
  if type(value) == 'table' and value.err then
    return nil, expect_type(key, 'hash') or redis.error_reply(value.err)
  end
  return value
end

-- The refusal of a record that is not one: its first bytes as text when they are, else hex.
local function garbled(name, key, raw)
  local head = string.sub(raw, 1, 40)
  if not string.find(head, '^[%w%p ]*$') then
    head = '0x' .. string.gsub(string.sub(raw, 1, 20), '.',
      function(c) return string.format('%02x', string.byte(c)) end)
  end
  return redis.error_reply("KIQBEAT_GARBLED the progress record of schedule '" .. name ..
    "' in " .. key .. ' is not one kiqbeat writes (its watermark or history is cut short or ' ..
    'was written by hand): ' .. head)
end

-- The reason `garbled` gave, when `err` is its refusal (a record that is not one costs only
-- its schedule); nil for any other error (which stops the call).
local function garbled_reason(err)
  local text = err.err or ''
  if string.sub(text, 1, 15) == 'KIQBEAT_GARBLED' then return string.sub(text, 17) end
end

-- tick, backfill, manual run (with its jid), skipped (`kiqbeat schedules skip`)
local KIND_CODE = {t = 0, b = 1, m = 2, s = 3}

-- One push, for the history: {kind letter, tick ms, delay ms (push instant - tick), jid}.
local function pushed_line(kind, tick, when, jid)
  return {kind, tick, when - tick, jid}
end

-- An entry's bytes: KIND (letter), D (its tick less the one pushed before it), DELAY (ms)
-- and, for a manual run, its JID.
local function entry_bytes(kind, d, delay, jid)
  local unit = unit_of(d)
  local bytes = varint(zigzag(d / UNITS_MS[unit]) * 16 + unit * 4 + KIND_CODE[kind])
    .. varint(zigzag(delay))
  if kind == 'm' then bytes = bytes .. varint(#jid) .. jid end
  return bytes
end

-- The position after the `n` entries of `blob` from `pos` (after the last whole one when
-- fewer): entry by entry over those entries only (a push drops one or two, not the whole
-- history's bytes).
local function past_entries(blob, pos, n)
  local whole = pos
  for _ = 1, n do
    local head, delay_at = read_varint(blob, whole)
    if not head then break end
    local delay, after = read_varint(blob, delay_at)
    if not delay then break end
    if head % 4 == 2 then  -- a manual run: the jid's length, then the jid
      local length, jid_at = read_varint(blob, after)
      if not length or jid_at + length > #blob + 1 then break end
      after = jid_at + length
    end
    whole = after
  end
  return whole
end

-- The history NEWEST, TAIL with the pushes done[1..last] ({kind letter, tick ms, delay ms,
-- jid} each: `pushed_line`, in the order pushed) appended, keeping the newest `keep` — or,
-- with `no_shorter` (an operator's backfill or run now, whose own history setting may be
-- smaller than the deployment's), at least as many as it held: bounded all the same, by the
-- larger of the two settings. The entries kept are copied as they are.
--
-- A history in parts, as every script carries it from a record to the record it writes
-- without packing it in between: NEWEST (epoch ms) and TAIL, its varint COUNT then its
-- entries (0, '' when none).
local function remembered_parts(newest, tail, done, last, keep, no_shorter)
  local count, at = 0, nil
  if #tail >= 2 then
    count, at = read_varint(tail, 1)
    if not count then count = 0 end
  end
  if no_shorter then keep = math.max(keep, count) end
  local first = math.max(1, last - keep + 1)
  local n = last - first + 1
  local kept = ''
  local drop = count + n - keep
  if count > 0 and drop < count then
    kept = string.sub(tail, past_entries(tail, at, drop))
  end
  local previous = count > 0 and newest or done[first][2]
  local added
  if n == 1 then  -- one push, as most are: no table
    local entry = done[first]
    added = entry_bytes(entry[1], entry[2] - previous, entry[3], entry[4])
    previous = entry[2]
  else
    local parts = {}
    for j = first, last do
      local entry = done[j]
      parts[#parts + 1] = entry_bytes(entry[1], entry[2] - previous, entry[3], entry[4])
      previous = entry[2]
    end
    added = table.concat(parts)
  end
  return previous, varint(math.min(count + n, keep)) .. kept .. added
end

-- A record's watermark (NO_MARK: none) and first-seen, and, with `with_history`, its
-- history in parts (NEWEST, TAIL: 0, '' when none; `remembered_parts`): nil when it is not
-- a record (too short, or a COUNT its bytes cannot hold).
local function parse_record(raw, with_history)
  if #raw < 7 then return nil end
  local mark = struct.unpack('>I6', raw)
  local zz, pos = read_varint(raw, 7)
  if not zz then return nil end
  local seen = mark - unzigzag(zz)
  if pos > #raw then return mark, seen, 0, '' end
  local newest, count_at = read_varint(raw, pos)
  if not newest then return nil end
  local count, after = read_varint(raw, count_at)
  if not count or count < 1 or #raw - after + 1 < 2 * count then return nil end
  if not with_history then return mark, seen end
  return mark, seen, mark - unzigzag(newest), string.sub(raw, count_at)
end

-- A schedule's state, one HGET: watermark and first-seen (epoch ms; nil, nil when it has no
-- watermark), its history in parts (NEWEST, TAIL: 0, '' when none; nil, nil with
-- `mark_only`, which does not copy it out), or an error reply fifth.
local function read_state_parts(name, mark_only)
  local key = state_key_of(name)
  local raw, err = hget_checked(key, name)
  if err then return nil, nil, 0, '', err end
  if not raw then return nil, nil, 0, '' end
  local mark, seen, newest, tail = parse_record(raw, not mark_only)
  if not mark then return nil, nil, 0, '', garbled(name, key, raw) end
  if mark == NO_MARK then return nil, nil, newest, tail end
  return mark, seen, newest, tail
end

-- Store a schedule's whole state, one HSET: watermark (nil: none), first-seen (0 or nil:
-- unknown) and history in parts (NEWEST, TAIL: `remembered_parts`).
local function write_state_parts(name, mark, seen, newest, tail)
  mark = mark or NO_MARK
  local record = struct.pack('>I6', mark) .. varint(zigzag(mark - (seen or 0)))
  if tail ~= '' then record = record .. varint(zigzag(mark - newest)) .. tail end
  redis.call('HSET', state_key_of(name), name, record)
end

-- A schedule's watermark and first-seen (nil, nil when none), or an error reply third
-- (its history is not copied out).
local function read_mark(name)
  local mark, seen, _, _, err = read_state_parts(name, true)
  return mark, seen, err
end

-- Store a schedule's watermark and first-seen (0: unknown), keeping its history.
local function write_mark(name, mark, seen)
  local _, _, newest, tail = read_state_parts(name)
  write_state_parts(name, mark, seen, newest, tail)
end

-- Forget a schedule's watermark, first-seen and history.
local function forget_state(name)
  -- pcall: a bucket of another type holds no record of the name to forget (an invocation
  -- sets the names in it aside), and must not stop a write call half-way.
  redis.pcall('HDEL', state_key_of(name), name)
end
