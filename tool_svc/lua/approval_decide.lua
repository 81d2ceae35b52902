
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing', ''} end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if state == 'pending' and now >= tonumber(redis.call('HGET', KEYS[1], 'expire_at')) then
  redis.call('HSET', KEYS[1], 'state', 'expired')
  return {'expired', ''}
end
if state ~= 'pending' then return {state, ''} end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'resolved_by', ARGV[2], 'reason', ARGV[3],
           'resolve_time', string.format('%.6f', now), 'settlement', ARGV[4])
return {'decided', string.format('%.6f', now)}
