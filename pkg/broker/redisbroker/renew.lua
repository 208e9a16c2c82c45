-- renew: reset the lease TTL if the lease holds exactly the token.
-- KEYS[1] lease
-- ARGV[1] token, ARGV[2] ttl in ms
-- Returns 1 when renewed, 0 when the lease is not the caller's.
key_type(1, 'string')
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
