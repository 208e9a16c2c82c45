-- pause: set or remove one operator's pause entry, if it is still as the
-- caller saw it (a plan's re-check), and say so.
-- KEYS[1] pauses HASH
-- ARGV[1] selector, ARGV[2] the entry as seen ('' = none),
-- ARGV[3] 'set' or 'remove', ARGV[4] by, ARGV[5] reason
-- Returns {1, entry} when done, {0, current or ''} when the entry changed.
key_type(1, 'hash')
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then cur = '' end
if cur ~= ARGV[2] then
  return {0, cur}
end
if ARGV[3] == 'remove' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return {1, cur}
end
local e = cjson.encode({selector = ARGV[1], by = ARGV[4], at = iso_now(), reason = ARGV[5]})
redis.call('HSET', KEYS[1], ARGV[1], e)
return {1, e}
