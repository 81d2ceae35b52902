
-- One fenced write to a task. KEYS[1]: task hash, KEYS[2]: its event stream, KEYS[3]: its step prompts.
-- ARGV[1] expected fence ('' = create: the task must not exist yet)
-- ARGV[2] expected status ('' = any)       ARGV[3] '1' = increment the fence (take ownership)
-- ARGV[4] lease ms (0 = keep)               ARGV[5] event stream MAXLEN (approximate)
-- ARGV[6] ttl s (0 keep, >0 expire, <0 persist)   ARGV[7] n = field/value pairs that follow
-- ARGV[8] a step whose prompt record follows ('' = none)   ARGV[9] the record
-- ARGV[10] '1' = the commit's events in one stream entry (dispatcher.pack_events, issue 45)
-- then n field/value pairs, then one JSON string per event to append. The three keys share their TTL.
-- Stream entries are `0-<sequence>` with the event in field `e`; packed, two or more events are one
-- entry `0-<last sequence>` whose field `b` is the JSON array of them, in order (events.py reads both).
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
local i = 11
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
if ARGV[10] == '1' and #ARGV > i then
  local events = {unpack(ARGV, i)}
  seq = seq + #events
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '0-' .. seq, 'b', '[' .. table.concat(events, ',') .. ']')
else
  for j = i, #ARGV do
    seq = seq + 1
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '0-' .. seq, 'e', ARGV[j])
  end
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
