-- Atomic token bucket (agentmesh.store's `token_bucket`: Store.take_token, tool_svc's rate limit).
-- KEYS[1]: bucket hash {tokens, ts}.
-- ARGV: capacity, refill_per_second, now_ms ('' -> Redis TIME, one clock for all replicas), cost, most
-- ('' -> cost). Takes `cost` tokens, or, when `most` > `cost`, as many whole tokens as the bucket holds up
-- to `most` (at least `cost`): a replica's lease of a small batch to spend locally.
-- Returns {allowed 0/1, whole tokens left, retry_after_ms (0 when allowed), tokens taken}.
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local most = tonumber(ARGV[5]) or cost
if not capacity or capacity <= 0 or not rate or rate <= 0 or not cost or cost <= 0 or most < cost then
  return redis.error_reply('ERR token_bucket: need capacity > 0, refill > 0, 0 < cost <= most')
end
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if not tokens or not ts then
  tokens = capacity
  ts = now
end
-- A caller whose clock is behind (now < ts) gets no refill rather than a negative one.
if now > ts then
  tokens = math.min(capacity, tokens + (now - ts) * rate / 1000)
  ts = now
end
local allowed = 0
local taken = 0
local retry_after = 0
if tokens >= cost then
  taken = cost
  if most > cost then
    taken = math.max(cost, math.min(most, math.floor(tokens)))
  end
  tokens = tokens - taken
  allowed = 1
else
  retry_after = math.ceil((cost - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(ts))
-- Once full again the bucket equals a fresh one, so it can vanish: idle buckets cost no memory.
redis.call('PEXPIRE', KEYS[1], math.max(1, math.ceil((capacity - tokens) * 1000 / rate)) + 1000)
return {allowed, math.floor(tokens), retry_after, taken}
