-- checkpoint: store a partition's next offset if the lease holds the token
-- and the offset moves forward.
-- KEYS[1] lease, KEYS[2] checkpoints (HASH partition -> next offset)
-- ARGV[1] fence token, ARGV[2] partition, ARGV[3] next offset (decimal,
-- no leading zeros)
-- Returns 1 when stored, 0 when the stored offset is already >= next.
key_type(1, 'string')
key_type(2, 'hash')
fence(1, ARGV[1])
local cur = redis.call('HGET', KEYS[2], ARGV[2])
if cur then
  local c = decimal(cur)
  if not c then
    error({err = 'PROTCTL_WRONGTYPE integer string 2'})
  end
  if numcmp(ARGV[3], c) <= 0 then
    return 0
  end
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
