
-- Drops members of one agent's unfinished-task set that repair found finished, unless re-added since.
-- KEYS[1]: the set. ARGV: member, score seen, member, score seen, ... Returns how many were dropped.
local dropped = 0
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    redis.call('ZREM', KEYS[1], ARGV[i])
    dropped = dropped + 1
  end
end
return dropped
