
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
local failures = tonumber(redis.call('HGET', KEYS[1], 'failures') or '0')
if ARGV[1] == 'release' then
  if state == 'half_open' then redis.call('HSET', KEYS[1], 'probe_until_ms', '0') end
  return {state, failures}
end
if ARGV[1] == '1' then
  if state == 'half_open' then
    if tonumber(ARGV[3]) <= 0 then
      redis.call('DEL', KEYS[1])
      return {'closed', 0}
    end
    redis.call('HSET', KEYS[1], 'state', 'ramping', 'ramp_ms', tostring(now), 'credit', '0', 'failures', '0')
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    return {'ramping', 0}
  end
  if state == 'closed' then
    redis.call('DEL', KEYS[1])
    return {'closed', 0}
  end
  if state == 'ramping' then redis.call('HSET', KEYS[1], 'failures', '0') end
  return {state, 0}
end
failures = failures + 1
if state == 'half_open' or state == 'ramping' or failures >= tonumber(ARGV[2]) then
  state = 'open'
  redis.call('HSET', KEYS[1], 'state', 'open', 'opened_ms', tostring(now), 'probe_until_ms', '0')
end
redis.call('HSET', KEYS[1], 'state', state, 'failures', tostring(failures))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {state, failures}
