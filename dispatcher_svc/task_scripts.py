"""The Lua scripts of the task store (`dispatcher_svc.tasks`): fenced commit, acquire, due approvals.

Each script documents its KEYS, ARGV and reply; `TaskStore` builds the arguments and reads the replies.
"""

from dispatcher_svc.task_record import RECORD_FIELDS

COMMIT_LUA = """
-- One fenced write to a task. KEYS[1]: task hash, KEYS[2]: its event stream, KEYS[3]: its step prompts.
-- ARGV[1] expected fence ('' = create: the task must not exist yet)
-- ARGV[2] expected status ('' = any)       ARGV[3] '1' = increment the fence (take ownership)
-- ARGV[4] lease ms (0 = keep)               ARGV[5] event stream MAXLEN (approximate)
-- ARGV[6] ttl s (0 keep, >0 expire, <0 persist)   ARGV[7] n = field/value pairs that follow
-- ARGV[8] a step whose prompt record follows ('' = none)   ARGV[9] the record
-- then n field/value pairs, then one JSON string per event to append. The three keys share their TTL.
-- Returns {code, fence, status, last_sequence, status before}; code 1 ok, 0 stale fence, -1 other
-- status, -2 no such task, -3 already exists (the status before: what the agents' load tracking,
-- agent_load.py, needs to count a task's end once).
-- One read (HMGET) and one HSET of the hash per commit, whatever it sets (issue 45): the fields are
-- written in the order the checks would have written them one by one, so a later value wins.
local cur = redis.call('HMGET', KEYS[1], 'fence', 'status', 'last_sequence')
local fence = cur[1]
local status = cur[2] or '0'
local before = tonumber(status) or 0
local set = {}
if ARGV[1] == '' then
  if fence then return {-3, tonumber(fence), tonumber(status), 0} end
  fence = '0'
  set[#set + 1] = 'fence'; set[#set + 1] = '0'
else
  if not fence then return {-2, 0, 0, 0} end
  if fence ~= ARGV[1] then return {0, tonumber(fence), tonumber(status), 0} end
end
if ARGV[2] ~= '' and status ~= ARGV[2] then return {-1, tonumber(fence), tonumber(status), 0} end
if ARGV[3] == '1' then
  fence = tostring(tonumber(fence) + 1)
  set[#set + 1] = 'fence'; set[#set + 1] = fence
end
local n = tonumber(ARGV[7])
local i = 10
local seq = tonumber(cur[3] or '0')
for j = i, i + 2 * n - 1, 2 do
  set[#set + 1] = ARGV[j]; set[#set + 1] = ARGV[j + 1]
  if ARGV[j] == 'status' then status = ARGV[j + 1] end
  if ARGV[j] == 'last_sequence' then seq = tonumber(ARGV[j + 1]) end
end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[3], ARGV[8], ARGV[9]) end
i = i + 2 * n
local lease = tonumber(ARGV[4])
if lease > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  set[#set + 1] = 'lease_until'; set[#set + 1] = tostring(now + lease)
end
for j = i, #ARGV do
  seq = seq + 1
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '0-' .. seq, 'e', ARGV[j])
end
set[#set + 1] = 'last_sequence'; set[#set + 1] = tostring(seq)
redis.call('HSET', KEYS[1], unpack(set))
local ttl = tonumber(ARGV[6])
if ttl > 0 then
  for k = 1, 3 do redis.call('EXPIRE', KEYS[k], ttl) end
elseif ttl < 0 then
  for k = 1, 3 do redis.call('PERSIST', KEYS[k]) end
end
return {1, tonumber(fence), tonumber(status) or 0, seq, before}
"""

ACQUIRE_LUA = (
    """
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
"""
).replace("{FIELDS}", "{" + ", ".join(f"'{name}'" for name in RECORD_FIELDS) + "}")

DUE_APPROVALS_LUA = """
-- Takes the parked tasks whose approval is due (score = expiry, ms, <= Redis time) for one sweeper.
-- KEYS[1]: the sorted set of waiting approvals. ARGV: hold ms, max count.
-- Each member taken is re-scored to now + hold, so other replicas skip it meanwhile and it comes due
-- again if this sweeper dies before settling it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), member)
end
return due
"""
