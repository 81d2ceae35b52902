redis.call('HSET', KEYS[1], 'content', ARGV[1], 'media_type', ARGV[2], 'size', ARGV[3],
  'expire_at', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('SADD', KEYS[2], ARGV[6])
return redis.call('EXPIRE', KEYS[2], ARGV[5])