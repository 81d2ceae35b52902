
-- KEYS[1]: the usage hash of one (agent, day). ARGV[1]: ttl_s; then groups of 6:
-- model, calls, in, out, cost_nusd, latency_us.
for i = 2, #ARGV, 6 do
  local m = ARGV[i]
  redis.call('HINCRBY', KEYS[1], m .. '#calls', ARGV[i + 1])
  redis.call('HINCRBY', KEYS[1], m .. '#in', ARGV[i + 2])
  redis.call('HINCRBY', KEYS[1], m .. '#out', ARGV[i + 3])
  redis.call('HINCRBY', KEYS[1], m .. '#cost_nusd', ARGV[i + 4])
  redis.call('HINCRBY', KEYS[1], m .. '#latency_us', ARGV[i + 5])
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
