-- append: the cluster layout's first publish step, on the partition's
-- slot: append to a lane (the index, in another slot, is recorded after,
-- by record.lua; see publish.go for why in that order).
-- KEYS[1] stream
-- ARGV[1] data
-- Returns the entry id.
key_type(1, 'stream')
return redis.call('XADD', KEYS[1], '*', 'data', ARGV[1])
