"""The Lua scripts of context_svc's session store (sessions.py): each runs in one hash slot, the session's."""

from __future__ import annotations

from typing import Final

SEEN_LUA_FN: Final = """
-- What an earlier append under dedupe key `field` stored: {index, content hash, message json}, or
-- nil. An entry of another epoch (the session id was deleted by a replica that did not know this
-- key, and created again) or past the log's end is stale: treated as absent and overwritten.
-- `epoch`: the session's, when the caller has read it already (nil: read here).
local function seen(meta, log, dedupe, field, epoch)
  local raw = redis.call('HGET', dedupe, field)
  if not raw then return nil end
  local entry = cjson.decode(raw)
  local stored = redis.call('LINDEX', log, entry.i)
  if not stored or entry.e ~= (epoch or redis.call('HGET', meta, 'epoch') or '') then return nil end
  return {entry.i, entry.h, stored}
end
"""

CREATE_LUA: Final = """
-- KEYS[1] meta. ARGV: ttl_s, then field/value pairs. Returns {1} if created, {0, existing fields}.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('HGETALL', KEYS[1])}
end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
local ttl = tonumber(ARGV[1])
if ttl > 0 then redis.call('EXPIRE', KEYS[1], ttl) end
return {1}
"""

APPEND_LUA_FN: Final = """
-- append(K, A): K = meta, log, idx, entities, summary, dedupe.
-- A: message json, index json, tokens, ttl_s, caller agent ('*' for operators), encoding the
-- tokens were counted in, dedupe key ('' for none), content hash, caller task, the caller's time (s),
-- how long a TTL refresh holds (s), then label/value pairs.
-- Returns (result, state): result is the new message's index, -1 if the session does not exist, -2 if
-- the caller may not use it (context_svc/access.py: a task not attached; in an older session without
-- `tasks`, another agent), -3 if it uses another encoding, or {index, content hash, message json} of
-- the message already appended under the dedupe key (nothing is written then); state is the session's
-- meta as a load reads it ({epoch, message_count, total_tokens, summary_count, summary_rejections,
-- tasks}), after the append, so a load right after it needs no read of its own (issue 45).
-- The session's state is read once (HMGET) and written once (HSET): issue 45.
-- created: the field/value pairs of the meta hash a create in the same script writes (nil: none). The
-- state is then theirs (no HMGET), and they go in the append's own HSET; an append that returns
-- before its HSET writes nothing, the caller writes them (CREATE_APPEND_LOAD_LUA).
local function append(K, A, created)
  local m
  if created then
    local f = {}
    for i = 1, #created, 2 do f[created[i]] = created[i + 1] end
    m = {f.tasks, f.agent_id, f.encoding, f.epoch, f.total_tokens, f.ttl_at, f.message_count, f.summary_count,
      f.summary_rejections}
  else
    m = redis.call('HMGET', K[1], 'tasks', 'agent_id', 'encoding', 'epoch', 'total_tokens', 'ttl_at',
      'message_count', 'summary_count', 'summary_rejections')
    if not m[3] and redis.call('EXISTS', K[1]) == 0 then return -1 end
  end
  if A[5] ~= '*' then
    local tasks = m[1]
    if not tasks then
      if m[2] ~= A[5] then return -2 end
    else
      local attached = false
      for _, task in ipairs(cjson.decode(tasks)) do attached = attached or (task == A[9]) end
      if A[9] == '' or not attached then return -2 end
    end
  end
  if m[3] ~= A[6] then return -3 end
  local epoch = m[4] or ''
  local state = {m[4], m[7], m[5], m[8], m[9], m[1]}
  -- The dedupe entry is claimed with HSETNX, at the index the message will take (message_count = the
  -- log's length, kept by this script): one command instead of HGET + HSET when the key is new, the
  -- usual case (issue 45). A key already there is looked at as before, and overwritten if stale.
  local claimed = tonumber(m[7] or '')
  if A[7] ~= '' then
    local entry = claimed and cjson.encode({i = claimed, h = A[8], e = epoch})
    if not entry or redis.call('HSETNX', K[6], A[7], entry) == 0 then
      local found = seen(K[1], K[2], K[6], A[7], epoch)
      if found then return found, state end
      claimed = nil
    end
  end
  local n = redis.call('RPUSH', K[2], A[1])
  redis.call('RPUSH', K[3], A[2])
  local tokens = string.format('%d', (tonumber(m[5] or '0') or 0) + tonumber(A[3]))
  local set = {}
  for i = 1, #(created or {}) do set[i] = created[i] end  -- the create's fields; later pairs win
  for _, v in ipairs({'message_count', n, 'total_tokens', tokens}) do set[#set + 1] = v end
  state[2], state[3] = tostring(n), tokens
  -- The index comes from this script, so the latest value of a label follows log order.
  if #A >= 12 then
    local labels = {}
    for i = 12, #A, 2 do
      labels[#labels + 1] = A[i]
      labels[#labels + 1] = cjson.encode({v = A[i + 1], i = n - 1})
    end
    redis.call('HSET', K[4], unpack(labels))
  end
  if A[7] ~= '' and claimed ~= n - 1 then  -- not claimed above (or the count was off): written now
    redis.call('HSET', K[6], A[7], cjson.encode({i = n - 1, h = A[8], e = epoch}))
  end
  -- Every key of the session, the dedupe hash included, expires with it, at the same time: all are
  -- refreshed together, at most once per A[11] seconds (issue 45: six EXPIREs per append were a
  -- third of an append's commands). `ttl_at` = "<time of the last refresh>:<which K existed then,
  -- one 0/1 each>"; an append that creates a key (the log, a first label, a first dedupe entry) or
  -- finds the refresh old (or in its future: another replica's clock) refreshes them all.
  local ttl = tonumber(A[4])
  if ttl > 0 then
    local now, every = tonumber(A[10]), tonumber(A[11])
    local at, had = string.match(m[6] or '', '^(%d+):([01]+)$')
    at = tonumber(at or '-1')
    local fresh = at >= 0 and now >= at and now - at < every and n > 1
    if fresh and #A >= 12 and string.sub(had, 4, 4) ~= '1' then fresh = false end
    if fresh and A[7] ~= '' and string.sub(had, 6, 6) ~= '1' then fresh = false end
    if not fresh then
      local bits = {}
      for k = 1, #K do
        -- At the log's first message no summary can exist yet, nor entities or a dedupe entry this
        -- append does not write: an EXPIRE would find no key, and the bit says so all the same.
        if n == 1 and (k == 5 or (k == 4 and #A < 12) or (k == 6 and A[7] == '')) then
          bits[k] = '0'
        elseif k == 1 and created then
          bits[k] = '1'  -- the hash is written below: its EXPIRE follows the HSET
        else
          bits[k] = tostring(redis.call('EXPIRE', K[k], ttl))
        end
      end
      set[#set + 1] = 'ttl_at'; set[#set + 1] = string.format('%d', now) .. ':' .. table.concat(bits)
    end
  end
  redis.call('HSET', K[1], unpack(set))
  if created and ttl > 0 then redis.call('EXPIRE', K[1], ttl) end
  return n - 1, state
end
"""

APPEND_LUA: Final = (
    SEEN_LUA_FN
    + APPEND_LUA_FN
    + """
-- KEYS and ARGV: append's. Returns {index, the session's epoch} (the caller may extend what it holds
-- of the session by the message it sent), or append's other results as they are.
local r, state = append(KEYS, ARGV)
if type(r) == 'number' and r >= 0 then return {r, state[1] or ''} end
return r
"""
)

SEEN_LUA: Final = (
    SEEN_LUA_FN
    + """
-- KEYS: meta, log, dedupe. ARGV: dedupe key. Returns seen(...) or false.
return seen(KEYS[1], KEYS[2], KEYS[3], ARGV[1]) or false
"""
)

LOAD_LUA_FN: Final = """
-- load(K, A, c, mine): K = meta, idx, log, entities, summary.
-- A: messages wanted at the end of the log (keep_recent + extra), then what the caller already
-- holds of this session: its epoch, messages lo..hi, index entries up to idx_hi, and the message
-- count its entities are current at (-1: none held). Stored messages and entries never change, so
-- those are not sent again; neither is the immutable global state, nor the entities when no message
-- was appended since (only an append writes them, with its message: the caller adds the labels of
-- its own append).
-- c: the meta fields below when the caller (the append right before) has them, else nil; mine: the
-- index of the message that append added (the caller sent it: not sent back when it extends what
-- the caller holds; `own` says so), else nil.
-- Returns false if the session does not exist, else ONE JSON document (parsed in C on our side,
-- instead of hundreds of RESP elements): {same, own, meta, upto, version, n, if: first index entry
-- sent, idx, a/ta and b/tb: messages (first index, list) the caller lacks, entities (null: held)}.
local function load(K, A, c, mine)
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
  -- The message just appended extends what the caller holds when both end right before it.
  local own = same and mine == n - 1 and hi == n - 2 and idx_hi == n - 2
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
  if not (same and (ent_at == n or (mine == n - 1 and ent_at == n - 1))) then
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
"""

LOAD_LUA: Final = (
    LOAD_LUA_FN
    + """
-- KEYS and ARGV: load's.
return load(KEYS, ARGV)
"""
)

APPEND_LOAD_LUA: Final = (
    SEEN_LUA_FN
    + APPEND_LUA_FN
    + LOAD_LUA_FN
    + """
-- An append that answers with the context built right after it, in one round trip (issue 45).
-- KEYS: append's (meta, log, idx, entities, summary, dedupe). ARGV: load's six, then append's.
-- Returns append's -1/-2/-3 as they are, else {append's result, load's document}: the load runs in
-- the same script, right after the append, from the meta the append read and wrote.
local r, state = append(KEYS, {unpack(ARGV, 7)})
if type(r) == 'number' and r < 0 then return r end
local mine = nil
if type(r) == 'number' then mine = r end
return {r, load({KEYS[1], KEYS[3], KEYS[2], KEYS[4], KEYS[5]}, ARGV, state, mine)}
"""
)

CREATE_APPEND_LOAD_LUA: Final = (
    SEEN_LUA_FN
    + APPEND_LUA_FN
    + LOAD_LUA_FN
    + """
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
"""
)

COMMIT_SUMMARY_LUA: Final = """
-- KEYS: meta, summary. ARGV: expected upto, new upto, summary json, ttl_s.
-- Returns the new version, 0 if another replica compacted first, -1 if the session is gone.
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local current = tonumber(redis.call('HGET', KEYS[2], 'upto') or '-1')
if current ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[2], 'upto', ARGV[2], 'json', ARGV[3])
local version = redis.call('HINCRBY', KEYS[2], 'version', 1)
redis.call('HINCRBY', KEYS[1], 'summary_count', 1)
local ttl = tonumber(ARGV[4])
if ttl > 0 then redis.call('EXPIRE', KEYS[2], ttl) end
return version
"""

INCR_IF_EXISTS_LUA: Final = """
-- KEYS[1] hash. ARGV: field. HINCRBY would create a stray hash for a deleted session.
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
"""

RELEASE_LUA: Final = """
-- KEYS[1] lease key. ARGV[1] our token: delete only our own lease.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
