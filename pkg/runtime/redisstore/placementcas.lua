-- placementcas: compare-and-set one field of a service's placement hash
-- (node modes or pins) and announce the change.
-- KEYS[1] the hash (protctl:{S}:modes or protctl:{S}:pins)
-- ARGV[1] field, ARGV[2] '1' when the field is expected to exist,
-- ARGV[3] the value expected (when it exists), ARGV[4] '1' to set,
-- ARGV[5] the value to set, ARGV[6] the channel to publish on.
-- Returns 1 when it changed the field, 0 when the field did not hold what
-- was expected (nothing changed).
key_type(1, 'hash')
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[2] == '1' then
  if cur ~= ARGV[3] then
    return 0
  end
elseif cur then
  return 0
end
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[5])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('PUBLISH', ARGV[6], ARGV[1])
return 1
