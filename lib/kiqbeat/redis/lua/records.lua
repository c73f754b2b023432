-- kiqbeat's records of pushes, put before the scripts that write them (scripts.py).

-- Epoch milliseconds as digits (tostring would write a large number in e-notation).
local function ms_text(ms)
  return string.format('%.0f', ms)
end

-- The Redis clock, epoch ms.
local function clock_ms()
  local clock = redis.call('TIME')
  return clock[1] * 1000 + math.floor(clock[2] / 1000)
end

-- One push as its history line: "KIND TICK DELAY", DELAY = push instant - tick (ms; negative
-- for a job placed ahead in the schedule set); a manual run's line ends with its jid.
local function pushed_line(kind, tick, when, jid)
  local text = kind .. ' ' .. ms_text(tick) .. ' ' .. ms_text(when - tick)
  if jid then text = text .. ' ' .. jid end
  return text
end

-- A schedule's history (newest first, one push a line) with `done` (oldest first) on top,
-- keeping the newest `keep`.
local function remembered(old, done, keep)
  local lines = {}
  for j = #done, math.max(1, #done - keep + 1), -1 do lines[#lines + 1] = done[j] end
  if old then
    for l in string.gmatch(old, '[^\n]+') do
      if #lines >= keep then break end
      lines[#lines + 1] = l
    end
  end
  return table.concat(lines, '\n')
end
