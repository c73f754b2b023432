-- One step of the console's sweep (kiqbeat.web.names.Sweep): a page of stored names added to
-- the name index, and a page of the index checked against the definitions hash.
-- No definition is ever read, not even inside Redis: the names come from HSCAN NOVALUES of
-- the definitions hash (Redis 7.4 and later, Valkey 8) or, on a server without it, from
-- ZSCAN of each due index (every stored name is in one, by docs/store.md's protocol, until
-- an invocation sets its definition aside) and HSCAN of the set-aside hash (the names
-- taken out of the due index, with their reasons: kiqbeat's, at most 2,000 characters),
-- each name checked with HEXISTS. (HSCAN of the definitions with values would copy every
-- definition it passes into Lua, 100 MB ones too.)
--
-- KEYS[1]: the definitions hash (kiqbeat:schedules)
-- KEYS[2]: the name index (kiqbeat:names, a sorted set, every score 0)
-- KEYS[3]: what mode "due" walks (kiqbeat:due or one shard's), or mode "rejected"
--          (kiqbeat:rejected); unused in mode "novalues"
-- ARGV[1]: the walk's cursor (HSCAN's of KEYS[1], or SCAN's of KEYS[3]), or "" when this
--          pass's walk of the names is done
-- ARGV[2]: page length: HSCAN/ZSCAN COUNT, and the index names checked per call
-- ARGV[3]: ZRANGEBYLEX start of the index walk ("-": its first name, "(" .. NAME: after
--          NAME), or "" when this pass's walk of the index is done
-- ARGV[4]: "novalues" (walk KEYS[1] with HSCAN NOVALUES), "due" (ZSCAN of KEYS[3]) or
--          "rejected" (HSCAN of KEYS[3], its names)
-- Returns {next cursor ("" when the walk is done), {stored names met},
--          next index start ("" when the index's walk is done), names dropped from the index}

local page = tonumber(ARGV[2])
local met = {}
local cursor = ""
if ARGV[1] ~= "" then
    local reply
    if ARGV[4] == "novalues" then
        reply = redis.call("HSCAN", KEYS[1], ARGV[1], "COUNT", page, "NOVALUES")
        met = reply[2]
    else
        local scan = ARGV[4] == "due" and "ZSCAN" or "HSCAN"
        reply = redis.call(scan, KEYS[3], ARGV[1], "COUNT", page)
        for i = 1, #reply[2], 2 do
            if redis.call("HEXISTS", KEYS[1], reply[2][i]) == 1 then
                met[#met + 1] = reply[2][i]
            end
        end
    end
    if reply[1] ~= "0" then
        cursor = reply[1]
    end
    for first = 1, #met, 200 do  -- ZADD in pieces: unpack's stack is bounded
        local args = {}
        for i = first, math.min(first + 199, #met) do
            args[#args + 1] = 0
            args[#args + 1] = met[i]
        end
        redis.call("ZADD", KEYS[2], unpack(args))
    end
end

local dropped = 0
local start = ""
if ARGV[3] ~= "" then
    local names = redis.call("ZRANGEBYLEX", KEYS[2], ARGV[3], "+", "LIMIT", 0, page)
    for _, name in ipairs(names) do
        if redis.call("HEXISTS", KEYS[1], name) == 0 then
            redis.call("ZREM", KEYS[2], name)
            dropped = dropped + 1
        end
    end
    if #names == page then
        start = "(" .. names[#names]
    end
end
return {cursor, met, start, dropped}
