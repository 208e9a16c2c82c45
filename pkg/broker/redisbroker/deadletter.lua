-- deadletter: fenced copy of one entry to a dead-letter stream, then XACK.
-- KEYS[1] lease, KEYS[2] stream, KEYS[3] dead-letter stream
-- ARGV[1] token, ARGV[2] group, ARGV[3] id, ARGV[4] reason
-- Returns the dead-letter entry's id.
--
-- The entry is written in Protean's format (broker.DeadLetterEntry is the
-- Go copy): the original data, a JSON object, with "_dlq_metadata":{...}
-- appended; data that is not a JSON object is kept as it was, with the
-- metadata in a _dlq_metadata field beside it; a body already gone leaves
-- {"_dlq_metadata":{..., "missing":true}}. The original data is never
-- decoded and encoded again here (cjson would round numbers to 14 digits):
-- the metadata is spliced in before the object's closing brace.
key_type(1, 'string')
local st = key_type(2, 'stream')
key_type(3, 'stream')
fence(1, ARGV[1])

local data, missing = nil, true
local consumer, retries = '', 0
if st == 'stream' then
  local e = redis.call('XRANGE', KEYS[2], ARGV[3], ARGV[3])
  if #e > 0 then
    missing = false
    local f = fields(e[1][2])
    data = f['data'] or cjson.encode(f)
  end
  local p = redis.pcall('XPENDING', KEYS[2], ARGV[2], ARGV[3], ARGV[3], 1)
  if type(p) == 'table' and p.err == nil and p[1] then
    consumer, retries = p[1][2], p[1][4]
  end
end

local now = redis.call('TIME')
local meta = {
  original_stream = KEYS[2], original_id = ARGV[3], consumer_group = ARGV[2],
  consumer = consumer, failed_at = iso_time(tonumber(now[1]), tonumber(now[2]), '+00:00'),
  retry_count = retries, failure_reason = ARGV[4],
}
if missing then meta.missing = true end
local mj = cjson.encode(meta)

local args
if missing then
  args = {'XADD', KEYS[3], '*', 'data', '{"_dlq_metadata":' .. mj .. '}'}
else
  local obj, empty = false, false
  if string.match(data, '^%s*{') then
    local ok, v = pcall(cjson.decode, data)
    obj = ok and type(v) == 'table'
    empty = obj and next(v) == nil
  end
  if obj then
    local body = string.match(data, '^%s*(.*)}%s*$')
    local sep = ','
    if empty then sep = '' end
    args = {'XADD', KEYS[3], '*', 'data', body .. sep .. '"_dlq_metadata":' .. mj .. '}'}
  else
    args = {'XADD', KEYS[3], '*', 'data', data, '_dlq_metadata', mj}
  end
end
local id = redis.call(unpack(args))
if st == 'stream' then
  redis.call('XACK', KEYS[2], ARGV[2], ARGV[3])
end
return id
