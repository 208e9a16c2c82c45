-- acquire: take a free partition lease and bump the fence generation.
-- KEYS[1] lease, KEYS[2] generation
-- ARGV[1] owner, ARGV[2] ttl in ms
-- Returns the new generation, or 0 when the lease is held (by anyone).
local lt = key_type(1, 'string')
if key_type(2, 'string') == 'string' then
  -- A generation that is not an integer would make INCR fail; say which
  -- key is wrong instead.
  if not string.match(redis.call('GET', KEYS[2]), '^%-?%d+$') then
    error({err = 'PROTCTL_WRONGTYPE integer string 2'})
  end
end
if lt ~= 'none' then
  return 0
end
local g = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. g, 'PX', ARGV[2])
return g
