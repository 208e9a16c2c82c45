-- dlqdelete: an operator's purge of one dead letter (protctl dlq purge):
-- delete it only while it is still the one the plan saw (its fields'
-- digest), so that a purge removes exactly the entries planned, whatever
-- was dead-lettered since.
-- KEYS[1] dead-letter stream
-- ARGV[1] dead-letter id, ARGV[2] digest
-- Returns 'deleted', 'gone' (no such dead letter) or 'changed' (the id
-- holds other fields than the plan saw).
key_type(1, 'stream')
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #e == 0 then
  return 'gone'
end
if entry_digest(e[1][2]) ~= ARGV[2] then
  return 'changed'
end
redis.call('XDEL', KEYS[1], ARGV[1])
return 'deleted'
