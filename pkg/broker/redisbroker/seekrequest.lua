-- seekrequest: records an operator's seek request for the owner of a
-- partition to carry out (seek.lua, request mode), against the lease the
-- plan saw.
-- KEYS[1] lease, KEYS[2] seek request (hash), KEYS[3] the previous
-- request's record (hash, SeekPreviousKey)
-- ARGV[1] the lease token the plan saw, ARGV[2] request id, ARGV[3] by,
-- ARGV[4] lanes (JSON [{"stream":..,"to":..}]), ARGV[5] ttl ms
-- Returns {'requested'}, {'exists'} (this id is recorded already: a
-- resumed apply), {'leased', value now} or {'busy', id of the request
-- that waits}. A closed request it replaces is copied to KEYS[3], so
-- that its operator, polling late, still finds what became of it.
key_type(1, 'string')
key_type(2, 'hash')
key_type(3, 'hash')
local cur = redis.call('HGET', KEYS[2], 'id')
if cur == ARGV[2] then return {'exists'} end
local lease = redis.call('GET', KEYS[1])
if lease ~= ARGV[1] then return {'leased', lease or ''} end
if cur and redis.call('HEXISTS', KEYS[2], 'status') == 0 then return {'busy', cur} end
local t = redis.call('TIME')
if cur then
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[3], unpack(redis.call('HGETALL', KEYS[2])))
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'id', ARGV[2], 'token', ARGV[1], 'by', ARGV[3], 'lanes', ARGV[4],
  'requestedAt', tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return {'requested'}
