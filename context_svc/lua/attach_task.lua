
-- KEYS: meta, log, idx, entities, summary, dedupe (an attach refreshes the TTL of every one).
-- ARGV: session id, task id, agent id, caller ('*' for operators, else its subject: it must be the
-- owner), expected newest task ('' for none), expected generation, ttl_s, attached tasks kept.
-- Returns {-1} no such session, {-2} the caller is not its owner, {-3, agent} another agent's session,
-- {1, newest, generation, 0} attached, {0, newest, generation, age ms} not attached (nothing written).
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
if ARGV[4] ~= '*' then
  local owner = redis.call('HGET', KEYS[1], 'owner')
  if not owner or owner == '' or owner ~= ARGV[4] then return {-2} end
end
local agent = redis.call('HGET', KEYS[1], 'agent_id') or ''
if agent ~= ARGV[3] then return {-3, agent} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local newest = redis.call('HGET', KEYS[1], 'newest') or ARGV[1]
local gen = tonumber(redis.call('HGET', KEYS[1], 'newest_gen') or '0')
local since = tonumber(redis.call('HGET', KEYS[1], 'newest_ms') or '0')
if since == 0 then since = math.floor((tonumber(redis.call('HGET', KEYS[1], 'create_time') or '0') or 0) * 1000) end
if newest ~= ARGV[2] and not (ARGV[5] ~= '' and newest == ARGV[5] and gen == tonumber(ARGV[6])) then
  return {0, newest, gen, math.max(0, now - since)}
end
gen = gen + 1
redis.call('HSET', KEYS[1], 'newest', ARGV[2], 'newest_gen', gen, 'newest_ms', now)
local raw = redis.call('HGET', KEYS[1], 'tasks')
if raw then
  local kept = {}
  for _, task in ipairs(cjson.decode(raw)) do
    if task ~= ARGV[2] then kept[#kept + 1] = task end
  end
  kept[#kept + 1] = ARGV[2]
  local drop = #kept - tonumber(ARGV[8])
  local out = {}
  for i = math.max(1, drop + 1), #kept do out[#out + 1] = kept[i] end
  redis.call('HSET', KEYS[1], 'tasks', cjson.encode(out))
end
local ttl = tonumber(ARGV[7])
if ttl > 0 then
  for k = 1, #KEYS do redis.call('EXPIRE', KEYS[k], ttl) end
end
return {1, ARGV[2], gen, 0}
