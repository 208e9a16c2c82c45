-- acquire: take a free partition lease and bump the fence generation.
-- KEYS[1] lease, KEYS[2] generation
-- ARGV[1] owner, ARGV[2] ttl in ms
-- Returns the new generation, or 0 when the lease is held (by anyone).
local lt = key_type(1, 'string')
key_type(2, 'string')
check_generation(2)
if lt ~= 'none' then
  return 0
end
return take_lease(1, 2, ARGV[1], ARGV[2])
