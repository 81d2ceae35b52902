
-- An append that answers with the context built right after it, in one round trip (issue 45).
-- KEYS: append's (meta, log, idx, entities, summary, dedupe). ARGV: load's six, then append's.
-- Returns append's -1/-2/-3 as they are, else {append's result, load's document}: the load runs in
-- the same script, right after the append, from the meta the append read and wrote.
local r, state = append(KEYS, {unpack(ARGV, 7)})
if type(r) == 'number' and r < 0 then return r end
local mine = nil
if type(r) == 'number' then mine = r end
return {r, load({KEYS[1], KEYS[3], KEYS[2], KEYS[4], KEYS[5]}, ARGV, state, mine)}
