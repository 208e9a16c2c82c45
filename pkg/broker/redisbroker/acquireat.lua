-- acquireat: take a free partition lease only while its generation counter
-- is still the one the caller saw, and bump it, in one step: a caller that
-- planned on a free partition at generation g either takes it at g + 1 or
-- changes nothing (not even the counter). Both keys are read (typed_call)
-- before the first write.
-- KEYS[1] lease, KEYS[2] generation
-- ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3] the generation seen ('' for
-- none: never leased)
-- Returns {'acquired', generation}, {'leased', the lease's value} or
-- {'moved', the counter now ('' for none)}.
local held = typed_call(1, 'string', 'GET', KEYS[1])
local g = check_generation(2) or ''
if held then
  return {'leased', held}
end
if g ~= ARGV[3] then
  return {'moved', g}
end
return {'acquired', take_lease(1, 2, ARGV[1], ARGV[2])}
