
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function s(x) return string.format('%.0f', x) end
local function num(x, default) if x == false or x == nil or x == '' then return default end return tonumber(x) end
