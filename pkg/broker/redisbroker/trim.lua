-- trim: cap a stream at its newest maxLen entries without removing
-- anything a consumer group still needs.
-- KEYS[1] stream, KEYS[2..] group registries (SETs) the stream may belong to
-- ARGV[1] maxLen (positive), ARGV[2..] registered groups read by the caller
-- (the cluster layout, whose registries live in other slots, passes the
-- groups instead of the registries)
-- Returns the number of entries removed.
--
-- The safe floor is the smallest, over all groups, of the group's
-- last-delivered id and its oldest pending id: entries at or after it are
-- either not delivered yet or delivered and not acknowledged. A registered
-- group that has not created itself on the stream yet will read it from
-- id 0, so its floor is 0-0 and nothing is removed. The script removes
-- only entries older than both the floor and the maxLen cutoff (the oldest
-- of the newest maxLen entries): it keeps the newest maxLen entries and
-- everything any group still needs.
local st = key_type(1, 'stream')
for i = 2, #KEYS do
  key_type(i, 'set')
end
if st == 'none' then
  return 0
end
local maxlen = tonumber(ARGV[1])
local len = redis.call('XLEN', KEYS[1])
if len <= maxlen then
  return 0
end

local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
local present = {}
for _, flat in ipairs(groups) do
  present[fields(flat)['name']] = true
end
for i = 2, #KEYS do
  for _, name in ipairs(redis.call('SMEMBERS', KEYS[i])) do
    if not present[name] then
      return 0
    end
  end
end
for i = 2, #ARGV do
  if not present[ARGV[i]] then
    return 0
  end
end
if #groups == 0 then
  return redis.call('XTRIM', KEYS[1], 'MAXLEN', '=', maxlen)
end

local floor = nil
for _, flat in ipairs(groups) do
  local g = fields(flat)
  local low = g['last-delivered-id']
  if g['pending'] > 0 then
    local p = redis.call('XPENDING', KEYS[1], g['name'])
    if p[2] and idcmp(p[2], low) < 0 then
      low = p[2]
    end
  end
  if floor == nil or idcmp(low, floor) < 0 then
    floor = low
  end
end

-- The cutoff is the entry at index len-maxlen (0-based), read from the
-- nearer end of the stream.
local cutoff
local drop = len - maxlen
if drop < maxlen then
  local r = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', drop + 1)
  cutoff = r[#r][1]
else
  local r = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', maxlen)
  cutoff = r[#r][1]
end

local minid = cutoff
if idcmp(floor, minid) < 0 then
  minid = floor
end
return redis.call('XTRIM', KEYS[1], 'MINID', '=', minid)
