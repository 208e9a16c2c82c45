-- request: record an operator's retry or skip in the entry. No fence: the
-- owner acts on the request under its own.
-- KEYS[1] record
-- ARGV[1] action (retry|skip), ARGV[2] reason, ARGV[3] by
key_type(1, 'string')
local p = load_record(1)
set_request(p, ARGV[1], ARGV[2], ARGV[3], '')
redis.call('SET', KEYS[1], cjson.encode(p))
return 1
