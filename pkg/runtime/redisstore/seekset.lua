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
local gen = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
return {'ok', tostring(gen)}
