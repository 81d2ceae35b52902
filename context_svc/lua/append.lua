
-- KEYS and ARGV: append's. Returns {index, the session's epoch} (the caller may extend what it holds
-- of the session by the message it sent), or append's other results as they are.
local r, state = append(KEYS, ARGV)
if type(r) == 'number' and r >= 0 then return {r, state[1] or ''} end
return r
