
-- Takes ownership of an unfinished run for a replica, unless a live owner holds it.
-- KEYS[1]: run hash. ARGV[1] owner, ARGV[2] lease ms.
-- Returns {1, fence} when acquired (the fence incremented: the previous owner's writes are refused),
-- {0} when the run is finished, {-1, owner} when a live owner holds it, {-2} when there is no run.
local cur = redis.call('HMGET', KEYS[1], 'fence', 'finished', 'owner', 'lease_until')
if not cur[1] then return {-2} end
if cur[2] == '1' then return {0} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner = cur[3] or ''
if owner ~= '' and owner ~= ARGV[1] and tonumber(cur[4] or '0') > now then return {-1, owner} end
local fence = tonumber(cur[1]) + 1
local lease_until = tostring(now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'fence', tostring(fence), 'owner', ARGV[1], 'lease_until', lease_until)
return {1, fence}
