-- seekcomplete: the owner's end of a seek request, fenced by its lease:
-- with a new checkpoint, set it (backwards too: the one path that may)
-- and record the result, in one step; without one, only record the
-- result (a request for another lease, or one that failed).
-- KEYS[1] lease, KEYS[2] checkpoints, KEYS[3] seek requests, KEYS[4] seek
-- results (HASH partition -> JSON result)
-- ARGV[1] fence token, ARGV[2] partition, ARGV[3] request id, ARGV[4]
-- next offset ('' for none), ARGV[5] the result (JSON)
-- Returns 1 when done, 0 when the request is no longer there (answered,
-- or replaced by another).
key_type(1, 'string')
key_type(2, 'hash')
key_type(3, 'hash')
key_type(4, 'hash')
fence(1, ARGV[1])
local raw = redis.call('HGET', KEYS[3], ARGV[2])
if not raw then
  return 0
end
local ok, req = pcall(cjson.decode, raw)
if not ok or type(req) ~= 'table' or req.id ~= ARGV[3] then
  return 0
end
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[4])
end
redis.call('HDEL', KEYS[3], ARGV[2])
redis.call('HSET', KEYS[4], ARGV[2], ARGV[5])
return 1
