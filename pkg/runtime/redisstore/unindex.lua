-- unindex: drop an aggregate from a subscription's index, only while the
-- index still points at the given record (a newer Park may have pointed
-- it elsewhere).
-- KEYS[1] index (HASH aggregate -> record key)
-- ARGV[1] aggregate, ARGV[2] record key (a value here, never accessed)
key_type(1, 'hash')
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
