-- heartbeat: mark a node live until server time + ttl and store its status.
-- KEYS[1] members (ZSET node -> expiry ms), KEYS[2] the node's status
-- ARGV[1] node, ARGV[2] ttl in ms, ARGV[3] status JSON
-- Returns the expiry in ms since the epoch (server clock).
key_type(1, 'zset')
key_type(2, 'string')
local now = now_ms()
local expiry = string.format('%.0f', now + tonumber(ARGV[2]))
redis.call('ZADD', KEYS[1], expiry, ARGV[1])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
-- Members that stopped heartbeating: their status keys have expired on
-- their own (same TTL); drop their index entries too.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
return expiry
