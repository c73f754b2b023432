-- kiqbeat's success deadlines and incident records, shared by fold.lua and incidents.lua (put
-- before them, after outcomes.lua, by scripts.py): one rule for when a success takes a
-- schedule's deadline away, one reader of an incident record.

-- An instant as stored (a number of epoch ms), or nil when it is not one (not a number, not
-- finite, before the epoch or from 9999 on, outcomes.lua's LAST_TICK: written by hand,
-- issue 27).
local function instant(value)
  local v = tonumber(value)
  if v and v >= 0 and v < LAST_TICK then return v end
  return nil
end

-- `name`'s deadline in the sorted set `deadlines` (epoch ms), nil when none; a score that
-- is no instant (inf, nan: written by hand) is dropped.
local function deadline_of(deadlines, name)
  local score = redis.call('ZSCORE', deadlines, name)
  local due = score and instant(score)
  if score and not due then redis.call('ZREM', deadlines, name) end
  return due or nil
end

-- A success of tick `success` (epoch ms) takes `name`'s deadline (sorted set `deadlines`)
-- away when it falls on the deadline's tick or after (its WITHIN from the rules hash
-- `rules_key`, "SHA WITHIN ALERT PAUSE"); the next push arms the next one.
local function settle_deadline(deadlines, rules_key, name, success)
  local due = deadline_of(deadlines, name)
  if not due then return end
  local raw = redis.call('HGET', rules_key, name)
  local within = raw and tonumber(string.match(raw, '^%x+ (%d+) '))
  if within and due - within <= success then redis.call('ZREM', deadlines, name) end
end

-- `name`'s incident record in the hash `key` (incidents.lua's KEYS[3]) as a table: {e = the
-- event ('' once closed), t = its opening tick, n = the failure streak then, c = the tick
-- whose success closed the last one}, a tick that is no instant or a count out of range read
-- as 0. Returns the open incident (nil: none, or closed) and the record ({}: none). A record
-- that is not one reads as an open `failing`, which a success closes.
local function read_incident(key, name)
  local raw = redis.call('HGET', key, name)
  if not raw then return nil, {} end
  local ok, value = pcall(cjson.decode, raw)
  if not (ok and type(value) == 'table' and type(value.e) == 'string') then
    value = {e = 'failing', t = 0, n = 0}
  end
  value.t, value.c = instant(value.t) or 0, instant(value.c) or 0
  value.n = tonumber(value.n) or 0
  if value.n ~= value.n or value.n < 0 or value.n > 2^48 then value.n = 0 end
  if value.e == '' then return nil, value end
  return value, value
end
