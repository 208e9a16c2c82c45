-- resolve: delete an entry under the lease it is fenced by.
-- KEYS[1] lease, KEYS[2] record
-- ARGV[1] fence token
-- Returns the deleted entry's park id ('' for an entry written before
-- park ids), or false when there was no entry.
key_type(1, 'string')
key_type(2, 'string')
fence(1, ARGV[1])
local raw = redis.call('GET', KEYS[2])
if not raw then
  return false
end
redis.call('DEL', KEYS[2])
local ok, p = pcall(cjson.decode, raw)
if ok and type(p) == 'table' and type(p.parkId) == 'string' then
  return p.parkId
end
return ''
