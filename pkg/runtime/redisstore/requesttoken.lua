-- requesttoken: remember which record a pinned request with a token is
-- tried on (RequestTokensKey), with the token's TTL, in one step so the
-- key never lives without its expiry.
-- KEYS[1] the token's HASH
-- ARGV[1] entry name, ARGV[2] record key, ARGV[3] ttl (ms)
key_type(1, 'hash')
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
