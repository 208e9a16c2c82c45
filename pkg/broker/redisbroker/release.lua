-- release: delete the lease if it holds exactly the token. The generation
-- key is not touched: generations only grow.
-- KEYS[1] lease
-- ARGV[1] token
-- Returns 1 when released, 0 when the lease is not the caller's.
key_type(1, 'string')
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
