
-- Acknowledges and deletes a queue entry only if this consumer holds it (never another's claim).
-- KEYS[1]: tasks stream. ARGV: group, consumer, entry id. Returns 1 if acknowledged.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 0 end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
return 1
