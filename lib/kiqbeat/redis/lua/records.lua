-- kiqbeat's records of missed ticks, put before the scripts that write them (scripts.py;
-- core/records.py reads them). A push is recorded in its schedule's history (progress.lua).

-- Missed ranges kept per schedule (core/records.py MAX_RANGES).
local MAX_RANGES = 100

-- A schedule's record of missed ranges, "AFTER THROUGH REASON" lines oldest first, as
-- {after, through, reason, line = its text} per line, or {line = text} for a line that is
-- not one (kept as it is, never acted on). The one Lua reader of the format (core/records.py
-- is the Python one); `write_ranges` the one writer.
local function read_ranges(text)
  local ranges = {}
  for l in string.gmatch(text or '', '[^\n]+') do
    local a, t, r = string.match(l, '^(%d+) (%d+) (%l+)$')
    if a then
      ranges[#ranges + 1] = {tonumber(a), tonumber(t), r, line = l}
    else
      ranges[#ranges + 1] = {line = l}
    end
  end
  return ranges
end

-- Store `ranges` (read_ranges' form; a range changed or made here has no `line`) as the
-- schedule's record, or remove the record when there are none.
local function write_ranges(missed_key, name, ranges)
  if #ranges == 0 then
    redis.call('HDEL', missed_key, name)
    return
  end
  local lines = {}
  for _, range in ipairs(ranges) do
    lines[#lines + 1] = range.line or (ms_text(range[1]) .. ' ' .. ms_text(range[2]) .. ' '
      .. range[3])
  end
  redis.call('HSET', missed_key, name, table.concat(lines, '\n'))
end

-- Record `ranges` ({after, through, reason}, ascending, above every range recorded for
-- `name`) as the schedule's missed ticks: one that starts where the last ends, for the
-- same reason, extends it. Beyond MAX_RANGES the oldest "policy" range goes first (ticks
-- the schedule's own catch_up chose to skip), then the oldest range.
local function add_ranges(missed_key, name, ranges)
  local kept = read_ranges(redis.call('HGET', missed_key, name) or nil)
  for _, range in ipairs(ranges) do
    local after, through, reason = range[1], range[2], range[3]
    local last = kept[#kept]
    if last and last[2] == after and last[3] == reason then
      last[2], last.line = through, nil
    else
      kept[#kept + 1] = {after, through, reason}
    end
  end
  while #kept > MAX_RANGES do
    local drop = 1
    for j, range in ipairs(kept) do
      if range[3] == 'policy' or (not range[3] and string.sub(range.line, -7) == ' policy') then
        drop = j
        break
      end
    end
    table.remove(kept, drop)
  end
  write_ranges(missed_key, name, kept)
end
