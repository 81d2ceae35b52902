
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {1, 'closed', 0, 0} end

{NOW_MS}

local failures = tonumber(redis.call('HGET', KEYS[1], 'failures') or '0')
local open_ms, ramp_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
if state == 'open' then
  local opened = tonumber(redis.call('HGET', KEYS[1], 'opened_ms') or '0')
  if now - opened < open_ms then return {0, 'open', failures, open_ms - (now - opened)} end
  state = 'half_open'
  redis.call('HSET', KEYS[1], 'state', state, 'probe_until_ms', '0')
elseif state == 'ramping' then
  local started = tonumber(redis.call('HGET', KEYS[1], 'ramp_ms') or '0')
  if now - started >= ramp_ms then
    redis.call('DEL', KEYS[1])
    return {1, 'closed', 0, 0}
  end
  local start = tonumber(ARGV[3])
  local share = math.min(1, start + (1 - start) * (now - started) / ramp_ms)
  local credit = tonumber(redis.call('HGET', KEYS[1], 'credit') or '0') + share
  if credit >= 1 then
    redis.call('HSET', KEYS[1], 'credit', tostring(credit - 1))
    return {1, 'ramping', failures, 0}
  end
  redis.call('HSET', KEYS[1], 'credit', tostring(credit))
  return {0, 'ramping', failures, 500}
end
if state == 'half_open' then
  -- One probe at a time; a prober that died without a verdict frees the slot after its lease.
  if tonumber(redis.call('HGET', KEYS[1], 'probe_until_ms') or '0') > now then
    return {0, 'half_open', failures, 1000}
  end
  redis.call('HSET', KEYS[1], 'probe_until_ms', tostring(now + tonumber(ARGV[4])))
  return {1, 'half_open', failures, 0}
end
return {1, state, failures, 0}
