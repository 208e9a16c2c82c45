-- heartbeat: mark a node live until server time + ttl and store its status
-- and its held partitions (docs/decisions/0051).
-- KEYS[1] members (ZSET node -> expiry ms), KEYS[2] the node's status,
-- KEYS[3] the node's held partitions
-- ARGV[1] node, ARGV[2] ttl in ms, ARGV[3] status JSON,
-- ARGV[4] what to do with the held partitions: 'set' (to ARGV[5]), 'del'
-- (it holds none) or 'keep' (unchanged since the write that began with
-- ARGV[5]: only their TTL is extended)
-- Returns {expiry in ms since the epoch (server clock), 1 when the held
-- partitions are stored, 0 when 'keep' found another record or none (it
-- expired, a failover lost or reverted it, something else wrote it):
-- nothing is written, and the caller sends them again with 'set'}.
key_type(1, 'zset')
key_type(2, 'string')
key_type(3, 'string')
local now = now_ms()
local expiry = string.format('%.0f', now + tonumber(ARGV[2]))
if ARGV[4] == 'keep' then
  if redis.call('GETRANGE', KEYS[3], 0, #ARGV[5] - 1) ~= ARGV[5] then
    return {expiry, 0}
  end
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
elseif ARGV[4] == 'set' then
  redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[2])
else
  redis.call('DEL', KEYS[3])
end
redis.call('ZADD', KEYS[1], expiry, ARGV[1])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
-- Members that stopped heartbeating: their status keys have expired on
-- their own (same TTL); drop their index entries too.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
return {expiry, 1}
