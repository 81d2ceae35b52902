
local t = redis.call('TIME')
local fields = redis.call('HGETALL', KEYS[1])
table.insert(fields, 'now')
table.insert(fields, string.format('%.6f', tonumber(t[1]) + tonumber(t[2]) / 1000000))
return fields
