
-- A task of one agent ended. KEYS[1]: the agent's unfinished-task set, KEYS[2]: its outcome hash.
-- ARGV: task id, '1' to count the outcome ('' not: not the write that ended it), '1' if FAILED,
-- the current minute, the first minute of the window, the hash's TTL s, '1' to also drop the minutes
-- that left the window and refresh the TTL ('': the caller did so this minute already; issue 45).
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[2] ~= '1' then return 0 end
redis.call('HINCRBY', KEYS[2], ARGV[4] .. ':e', 1)
if ARGV[3] == '1' then redis.call('HINCRBY', KEYS[2], ARGV[4] .. ':f', 1) end
if ARGV[7] == '' then return 1 end
local first = tonumber(ARGV[5])
for _, name in ipairs(redis.call('HKEYS', KEYS[2])) do
  local minute = tonumber(string.match(name, '^(%d+):'))
  if minute == nil or minute < first then redis.call('HDEL', KEYS[2], name) end
end
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[6]))
return 1
