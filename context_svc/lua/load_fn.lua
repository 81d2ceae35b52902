
-- load(K, A, c, mine): K = meta, idx, log, entities, summary.
-- A: messages wanted at the end of the log (keep_recent + extra), then what the caller already
-- holds of this session: its epoch, messages lo..hi, index entries up to idx_hi, and the message
-- count its entities are current at (-1: none held). Stored messages and entries never change, so
-- those are not sent again; neither is the immutable global state, nor the entities when no message
-- was appended since (only an append writes them, with its message: the caller adds the labels of
-- its own append).
-- c: the meta fields below when the caller (the append right before) has them, else nil; mine: the
-- index of the message that append added (the caller sent it: not sent back when it extends what
-- the caller holds; `own` says so), else nil; count: how many messages the caller appended right
-- before, ending at `mine` (nil: one).
-- Returns false if the session does not exist, else ONE JSON document (parsed in C on our side,
-- instead of hundreds of RESP elements): {same, own, meta, upto, version, n, if: first index entry
-- sent, idx, a/ta and b/tb: messages (first index, list) the caller lacks, entities (null: held)}.
local function load(K, A, c, mine, count)
  count = count or 1
  c = c or redis.call('HMGET', K[1], 'epoch', 'message_count', 'total_tokens', 'summary_count',
    'summary_rejections', 'tasks')
  local epoch = c[1]
  if not epoch then return false end
  local same = epoch == A[2]
  local meta
  if same then
    meta = cjson.encode({message_count = c[2], total_tokens = c[3], summary_count = c[4],
      summary_rejections = c[5], tasks = c[6]})
  else
    local raw = redis.call('HGETALL', K[1])
    local m = {}
    for i = 1, #raw, 2 do m[raw[i]] = raw[i + 1] end
    meta = cjson.encode(m)
  end
  -- No summary yet (summary_count 0, kept by the summary's own commit) and the log's length (the
  -- append script keeps message_count = LLEN) come from the hash read above: two commands fewer per
  -- load (issue 45). A session without those fields (older) is read as before.
  local upto, version = -1, 0
  if c[4] ~= '0' then
    local sv = redis.call('HMGET', K[5], 'upto', 'version')
    upto = tonumber(sv[1] or '-1')
    version = tonumber(sv[2] or '0')
  end
  local n = tonumber(c[2] or '') or redis.call('LLEN', K[3])
  local lo, hi, idx_hi = tonumber(A[3]), tonumber(A[4]), tonumber(A[5])
  -- The messages just appended extend what the caller holds when both end right before them.
  local own = same and mine == n - 1 and hi == n - 1 - count and idx_hi == n - 1 - count
  if own then hi, idx_hi = n - 1, n - 1 end
  local idx_from = upto + 1
  if same then idx_from = math.max(idx_from, idx_hi + 1) end
  local idx = {}
  if idx_from < n then idx = redis.call('LRANGE', K[2], idx_from, n - 1) end
  local first = n - math.max(0, math.min(n - (upto + 1), tonumber(A[1])))
  local before, from = {}, first
  if same then
    if lo > first and lo <= hi then before = redis.call('LRANGE', K[3], first, math.min(lo, n) - 1) end
    if lo <= hi then from = math.max(first, hi + 1) end
  end
  local after = {}
  if from < n then after = redis.call('LRANGE', K[3], from, n - 1) end
  local ent_at = tonumber(A[6])
  local entities = 'null'
  if not (same and (ent_at == n or (mine == n - 1 and ent_at == n - count))) then
    local raw = redis.call('HGETALL', K[4])
    local kv = {}
    for i = 1, #raw, 2 do kv[#kv + 1] = cjson.encode(raw[i]) .. ':' .. raw[i + 1] end
    entities = '{' .. table.concat(kv, ',') .. '}'
  end
  local function int(x) return string.format('%d', x) end
  return '{"same":' .. tostring(same) .. ',"own":' .. tostring(own) .. ',"meta":' .. meta ..
    ',"upto":' .. int(upto) .. ',"version":' .. int(version) .. ',"n":' .. int(n) .. ',"if":' .. int(idx_from) ..
    ',"idx":[' .. table.concat(idx, ',') .. '],"a":' .. int(first) .. ',"ta":[' .. table.concat(before, ',') ..
    '],"b":' .. int(from) .. ',"tb":[' .. table.concat(after, ',') ..
    '],"entities":' .. entities .. '}'
end
