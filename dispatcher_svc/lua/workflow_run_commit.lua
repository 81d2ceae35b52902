
-- One fenced write to a workflow run. KEYS[1]: run hash, KEYS[2]: its event stream.
-- ARGV[1] expected fence ('' = create: the run must not exist yet)   ARGV[2] event MAXLEN (approximate)
-- ARGV[3] ttl s (0 keep)   ARGV[4] '1' = release ownership (owner '' and lease 0)   ARGV[5] n pairs
-- then n field/value pairs, then one JSON string per event to append (ids 0-<seq>, contiguous).
-- Returns {code, fence, last_sequence}: 1 ok, 0 stale fence, -2 no such run, -3 already exists.
local cur = redis.call('HMGET', KEYS[1], 'fence', 'last_sequence')
local fence = cur[1]
local set = {}
if ARGV[1] == '' then
  if fence then return {-3, tonumber(fence), 0} end
  fence = '0'
  set[#set + 1] = 'fence'; set[#set + 1] = '0'
else
  if not fence then return {-2, 0, 0} end
  if fence ~= ARGV[1] then return {0, tonumber(fence), 0} end
end
local n = tonumber(ARGV[5])
for j = 6, 5 + 2 * n, 2 do
  set[#set + 1] = ARGV[j]; set[#set + 1] = ARGV[j + 1]
end
if ARGV[4] == '1' then
  set[#set + 1] = 'owner'; set[#set + 1] = ''
  set[#set + 1] = 'lease_until'; set[#set + 1] = '0'
end
local seq = tonumber(cur[2] or '0')
for j = 6 + 2 * n, #ARGV do
  seq = seq + 1
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '0-' .. seq, 'e', ARGV[j])
end
set[#set + 1] = 'last_sequence'; set[#set + 1] = tostring(seq)
redis.call('HSET', KEYS[1], unpack(set))
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('EXPIRE', KEYS[1], ttl)
  if seq > 0 then redis.call('EXPIRE', KEYS[2], ttl) end
end
return {1, tonumber(fence), seq}
