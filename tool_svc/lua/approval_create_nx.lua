
local have = redis.call('HGET', KEYS[1], 'expire_at')
if have then return have end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local expire_at = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'state', 'pending', 'record', ARGV[1], 'expire_at', string.format('%.6f', expire_at))
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) + tonumber(ARGV[3])))
return string.format('%.6f', expire_at)
