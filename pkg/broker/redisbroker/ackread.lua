-- ackread: fenced XACK of the batch just handled, then the same read as
-- read.lua, in one step: an owner's steady loop costs one round trip per
-- batch. A stale token changes nothing: the fence is checked before the
-- ack. Keys are type checked only when a call fails (typed_call): the
-- ack and the read are the first writes, and a call refused for its
-- key's type changes nothing.
-- KEYS[1] lease, KEYS[2] stream
-- ARGV[1] token (also the consumer name), ARGV[2] group, ARGV[3] count,
-- ARGV[4] mode ("pending", "new" or "both"), ARGV[5..] ids to acknowledge
-- (none is allowed: then it only reads).
-- Returns read_lane's flat list {id, data-or-false-or-fields, ...}.
fence(1, ARGV[1])
if #ARGV >= 5 then
  ack_ids(2, ARGV[2], 5)
end
return read_lane(2, ARGV[1], ARGV[2], ARGV[3], ARGV[4])
