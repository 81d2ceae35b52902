
-- KEYS[1] hash. ARGV: field. HINCRBY would create a stray hash for a deleted session.
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
