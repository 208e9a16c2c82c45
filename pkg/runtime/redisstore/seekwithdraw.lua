-- seekwithdraw: take back an operator's seek request the owner has not
-- carried out (topics seek gave up waiting; docs/decisions/0044-topic-seek.md),
-- only while it is still pending under the same id: once the owner
-- answered (seekcomplete.lua removes the request in the same step as it
-- sets the checkpoint), or another request replaced it, nothing changes.
-- KEYS[1] seek requests (HASH partition -> JSON request)
-- ARGV[1] partition, ARGV[2] request id
-- Returns 1 when withdrawn, 0 otherwise.
key_type(1, 'hash')
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then
  return 0
end
local ok, req = pcall(cjson.decode, raw)
if not ok or type(req) ~= 'table' or req.id ~= ARGV[2] then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
