
-- KEYS and ARGV: load's.
return load(KEYS, ARGV)
