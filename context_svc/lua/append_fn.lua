
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
-- held: the meta as the previous append of the same script left it (its third result), so a chain of
-- appends reads the hash once; deferred: a list the append adds its meta field/value pairs to instead
-- of writing them, the caller writing them all in one HSET (APPEND_MANY_LOAD_LUA, issue 45). The
-- third result is the meta after this append, for the next one (the first: the HMGET's fields).
-- pushes: {log = {}, idx = {}} that an append to a log of one message or more adds its two entries to
-- instead of RPUSHing them, the caller pushing them all with one RPUSH per list (`push_all`; issue 45):
-- the index is message_count + 1, which the append scripts keep equal to the log's length.

-- Sends what appends left in `pushes`: one RPUSH per list (per 1,000 entries: unpack's bound), in
-- append order.
local function push_all(K, pushes)
  if not pushes then return end
  for i = 1, #pushes.log, 1000 do
    local j = math.min(i + 999, #pushes.log)
    redis.call('RPUSH', K[2], unpack(pushes.log, i, j))
    redis.call('RPUSH', K[3], unpack(pushes.idx, i, j))
  end
  pushes.log, pushes.idx = {}, {}
end

local function append(K, A, created, held, deferred, pushes)
  local m
  if held then
    m = held
  elseif created then
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
      push_all(K, pushes)  -- the entry may name a message of this script that is not pushed yet
      local found = seen(K[1], K[2], K[6], A[7], epoch)
      if found then return found, state, m end
      claimed = nil
    end
  end
  local n
  local count = tonumber(m[7] or '')
  if pushes and count and count >= 1 then
    -- The log exists (its TTL too): its entries can wait for the caller's one RPUSH.
    n = count + 1
    pushes.log[#pushes.log + 1] = A[1]
    pushes.idx[#pushes.idx + 1] = A[2]
  else
    n = redis.call('RPUSH', K[2], A[1])
    redis.call('RPUSH', K[3], A[2])
  end
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
      m[6] = set[#set]
    end
  end
  m[5], m[7] = tokens, tostring(n)
  if deferred then
    for i = 1, #set do deferred[#deferred + 1] = set[i] end
    return n - 1, state, m
  end
  redis.call('HSET', K[1], unpack(set))
  if created and ttl > 0 then redis.call('EXPIRE', K[1], ttl) end
  return n - 1, state, m
end
