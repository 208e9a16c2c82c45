-- ack: fenced XACK of many ids of one partition lane.
-- KEYS[1] lease, KEYS[2] stream
-- ARGV[1] token, ARGV[2] group, ARGV[3..] ids
-- Returns how many of the ids were pending.
key_type(1, 'string')
local st = key_type(2, 'stream')
fence(1, ARGV[1])
if st == 'none' or #ARGV < 3 then
  return 0
end
return ack_ids(2, ARGV[2], 3)
