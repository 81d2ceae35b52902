
-- KEYS: state, res, rpm, tok, amt [, the API key's record]. One scope (one hash tag).
-- ARGV: rid, cost_nusd, tokens, day, month, mode (settle | release), budget_day_nusd, budget_month_nusd
--       (-1: none), thresholds (comma list).
-- settle: the reservation ends, the real cost is spent, the window keeps the real tokens; release: the
-- call never went upstream, so it leaves no trace (not even in the request window).

{PRELUDE}

local rid = ARGV[1]
local r = redis.call('HGET', KEYS[5], 'r:' .. rid)
if r then
  local reserved = num(redis.call('HGET', KEYS[1], 'reserved'), 0) - tonumber(r)
  if reserved < 0 then reserved = 0 end
  redis.call('HSET', KEYS[1], 'reserved', s(reserved))
  redis.call('HDEL', KEYS[5], 'r:' .. rid)
  redis.call('ZREM', KEYS[2], rid)
end
local before = redis.call('HGET', KEYS[5], 't:' .. rid)
if ARGV[6] == 'release' then
  redis.call('ZREM', KEYS[3], rid)
  if before then
    redis.call('HINCRBY', KEYS[1], 'tpm', s(-tonumber(before)))
    redis.call('HDEL', KEYS[5], 't:' .. rid)
    redis.call('ZREM', KEYS[4], rid)
  end
  return {'released'}
end
if before then
  redis.call('HSET', KEYS[5], 't:' .. rid, ARGV[3])
  redis.call('HINCRBY', KEYS[1], 'tpm', s(tonumber(ARGV[3]) - tonumber(before)))
end
local bday, bmonth = tonumber(ARGV[7]), tonumber(ARGV[8])
if KEYS[6] then
  local rec = redis.call('HMGET', KEYS[6], 'hash', 'budget_day_nusd', 'budget_month_nusd')
  if rec[1] then
    bday, bmonth = num(rec[2], bday), num(rec[3], bmonth)
    redis.call('HSET', KEYS[6], 'last_used_ms', s(now))
  end
end
local cost = tonumber(ARGV[2])
local st = redis.call('HMGET', KEYS[1], 'day', 'day_spent', 'month', 'month_spent', 'day_alerts', 'month_alerts')
local day_spent, month_spent, day_alerts, month_alerts = cost, cost, '', ''
if st[1] == ARGV[4] then day_spent = num(st[2], 0) + cost; day_alerts = st[5] or '' end
if st[3] == ARGV[5] then month_spent = num(st[4], 0) + cost; month_alerts = st[6] or '' end
local out = {'settled', s(day_spent), s(month_spent), s(bday), s(bmonth)}
for th in string.gmatch(ARGV[9], '[^,]+') do
  local pct = tonumber(th)
  if bday > 0 and day_spent * 100 >= bday * pct
    and not string.find(',' .. day_alerts .. ',', ',' .. th .. ',', 1, true) then
    day_alerts = day_alerts .. ',' .. th
    table.insert(out, 'day:' .. th)
  end
  if bmonth > 0 and month_spent * 100 >= bmonth * pct
    and not string.find(',' .. month_alerts .. ',', ',' .. th .. ',', 1, true) then
    month_alerts = month_alerts .. ',' .. th
    table.insert(out, 'month:' .. th)
  end
end
redis.call('HSET', KEYS[1], 'day', ARGV[4], 'day_spent', s(day_spent), 'day_alerts', day_alerts,
  'month', ARGV[5], 'month_spent', s(month_spent), 'month_alerts', month_alerts)
redis.call('PEXPIRE', KEYS[1], {MONTH_KEEP_MS})
return out
