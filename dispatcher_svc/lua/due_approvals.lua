
-- Takes the parked tasks whose approval is due (score = expiry, ms, <= Redis time) for one sweeper.
-- KEYS[1]: the sorted set of waiting approvals. ARGV: hold ms, max count.
-- Each member taken is re-scored to now + hold, so other replicas skip it meanwhile and it comes due
-- again if this sweeper dies before settling it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), member)
end
return due
