-- acquire: take a free partition lease and bump the fence generation.
-- Both keys are read (typed_call) before the first write.
-- KEYS[1] lease, KEYS[2] generation
-- ARGV[1] owner, ARGV[2] ttl in ms
-- Returns the new generation, or 0 when the lease is held (by anyone).
local held = typed_call(1, 'string', 'GET', KEYS[1])
check_generation(2)
if held then
  return 0
end
return take_lease(1, 2, ARGV[1], ARGV[2])
