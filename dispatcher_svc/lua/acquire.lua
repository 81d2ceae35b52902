
-- Takes ownership of a task for a consumer, unless it is finished, parked, or held by a live owner.
-- KEYS[1]: task hash, KEYS[2]: its event stream.
-- ARGV: consumer, lease ms, event MAXLEN, event JSON if it was PENDING, event JSON if taken over,
--       update time ms. Returns {1, fence, <the record's fields as a flat list>, status before} when
--       acquired; {0, status} when there is nothing to run; {-1, status} when a live owner holds it;
--       {-2} when there is no task. One read (HMGET of every field a TaskRecord is made of, so the
--       record comes back without a second read) and one HSET of the hash (issue 45).
local names = {FIELDS}
local at = {}
for k, name in ipairs(names) do at[name] = k end
local cur = redis.call('HMGET', KEYS[1], unpack(names))
local status = cur[at.status]
if not status then return {-2} end
local s = tonumber(status)
if s >= 3 then return {0, s} end
local owner = cur[at.owner] or ''
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if s == 2 and owner ~= '' and owner ~= ARGV[1] then
  local lease = tonumber(cur[at.lease_until] or '0') or 0
  if lease > now then return {-1, s} end
end
local fence = tonumber(cur[at.fence] or '0') + 1
local runs = tonumber(cur[at.runs] or '0') + 1
local event = ARGV[5]
if s == 1 then event = ARGV[4] end
local seq = tonumber(cur[at.last_sequence] or '0') + 1
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '0-' .. seq, 'e', event)
local set = {'fence', tostring(fence), 'runs', tostring(runs), 'owner', ARGV[1],
  'lease_until', tostring(now + tonumber(ARGV[2])), 'status', '2', 'update_ms', ARGV[6],
  'last_sequence', tostring(seq)}
redis.call('HSET', KEYS[1], unpack(set))
for j = 1, #set, 2 do cur[at[set[j]]] = set[j + 1] end
local flat = {}
for k, name in ipairs(names) do
  if cur[k] then flat[#flat + 1] = name; flat[#flat + 1] = cur[k] end
end
return {1, fence, flat, s}
