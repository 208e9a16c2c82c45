-- park: create or replace a parked entry under the lease it is fenced by.
-- KEYS[1] lease, KEYS[2] record (STRING, JSON ledger.Parked)
-- ARGV[1] fence token, ARGV[2] record JSON
key_type(1, 'string')
key_type(2, 'string')
fence(1, ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return 1
