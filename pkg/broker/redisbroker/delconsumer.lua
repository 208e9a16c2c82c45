-- delconsumer: an operator's fenced delete of one stale consumer (protctl
-- partitions prune-consumers). XGROUP DELCONSUMER destroys the consumer's
-- pending entries, so it runs only when the consumer has none, and never
-- on the consumer the partition's live lease names (its owner reads as
-- that token), both checked in this script, right before the delete.
-- KEYS[1] the group's lease on the partition, KEYS[2] stream
-- ARGV[1] group, ARGV[2] consumer
-- Returns {verdict, pending}: 'deleted'; 'gone' (no such stream, group or
-- consumer: nothing to do); 'pending' with the consumer's pending count;
-- 'lease' (the consumer is the live lease's token).
key_type(1, 'string')
local st = key_type(2, 'stream')
if st == 'none' then
  return {'gone', 0}
end
if redis.call('GET', KEYS[1]) == ARGV[2] then
  return {'lease', 0}
end
local r = redis.pcall('XINFO', 'CONSUMERS', KEYS[2], ARGV[1])
if type(r) == 'table' and r.err then
  if string.sub(r.err, 1, 7) == 'NOGROUP' then
    return {'gone', 0}
  end
  error(r)
end
for _, c in ipairs(r) do
  local f = fields(c)
  if f['name'] == ARGV[2] then
    local n = tonumber(f['pending'])
    if n ~= 0 then
      return {'pending', n}
    end
    redis.call('XGROUP', 'DELCONSUMER', KEYS[2], ARGV[1], ARGV[2])
    return {'deleted', 0}
  end
end
return {'gone', 0}
