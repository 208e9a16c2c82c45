-- members: the live nodes of a service by the server's clock.
-- KEYS[1] members (ZSET node -> expiry ms)
-- Returns the nodes whose expiry is after now. It writes nothing (it may
-- run on a replica); heartbeats prune expired members.
key_type(1, 'zset')
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.0f', now_ms()), '+inf')
