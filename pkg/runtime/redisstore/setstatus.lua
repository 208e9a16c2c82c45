-- setstatus: the owner took up an entry: set its status, clear its request.
-- KEYS[1] lease, KEYS[2] record
-- ARGV[1] fence token, ARGV[2] status
key_type(1, 'string')
key_type(2, 'string')
fence(1, ARGV[1])
local p = load_record(2)
p.status = ARGV[2]
p.request = nil
redis.call('SET', KEYS[2], cjson.encode(p))
return 1
