
-- Renews this consumer's claim on a queue entry, only if it still holds it.
-- KEYS[1]: the tasks stream. ARGV: group, consumer, entry id. Returns 1 if renewed.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
return 1
