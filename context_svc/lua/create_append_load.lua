
-- CreateSession with its goal appended and the view loaded, in one script (issue 45): CREATE_LUA, then
-- APPEND_LOAD_LUA's append and load, without their separate reads and writes of the meta hash.
-- KEYS: append's. ARGV: ttl_s, c = the count of the create's field/value arguments, those, load's six,
-- then append's. Returns {0, existing fields} if the session exists (nothing is written: the caller
-- takes the usual path), else {1, append's result} when the append returned before writing (-2/-3,
-- or a message found under the dedupe key; the session is created all the same), else
-- {1, append's result, load's document}.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('HGETALL', KEYS[1])}
end
local c = tonumber(ARGV[2])
local created = {unpack(ARGV, 3, 2 + c)}
local r, state = append(KEYS, {unpack(ARGV, 9 + c)}, created)
if type(r) ~= 'number' or r < 0 then
  redis.call('HSET', KEYS[1], unpack(created))
  local ttl = tonumber(ARGV[1])
  if ttl > 0 then redis.call('EXPIRE', KEYS[1], ttl) end
  return {1, r}
end
return {1, r, load({KEYS[1], KEYS[3], KEYS[2], KEYS[4], KEYS[5]}, {unpack(ARGV, 3 + c, 8 + c)}, state, r)}
