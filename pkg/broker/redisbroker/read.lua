-- read: fenced XREADGROUP of one partition lane (see read_lane in
-- readlib.lua). Keys are type checked only when a call fails (fence and
-- read_lane).
-- KEYS[1] lease, KEYS[2] stream
-- ARGV[1] token (also the consumer name), ARGV[2] group, ARGV[3] count,
-- ARGV[4] mode: "pending", "new" or "both" (pending, and new when there is
-- no pending entry).
-- Returns read_lane's flat list {id, data-or-false-or-fields, ...}.
fence(1, ARGV[1])
return read_lane(2, ARGV[1], ARGV[2], ARGV[3], ARGV[4])
