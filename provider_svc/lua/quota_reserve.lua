
-- KEYS: state, res, rpm, tok, amt [, the API key's record]. One scope (one hash tag).
-- ARGV: rid, reserve_nusd, reserve_tokens, ttl_ms, rpm, tpm, budget_day_nusd, budget_month_nusd (-1: none),
--       day, month, thresholds (comma list, for the alerts a budget refusal completes).

{PRELUDE}

local rpm_limit, tpm_limit = tonumber(ARGV[5]), tonumber(ARGV[6])
local bday, bmonth = tonumber(ARGV[7]), tonumber(ARGV[8])
if KEYS[6] then
  local rec = redis.call('HMGET', KEYS[6], 'hash', 'revoked_ms', 'expires_ms', 'rpm', 'tpm',
    'budget_day_nusd', 'budget_month_nusd')
  if not rec[1] then return {'revoked', 0} end
  if num(rec[2], 0) > 0 then return {'revoked', num(rec[2], 0)} end
  local expires = num(rec[3], 0)
  if expires > 0 and now >= expires then return {'expired', expires} end
  rpm_limit, tpm_limit = num(rec[4], rpm_limit), num(rec[5], tpm_limit)
  bday, bmonth = num(rec[6], bday), num(rec[7], bmonth)
end
-- Reservations never settled (their replica died) expire; the windows slide.
local reserved = num(redis.call('HGET', KEYS[1], 'reserved'), 0)
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, id in ipairs(stale) do
  reserved = reserved - num(redis.call('HGET', KEYS[5], 'r:' .. id), 0)
  redis.call('HDEL', KEYS[5], 'r:' .. id)
end
if #stale > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
if reserved < 0 then reserved = 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - 60000)
local used = num(redis.call('HGET', KEYS[1], 'tpm'), 0)
local old = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now - 60000)
for _, id in ipairs(old) do
  used = used - num(redis.call('HGET', KEYS[5], 't:' .. id), 0)
  redis.call('HDEL', KEYS[5], 't:' .. id)
end
if #old > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - 60000) end
if used < 0 then used = 0 end
redis.call('HSET', KEYS[1], 'reserved', s(reserved), 'tpm', s(used))
local st = redis.call('HMGET', KEYS[1], 'day', 'day_spent', 'month', 'month_spent', 'day_alerts', 'month_alerts')
local day_spent, month_spent, day_alerts, month_alerts = 0, 0, '', ''
if st[1] == ARGV[9] then day_spent = num(st[2], 0); day_alerts = st[5] or '' end
if st[3] == ARGV[10] then month_spent = num(st[4], 0); month_alerts = st[6] or '' end
local reserve, tokens = tonumber(ARGV[2]), tonumber(ARGV[3])
if rpm_limit >= 0 then
  local n = redis.call('ZCARD', KEYS[3])
  if n >= rpm_limit then
    local retry = 60000
    local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    if oldest[2] then retry = tonumber(oldest[2]) + 60000 - now end
    return {'rpm', s(retry), s(n), s(rpm_limit)}
  end
end
if tpm_limit >= 0 and used + tokens > tpm_limit then
  if tokens > tpm_limit then return {'tpm_request', '0', s(tokens), s(tpm_limit)} end
  local need, freed, retry = used + tokens - tpm_limit, 0, 60000
  local entries = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    freed = freed + num(redis.call('HGET', KEYS[5], 't:' .. entries[i]), 0)
    if freed >= need then retry = tonumber(entries[i + 1]) + 60000 - now; break end
  end
  return {'tpm', s(retry), s(used), s(tpm_limit)}
end
-- A refusal because the spend itself leaves no room for this call (not the calls in flight) means the
-- budget is used up: its 100 % alert fires now, if it has not (strict admission seldom lets spend reach it).
local function exhausted(kind, spent, budget, alerts, field)
  local fired = {kind, s(spent), s(reserved), s(budget), s(reserve)}
  if spent + reserve > budget then
    for th in string.gmatch(ARGV[11], '[^,]+') do
      if tonumber(th) == 100 and not string.find(',' .. alerts .. ',', ',' .. th .. ',', 1, true) then
        alerts = alerts .. ',' .. th
        table.insert(fired, th)
      end
    end
  end
  if #fired > 5 then
    if field == 'day' then
      redis.call('HSET', KEYS[1], 'day', ARGV[9], 'day_spent', s(spent), 'day_alerts', alerts)
    else
      redis.call('HSET', KEYS[1], 'month', ARGV[10], 'month_spent', s(spent), 'month_alerts', alerts)
    end
  end
  return fired
end
if bday >= 0 and day_spent + reserved + reserve > bday then
  return exhausted('budget_day', day_spent, bday, day_alerts, 'day')
end
if bmonth >= 0 and month_spent + reserved + reserve > bmonth then
  return exhausted('budget_month', month_spent, bmonth, month_alerts, 'month')
end
local rid = ARGV[1]
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), rid)
redis.call('HSET', KEYS[5], 'r:' .. rid, s(reserve), 't:' .. rid, s(tokens))
redis.call('ZADD', KEYS[3], now, rid)
redis.call('ZADD', KEYS[4], now, rid)
redis.call('HSET', KEYS[1], 'reserved', s(reserved + reserve), 'tpm', s(used + tokens))
redis.call('PEXPIRE', KEYS[1], {MONTH_KEEP_MS})
local keep = tonumber(ARGV[4]) + 60000
for i = 2, 5 do redis.call('PEXPIRE', KEYS[i], keep) end
return {'ok', s(day_spent), s(month_spent), s(reserved + reserve), s(rpm_limit), s(tpm_limit), s(bday), s(bmonth)}
