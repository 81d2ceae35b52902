for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return redis.call('EXPIRE', KEYS[1], ARGV[1])