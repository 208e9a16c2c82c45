-- reap: retire a cold partition, or say why not.
-- KEYS[1] index (SET), KEYS[2] registered groups (SET), KEYS[3] main lane,
-- KEYS[4] backfill lane
-- ARGV[1] partition key, ARGV[2] min idle ms
-- Returns {1} when reaped, else {0, lane, group, reason, detail} where
-- reason is one of: nogroup, pending (detail: count), behind (detail:
-- "last-delivered last-entry"), unregistered, young (detail: age ms).
--
-- Everything is checked before the first write, and the script runs
-- atomically, so a publish either lands before the checks (and blocks the
-- reap) or after the delete (and recreates the stream and the index entry).
key_type(1, 'set')
key_type(2, 'set')
local types = {key_type(3, 'stream'), key_type(4, 'stream')}

local registered = redis.call('SMEMBERS', KEYS[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local minidle = tonumber(ARGV[2])

for lane = 3, 4 do
  if types[lane - 2] == 'stream' then
    local key = KEYS[lane]
    local info = fields(redis.call('XINFO', 'STREAM', key))
    local len = info['length']
    local last = info['last-entry']
    local groups = redis.call('XINFO', 'GROUPS', key)
    if len > 0 and #groups == 0 then
      return {0, key, '', 'nogroup', ''}
    end
    local present = {}
    for _, flat in ipairs(groups) do
      local g = fields(flat)
      present[g['name']] = true
      if g['pending'] > 0 then
        return {0, key, g['name'], 'pending', tostring(g['pending'])}
      end
      if last and idcmp(g['last-delivered-id'], last[1]) < 0 then
        return {0, key, g['name'], 'behind', g['last-delivered-id'] .. ' ' .. last[1]}
      end
    end
    if len > 0 then
      for _, name in ipairs(registered) do
        if not present[name] then
          return {0, key, name, 'unregistered', ''}
        end
      end
    end
    -- The newest entry's age: last-generated-id also covers entries that
    -- were appended and then deleted or trimmed.
    local ms = tonumber(string.match(info['last-generated-id'], '^(%d+)'))
    if now - ms < minidle then
      return {0, key, '', 'young', tostring(now - ms)}
    end
  end
end

redis.call('SREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[3], KEYS[4])
return {1}
