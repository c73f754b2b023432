--[[
kiqbeat layout migration: schedules' state from the layout before the progress buckets
(three hashes of text, keyed by name) into their bucket records (progress.lua), once.

KEYS[1]  the old watermarks hash (name -> epoch ms, text)
KEYS[2]  the old first-seen hash (name -> epoch ms, text)
KEYS[3]  the old history hash (name -> "KIND TICK DELAY [JID]" lines, newest first)
ARGV     the names to migrate (a batch: redis/migrate.py)

Per name, atomically: when its bucket holds no record, the old watermark, first-seen and
history become one (the history as `remembered_parts` packs it). A record already there was
written later and is kept; when it holds no watermark (a run-now or backfill wrote its
history before the first invocation migrated), the old watermark and first-seen go into it
beside its history, so the ticks owed since the old watermark are still planned. A garbled
record is kept as it is (the invocation sets its schedule aside). Either way the name's old fields are deleted (a hash goes with
its last field), so running it again changes nothing. An old watermark that is not a whole
number (written by hand) is not carried over: the schedule keeps its history and starts
afresh (no watermark), and its name is returned.

Returns the names whose old watermark was not a whole number.
]]

local wm_key, seen_key, history_key = KEYS[1], KEYS[2], KEYS[3]
use_state(wm_key, 'kiqbeat:watermarks')

-- An old-layout history ("KIND TICK DELAY [JID]" lines, newest first) in the new layout.
local function converted_history(text)
  local done = {}
  for l in string.gmatch(text, '[^\n]+') do
    local kind, tick, delay, jid = string.match(l, '^([tbm]) (%d+) (%-?%d+) ?(%S*)$')
    if kind then table.insert(done, 1, {kind, tonumber(tick), tonumber(delay), jid}) end
  end
  if #done == 0 then return 0, '' end
  return remembered_parts(0, '', done, #done, #done)
end

local garbled_names = {}
for _, name in ipairs(ARGV) do
  local raw, err = hget_checked(state_key_of(name), name)
  if err then return err end
  local old_mark, err2 = hget_checked(wm_key, name)
  if err2 then return err2 end
  local seen, err3 = hget_checked(seen_key, name)
  if err3 then return err3 end
  local text, err4 = hget_checked(history_key, name)
  if err4 then return err4 end
  -- The record's watermark (a record written later: kept) and history, if any.
  local kept, newest, tail = false, 0, ''
  if raw then
    local mark_now, _, newest_now, tail_now = parse_record(raw, true)
    kept = mark_now == nil or mark_now ~= NO_MARK  -- garbled, or holding a watermark
    newest, tail = newest_now or 0, tail_now or ''
  end
  if not kept and (old_mark or text) then
    local mark = old_mark and string.match(old_mark, '^%d+$') and tonumber(old_mark) or nil
    if old_mark and not mark then garbled_names[#garbled_names + 1] = name end
    local seen_ms = mark and tonumber(seen or '') or 0
    if tail == '' and text then newest, tail = converted_history(text) end
    write_state_parts(name, mark, seen_ms, newest, tail)
  end
  redis.call('HDEL', wm_key, name)
  redis.call('HDEL', seen_key, name)
  redis.call('HDEL', history_key, name)
end
return garbled_names
