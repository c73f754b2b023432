-- kiqbeat's success deadlines, shared by fold.lua and incidents.lua (put before them by
-- scripts.py): one rule for when a success takes a schedule's deadline away.

local DEADLINE_LAST_TICK = 253370764800000  -- 9999-01-01T00:00:00Z in ms: no instant from then on

-- An instant as stored (a number of epoch ms), or nil when it is not one (not a number, not
-- finite, before the epoch or from 9999 on: written by hand, issue 27).
local function instant(value)
  local v = tonumber(value)
  if v and v >= 0 and v < DEADLINE_LAST_TICK then return v end
  return nil
end

-- A success of tick `success` (epoch ms) takes `name`'s deadline (sorted set `deadlines`)
-- away when it falls on the deadline's tick or after (its WITHIN from the rules hash
-- `rules_key`, "SHA WITHIN ALERT PAUSE"); the next push arms the next one. A score that is
-- no instant is dropped.
local function settle_deadline(deadlines, rules_key, name, success)
  local score = redis.call('ZSCORE', deadlines, name)
  if not score then return end
  local due = instant(score)
  if not due then
    redis.call('ZREM', deadlines, name)
    return
  end
  local raw = redis.call('HGET', rules_key, name)
  local within = raw and tonumber(string.match(raw, '^%x+ (%d+) '))
  if within and due - within <= success then redis.call('ZREM', deadlines, name) end
end
