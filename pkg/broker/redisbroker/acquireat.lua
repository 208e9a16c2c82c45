-- acquireat: take a free partition lease only while its generation counter
-- is still the one the caller saw, and bump it, in one step: a caller that
-- planned on a free partition at generation g either takes it at g + 1 or
-- changes nothing (not even the counter).
-- KEYS[1] lease, KEYS[2] generation
-- ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3] the generation seen ('' for
-- none: never leased)
-- Returns {'acquired', generation}, {'leased', the lease's value} or
-- {'moved', the counter now ('' for none)}.
local lt = key_type(1, 'string')
key_type(2, 'string')
check_generation(2)
if lt ~= 'none' then
  return {'leased', redis.call('GET', KEYS[1])}
end
local g = redis.call('GET', KEYS[2]) or ''
if g ~= ARGV[3] then
  return {'moved', g}
end
return {'acquired', take_lease(1, 2, ARGV[1], ARGV[2])}
