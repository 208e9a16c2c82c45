-- seekset: set a partition's checkpoint while nobody holds its lease, to
-- exactly what an operator's plan chose, backwards too (topics seek on an
-- unowned partition; docs/decisions/0044-topic-seek.md).
-- KEYS[1] lease, KEYS[2] generation, KEYS[3] checkpoints (HASH partition
-- -> next offset)
-- ARGV[1] partition, ARGV[2] the checkpoint the plan saw ('' for none),
-- ARGV[3] the new checkpoint (decimal)
-- Returns {'ok', generation} when set; {'lease', token} when the lease is
-- held; {'checkpoint', seen} when the checkpoint moved ('' for none).
-- The generation counter is bumped, so that a node's dedup memory of the
-- partition (kept across its leases of consecutive generations) is
-- dropped when it next takes the lease: it would drop the records the
-- seek is for.
key_type(1, 'string')
key_type(2, 'string')
key_type(3, 'hash')
local lease = redis.call('GET', KEYS[1])
if lease then
  return {'lease', lease}
end
local cur = redis.call('HGET', KEYS[3], ARGV[1]) or ''
if cur ~= ARGV[2] then
  return {'checkpoint', cur}
end
-- SET rather than INCR: the operator's ACL profile has no INCR (it must
-- not mint generations for itself); a counter never set (never leased)
-- needs no bump, as no node remembers the partition.
local gen = redis.call('GET', KEYS[2])
if gen then
  local g = decimal(gen)
  -- At most 14 digits once bumped: Lua holds numbers as doubles and
  -- writes them with 14 significant digits (1e+14), a counter no lease
  -- could be taken from (redisbroker's leaselib.lua refuses it).
  if not g or #g > 14 or (#g == 14 and g >= '99999999999999') then
    error({err = 'PROTCTL_WRONGTYPE integer string 2'})
  end
  gen = tostring(tonumber(g) + 1)
  redis.call('SET', KEYS[2], gen)
else
  gen = '0'
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
return {'ok', gen}
