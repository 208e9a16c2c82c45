-- ack: fenced XACK of many ids of one partition lane. Keys are type
-- checked only when a call fails (fence and ack_ids).
-- KEYS[1] lease, KEYS[2] stream
-- ARGV[1] token, ARGV[2] group, ARGV[3..] ids
-- Returns how many of the ids were pending (0 for a missing stream).
fence(1, ARGV[1])
if #ARGV < 3 then
  -- Still a stream or nothing: an ack of no id must not pass over a key
  -- of the wrong type that an ack of some would refuse.
  key_type(2, 'stream')
  return 0
end
return ack_ids(2, ARGV[2], 3)
