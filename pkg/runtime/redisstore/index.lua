-- index: add or drop one record of an aggregate in a subscription's
-- ledger index (ParkedEntriesKey), a HASH aggregate -> the aggregate's
-- records, one per partition it is parked on.
-- KEYS[1] index
-- ARGV[1] 'add' | 'drop', ARGV[2] aggregate, ARGV[3] record key (a value
-- here, never accessed), ARGV[4] park id
--
-- A field's value is a sequence of pairs (record key, park id), each
-- string written as <byte length>:<bytes>; binary-safe, unlike JSON
-- through cjson and Go. 'add' sets the record's park id (a new park of
-- the record replaces it) and returns 1 when the record was not listed.
-- 'drop' removes the record only while it still holds the given park id:
-- a resolve that ran late must not drop the entry of a newer park of the
-- same record. It returns 1 when it removed it. A field left with no
-- record is deleted.
key_type(1, 'hash')

local function decode(s)
  local out, pos = {}, 1
  while pos <= #s do
    local colon = string.find(s, ':', pos, true)
    if not colon then
      error({err = 'PROTCTL_BADRECORD 1'})
    end
    local n = tonumber(string.sub(s, pos, colon - 1))
    if not n then
      error({err = 'PROTCTL_BADRECORD 1'})
    end
    out[#out + 1] = string.sub(s, colon + 1, colon + n)
    pos = colon + n + 1
  end
  if #out % 2 ~= 0 then
    error({err = 'PROTCTL_BADRECORD 1'})
  end
  return out
end

local function encode(t)
  local parts = {}
  for i = 1, #t do
    parts[i] = #t[i] .. ':' .. t[i]
  end
  return table.concat(parts)
end

local cur = redis.call('HGET', KEYS[1], ARGV[2])
local pairs_ = {}
if cur then
  pairs_ = decode(cur)
end
local at = nil
for i = 1, #pairs_, 2 do
  if pairs_[i] == ARGV[3] then
    at = i
  end
end

if ARGV[1] == 'add' then
  if at then
    pairs_[at + 1] = ARGV[4]
  else
    pairs_[#pairs_ + 1] = ARGV[3]
    pairs_[#pairs_ + 1] = ARGV[4]
  end
  redis.call('HSET', KEYS[1], ARGV[2], encode(pairs_))
  if at then return 0 end
  return 1
end

if not at or pairs_[at + 1] ~= ARGV[4] then
  return 0
end
table.remove(pairs_, at + 1)
table.remove(pairs_, at)
if #pairs_ == 0 then
  redis.call('HDEL', KEYS[1], ARGV[2])
else
  redis.call('HSET', KEYS[1], ARGV[2], encode(pairs_))
end
return 1
