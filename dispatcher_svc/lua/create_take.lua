-- Creates a task, queues it and, given a group, reads the next new queue entry for this consumer, in
-- one atomic step; when that entry is the new task's own and ARGV[9] says how, it also takes the task
-- for the consumer (what ACQUIRE_LUA writes for a PENDING task: fence 1, runs 1, owner, lease, RUNNING
-- and its event), so the run that follows needs no acquire of its own (issue 45: five commands and a
-- round trip fewer per task). An entry of another task (a backlog) is only read, as ENQUEUE_LUA does.
-- A single Redis only: its keys are in several slots (a Cluster creates, queues and acquires apart).
-- KEYS[1] task hash, KEYS[2] its event stream, KEYS[3] the tasks stream, KEYS[4] the tasks index,
-- KEYS[5] (optional) the agent's unfinished-task set.
-- ARGV[1] task id   ARGV[2] index score (create ms)   ARGV[3] the agent set's score
-- ARGV[4] group ('' = only queue)   ARGV[5] consumer   ARGV[6] event stream MAXLEN (approximate)
-- ARGV[7] '1' = a commit's events in one stream entry (commit.lua's packing)   ARGV[8] PENDING event JSON
-- ARGV[9] lease ms ('' = do not take the task)   ARGV[10] RUNNING event JSON   ARGV[11] its time (ms)
-- ARGV[12] n = field/value pairs of the new task that follow.
-- Returns {created (1/0), entry id, entries read ({} none), the taken record as flat field/value
-- pairs ({} when not taken)}. The index and the agent's set come first (ListTasks and the agents'
-- load find the task from its first moment), as the separate path writes them.
redis.call('ZADD', KEYS[4], 'NX', ARGV[2], ARGV[1])
if #KEYS >= 5 then redis.call('ZADD', KEYS[5], ARGV[3], ARGV[1]) end
local created = redis.call('HEXISTS', KEYS[1], 'fence') == 0  -- as commit.lua's create: a task has a fence
local entry = redis.call('XADD', KEYS[3], '*', 'task', ARGV[1])
local read = {}
if ARGV[4] ~= '' then
  local r = redis.pcall('XREADGROUP', 'GROUP', ARGV[4], ARGV[5], 'COUNT', 1, 'STREAMS', KEYS[3], '>')
  if type(r) == 'table' and not r.err then read = r[1][2] end  -- else nothing new, or no group yet
end
if not created then return {0, entry, read, {}} end
local set = {'fence', '0'}
local n = tonumber(ARGV[12])
for j = 13, 12 + 2 * n do set[#set + 1] = ARGV[j] end
local events = {ARGV[8]}
local take = ARGV[9] ~= '' and #read == 1 and read[1][1] == entry
if take then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for _, v in ipairs({'fence', '1', 'runs', '1', 'owner', ARGV[5], 'lease_until',
      string.format('%d', now + tonumber(ARGV[9])), 'status', '2', 'update_ms', ARGV[11]}) do
    set[#set + 1] = v
  end
  events[2] = ARGV[10]
end
if ARGV[7] == '1' and #events > 1 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '0-' .. #events, 'b', '[' .. table.concat(events, ',') .. ']')
else
  for seq, event in ipairs(events) do
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '0-' .. seq, 'e', event)
  end
end
set[#set + 1] = 'last_sequence'; set[#set + 1] = tostring(#events)
redis.call('HSET', KEYS[1], unpack(set))
if take then return {1, entry, read, set} end
return {1, entry, read, {}}
