-- seekcancel: withdraws a seek request nobody carried out.
-- KEYS[1] seek request (hash); ARGV[1] request id
-- Returns 'cancelled', or the request's status when it was carried out
-- (or '' when another request replaced it).
key_type(1, 'hash')
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return '' end
local st = redis.call('HGET', KEYS[1], 'status')
if st then return st end
redis.call('DEL', KEYS[1])
return 'cancelled'
