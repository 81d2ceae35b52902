
-- KEYS: meta, log, dedupe. ARGV: dedupe key. Returns seen(...) or false.
return seen(KEYS[1], KEYS[2], KEYS[3], ARGV[1]) or false
