
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
if cjson.decode(cur)['t'] ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
