-- deadletter: fenced copy of one entry to a dead-letter stream, then XACK.
-- KEYS[1] lease, KEYS[2] stream, KEYS[3] dead-letter stream
-- ARGV[1] token, ARGV[2] group, ARGV[3] id, ARGV[4] reason
-- Returns the dead-letter entry's id.
key_type(1, 'string')
local st = key_type(2, 'stream')
key_type(3, 'stream')
fence(1, ARGV[1])

local data, missing = '', true
if st == 'stream' then
  local e = redis.call('XRANGE', KEYS[2], ARGV[3], ARGV[3])
  if #e > 0 then
    missing = false
    local f = fields(e[1][2])
    if f['data'] then
      data = f['data']
    else
      data = cjson.encode(f)
    end
  end
end

local args = {'XADD', KEYS[3], '*', 'data', data}
if missing then
  table.insert(args, 'missing')
  table.insert(args, '1')
end
for _, v in ipairs({'origin_stream', KEYS[2], 'origin_id', ARGV[3],
    'group', ARGV[2], 'reason', ARGV[4]}) do
  table.insert(args, v)
end
local id = redis.call(unpack(args))
if st == 'stream' then
  redis.call('XACK', KEYS[2], ARGV[2], ARGV[3])
end
return id
