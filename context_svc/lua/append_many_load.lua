
-- Several appends, then the load right after the last, in one script (issue 45): a step's reply and
-- the results of its tool calls. The session's meta hash is read once (the first append's HMGET) and
-- written once (one HSET of every append's fields, later pairs winning), and the messages pushed with one
-- RPUSH per list (append's `pushes`).
-- KEYS: append's. ARGV: load's six, c = the count of appends, then per append: the count of its
-- arguments, then append's arguments. Returns the first append's -1/-2/-3 as they are (nothing is
-- written: the later appends run against the same session, caller and encoding, so only the first can
-- be refused), else {{each append's result}, load's document}. `mine` for the load only when every
-- append added its message (none was found under its dedupe key).
-- The meta's field/value pairs with each field once, at its first place, holding its last value: a chain's
-- appends repeat the same few fields, and thousands of pairs would pass Lua's unpack bound.
local function last_values(pairs)
  local place, out = {}, {}
  for i = 1, #pairs, 2 do
    local field = pairs[i]
    if place[field] then
      out[place[field] + 1] = pairs[i + 1]
    else
      out[#out + 1] = field
      out[#out + 1] = pairs[i + 1]
      place[field] = #out - 1
    end
  end
  return out
end

local at, held, state, new = 8, nil, nil, true
local results, set, pushes = {}, {}, {log = {}, idx = {}}
for a = 1, tonumber(ARGV[7]) do
  local n = tonumber(ARGV[at])
  local r, st, m = append(KEYS, {unpack(ARGV, at + 1, at + n)}, nil, held, set, pushes)
  if type(r) == 'number' and r < 0 then
    push_all(KEYS, pushes)  -- not reached: see above
    if #set > 0 then redis.call('HSET', KEYS[1], unpack(last_values(set))) end
    return r
  end
  results[a], state, held = r, st, m
  if type(r) ~= 'number' then new = false end
  at = at + 1 + n
end
push_all(KEYS, pushes)
if #set > 0 then redis.call('HSET', KEYS[1], unpack(last_values(set))) end
local mine = nil
if new then mine = results[#results] end
return {results, load({KEYS[1], KEYS[3], KEYS[2], KEYS[4], KEYS[5]}, ARGV, state, mine, #results)}
