-- seekrequest: record an operator's seek of a held partition for its
-- owner to carry out (topics seek; docs/decisions/0044-topic-seek.md),
-- only while the lease still holds the token the plan saw, and only once:
-- a request whose id the owner already answered is not recorded again (a
-- resumed apply of the same plan would seek a second time).
-- KEYS[1] lease, KEYS[2] seek requests (HASH partition -> JSON request),
-- KEYS[3] seek results (HASH partition -> JSON result)
-- ARGV[1] token, ARGV[2] partition, ARGV[3] the request (JSON), ARGV[4]
-- request id, ARGV[5] TTL of the requests hash (ms): a request whose
-- requester went away does not stand for ever.
-- Returns '' when recorded, '=' when ARGV[4] was answered already, else
-- the lease now ('-' when free).
key_type(1, 'string')
key_type(2, 'hash')
key_type(3, 'hash')
local prev = redis.call('HGET', KEYS[3], ARGV[2])
if prev then
  local ok, res = pcall(cjson.decode, prev)
  if ok and type(res) == 'table' and res.id == ARGV[4] then
    return '='
  end
end
local lease = redis.call('GET', KEYS[1])
if lease ~= ARGV[1] then
  return lease or '-'
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
-- The TTL only grows: another partition's request waits for its own.
local ttl = tonumber(ARGV[5])
if redis.call('PTTL', KEYS[2]) < ttl then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return ''
