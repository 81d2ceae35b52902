
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[4])
  return {1}
end
return {0, cur, redis.call('EXISTS', KEYS[2])}
