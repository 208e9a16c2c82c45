-- publish: append to a partition lane and record the key in the index in
-- one atomic step, then wake the category's watchers.
-- KEYS[1] stream, KEYS[2] index
-- ARGV[1] partition key, ARGV[2] data, ARGV[3] wake channel
-- Returns the entry id.
key_type(1, 'stream')
key_type(2, 'set')
local id = redis.call('XADD', KEYS[1], '*', 'data', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('PUBLISH', ARGV[3], ARGV[1])
return id
