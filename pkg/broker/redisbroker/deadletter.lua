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

-- iso_utc formats TIME's seconds and microseconds as
-- broker.FailedAtLayout (days to a civil date: H. Hinnant's algorithm).
local function iso_utc(sec, usec)
  local days = math.floor(sec / 86400)
  local rem = sec - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%06d+00:00', y, m, d,
    math.floor(rem / 3600), math.floor(rem % 3600 / 60), rem % 60, usec)
end

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
  consumer = consumer, failed_at = iso_utc(tonumber(now[1]), tonumber(now[2])),
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
