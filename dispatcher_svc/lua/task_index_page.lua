
-- KEYS[1]: the index (zset: task id scored by create ms).
-- ARGV: max score (inclusive), min score (inclusive), cursor ms ('' for none), cursor id, count.
-- Returns up to `count` {id, score, ...} newest first, strictly after the cursor (ms, id) in that
-- order: entries with the cursor's score are skipped while their id is >= the cursor id.
-- Ids are compared byte by byte, as the zset orders them (Lua's `<` follows the server's locale).
local function below(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local maxs, mins = ARGV[1], ARGV[2]
local cms, cid, count = ARGV[3], ARGV[4], tonumber(ARGV[5])
if cms ~= '' then
  if maxs == '+inf' or tonumber(cms) < tonumber(maxs) then maxs = cms end
end
local out, offset = {}, 0
while #out < 2 * count do
  local batch = redis.call('ZREVRANGEBYSCORE', KEYS[1], maxs, mins, 'WITHSCORES', 'LIMIT', offset, count)
  if #batch == 0 then break end
  for i = 1, #batch, 2 do
    local id, score = batch[i], batch[i + 1]
    if not (cms ~= '' and tonumber(score) == tonumber(cms) and not below(id, cid)) then
      if #out < 2 * count then
        out[#out + 1] = id
        out[#out + 1] = score
      end
    end
  end
  offset = offset + #batch / 2
  if #batch < 2 * count then break end
end
return out
