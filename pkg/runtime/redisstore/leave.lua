-- leave: remove a node at once.
-- KEYS[1] members (ZSET), KEYS[2] the node's status, KEYS[3] its held
-- partitions
-- ARGV[1] node
key_type(1, 'zset')
key_type(2, 'string')
key_type(3, 'string')
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2], KEYS[3])
return 1
