
-- Queues a task; given a group and consumer, also reads the next new entry for that consumer in
-- the same atomic step, before a blocked reader of another replica is served: the replica that
-- accepted the task runs it when it has room (and its watchers get the events from memory).
-- KEYS[1]: the tasks stream. ARGV: task id, group ('' = only queue), consumer.
-- Returns {entry id} or {entry id, {{id, {field, value, ...}}, ...}}.
local id = redis.call('XADD', KEYS[1], '*', 'task', ARGV[1])
if ARGV[2] == '' then return {id} end
local read = redis.pcall('XREADGROUP', 'GROUP', ARGV[2], ARGV[3], 'COUNT', 1, 'STREAMS', KEYS[1], '>')
if type(read) ~= 'table' or read.err then return {id} end  -- nothing new, or no group yet
return {id, read[1][2]}
