
-- KEYS: meta, summary. ARGV: expected upto, new upto, summary json, ttl_s.
-- Returns the new version, 0 if another replica compacted first, -1 if the session is gone.
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local current = tonumber(redis.call('HGET', KEYS[2], 'upto') or '-1')
if current ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[2], 'upto', ARGV[2], 'json', ARGV[3])
local version = redis.call('HINCRBY', KEYS[2], 'version', 1)
redis.call('HINCRBY', KEYS[1], 'summary_count', 1)
local ttl = tonumber(ARGV[4])
if ttl > 0 then redis.call('EXPIRE', KEYS[2], ttl) end
return version
