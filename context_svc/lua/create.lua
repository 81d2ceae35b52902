
-- KEYS[1] meta. ARGV: ttl_s, then field/value pairs. Returns {1} if created, {0, existing fields}.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('HGETALL', KEYS[1])}
end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
local ttl = tonumber(ARGV[1])
if ttl > 0 then redis.call('EXPIRE', KEYS[1], ttl) end
return {1}
