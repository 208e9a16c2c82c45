-- release: delete the lease if it holds exactly the token. The generation
-- key is not touched: generations only grow. With streams in KEYS[2..]
-- and a group in ARGV[2] (ReleasePartitionLeaseConsumer), every consumer
-- of the group left without pending entries on those streams, the
-- caller's own included, is deleted first (prune_consumers in lib.lua),
-- so that a released generation leaves no consumer behind; one holding
-- pending entries stays for the next owner's reclaim.
-- KEYS[1] lease, KEYS[2..] streams (optional)
-- ARGV[1] token, ARGV[2] group (with streams)
-- Returns 1 when released, 0 when the lease is not the caller's.
key_type(1, 'string')
local types = {}
for i = 2, #KEYS do
  types[i] = key_type(i, 'stream')
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
for i = 2, #KEYS do
  if types[i] == 'stream' then
    prune_consumers(i, ARGV[2], false)
  end
end
redis.call('DEL', KEYS[1])
return 1
