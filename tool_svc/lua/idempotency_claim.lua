
-- SET NX claims a free key in one command (issue 45: GET then SET was one more per tool call); a held
-- key is read only when the claim fails.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[4])
  return {1}
end
return {0, redis.call('GET', KEYS[1]), redis.call('EXISTS', KEYS[2])}
