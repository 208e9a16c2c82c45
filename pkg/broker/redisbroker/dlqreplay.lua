-- dlqreplay: an operator's replay of one dead letter (protctl dlq
-- replay): append the entry given to the destination stream and delete
-- the dead letter, in one step, only while the dead letter is still the
-- one the plan saw (its fields' digest). Moving rather than copying is
-- what makes a replay happen at most once: a dead letter can be replayed
-- only while it exists, and the step that replays it deletes it. The
-- marker hash remembers, for a while, which dead letters were replayed and
-- as what, so that applying the same plan again reports "already
-- replayed" instead of "gone".
-- KEYS[1] dead-letter stream, KEYS[2] destination stream, KEYS[3] marker
-- hash, KEYS[4] (Protean layout, a partition's replay only) the index
-- ARGV[1] dead-letter id, ARGV[2] digest, ARGV[3] marker TTL ms,
-- ARGV[4] partition key ("" when KEYS[4] is absent), ARGV[5] wake
-- channel, ARGV[6..] the new entry's field/value pairs
-- Returns {verdict, id}: 'replayed' with the new entry's id; 'already'
-- with the id it was replayed as; 'gone' (no such dead letter);
-- 'changed' (the id holds other fields than the plan saw).
key_type(1, 'stream')
key_type(2, 'stream')
key_type(3, 'hash')
if #KEYS >= 4 then key_type(4, 'set') end

local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #e == 0 then
  local prev = redis.call('HGET', KEYS[3], ARGV[1])
  if prev then return {'already', prev} end
  return {'gone', ''}
end
if entry_digest(e[1][2]) ~= ARGV[2] then
  return {'changed', ''}
end
local args = {'XADD', KEYS[2], '*'}
for i = 6, #ARGV do table.insert(args, ARGV[i]) end
local id = redis.call(unpack(args))
redis.call('XDEL', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], id)
redis.call('PEXPIRE', KEYS[3], ARGV[3])
if #KEYS >= 4 then
  redis.call('SADD', KEYS[4], ARGV[4])
  redis.call('PUBLISH', ARGV[5], ARGV[4])
end
return {'replayed', id}
