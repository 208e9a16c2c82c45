-- seekrequest: record an operator's seek of a held partition for its
-- owner to carry out (topics seek; docs/decisions/0044-topic-seek.md),
-- only while the lease still holds the token the plan saw.
-- KEYS[1] lease, KEYS[2] seek requests (HASH partition -> JSON request)
-- ARGV[1] token, ARGV[2] partition, ARGV[3] the request (JSON)
-- Returns '' when recorded, else the lease now ('-' when free).
key_type(1, 'string')
key_type(2, 'hash')
local lease = redis.call('GET', KEYS[1])
if lease ~= ARGV[1] then
  return lease or '-'
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return ''
