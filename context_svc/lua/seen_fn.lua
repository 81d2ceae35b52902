
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
