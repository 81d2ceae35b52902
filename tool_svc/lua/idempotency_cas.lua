
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local rec = cjson.decode(cur)
if rec['t'] ~= ARGV[1] and rec['a'] ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' and not string.find(',' .. ARGV[2] .. ',', ',' .. tostring(rec['s']) .. ',', 1, true) then
  return 0
end
if ARGV[7] == '1' and redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if ARGV[3] == '' then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
if ARGV[5] ~= '' then
  redis.call('SET', KEYS[2], ARGV[5], 'PX', ARGV[6])
elseif ARGV[8] ~= '1' then
  redis.call('DEL', KEYS[2])
end  -- ARGV[8] '1': the heartbeat is left to lapse (at most a lease): a `done` record never reads it
return 1
