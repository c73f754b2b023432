-- kiqbeat's records of pushes, put before the scripts that write them (scripts.py).

-- Epoch milliseconds as digits (tostring would write a large number in e-notation).
local function ms_text(ms)
  return string.format('%.0f', ms)
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
