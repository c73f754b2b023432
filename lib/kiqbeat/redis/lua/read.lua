--[[
kiqbeat read script: the Redis clock and every schedule's watermark, in one reply.

KEYS[1]  watermarks hash (schedule name -> covered-through epoch ms)
ARGV[1]  the schedule names, joined by "\n" (names hold no control characters)

Returns {seconds, microseconds, marks}: TIME's two numbers and the marks in the order of the
names, joined by "\n", "" for a schedule without one. One string instead of one reply item
per schedule: decoding 100,000 items is what a client would spend its time on. A mark that
is not a whole number is refused, naming the schedule.
]]

local clock = redis.call('TIME')
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('KIQBEAT_WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind .. ', expected a hash')
end
local names = {}
for name in string.gmatch(ARGV[1], '[^\n]+') do
  names[#names + 1] = name
end
local marks = {}
for first = 1, #names, 1000 do
  local last = math.min(first + 999, #names)
  local batch = redis.call('HMGET', KEYS[1], unpack(names, first, last))
  for j = 1, last - first + 1 do
    local value = batch[j]
    if value and not string.match(value, '^%d+$') then
      return redis.error_reply("KIQBEAT_GARBLED watermark of schedule '" .. names[first + j - 1] .. "'" ..
        ' in ' .. KEYS[1] .. ' is not a number: ' .. string.sub(value, 1, 40))
    end
    marks[#marks + 1] = value or ''
  end
end
return {clock[1], clock[2], table.concat(marks, '\n')}
