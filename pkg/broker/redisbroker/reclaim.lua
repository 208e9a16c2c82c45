-- reclaim: one fenced XAUTOCLAIM batch, moving idle pending entries of any
-- consumer (earlier generations) to the caller's consumer. The last batch
-- (cursor back at 0-0) also deletes every other consumer of the group
-- left without pending entries (prune_consumers in lib.lua), in the same
-- script, so that the consumers of earlier generations do not pile up.
-- KEYS[1] lease, KEYS[2] stream
-- ARGV[1] token (the consumer), ARGV[2] group, ARGV[3] min idle ms,
-- ARGV[4] cursor, ARGV[5] count
-- Returns {next cursor, number claimed, {ids deleted from the stream},
-- number of consumers deleted}.
key_type(1, 'string')
local st = key_type(2, 'stream')
fence(1, ARGV[1])
if st == 'none' then
  return {'0-0', 0, {}, 0}
end
local r = redis.pcall('XAUTOCLAIM', KEYS[2], ARGV[2], ARGV[1], ARGV[3], ARGV[4],
  'COUNT', ARGV[5], 'JUSTID')
if type(r) == 'table' and r.err then
  -- No group: nothing is pending, so there is nothing to reclaim.
  if string.sub(r.err, 1, 7) == 'NOGROUP' then
    return {'0-0', 0, {}, 0}
  end
  error(r)
end
local pruned = 0
if r[1] == '0-0' then
  pruned = prune_consumers(2, ARGV[2], ARGV[1])
end
return {r[1], #r[2], r[3] or {}, pruned}
