-- resolve: delete an entry under the lease it is fenced by.
-- KEYS[1] lease, KEYS[2] record
-- ARGV[1] fence token
-- Returns 1 when an entry was deleted, 0 when there was none.
key_type(1, 'string')
key_type(2, 'string')
fence(1, ARGV[1])
return redis.call('DEL', KEYS[2])
