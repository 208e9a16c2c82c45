-- record: the cluster layout's second publish step, on the index's slot:
-- record the key, then wake the category's watchers (so a woken watcher
-- finds the key in the index).
-- KEYS[1] index
-- ARGV[1] partition key, ARGV[2] wake channel
-- Returns 1.
key_type(1, 'set')
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[1])
return 1
