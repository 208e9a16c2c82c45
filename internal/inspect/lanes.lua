-- lanes.lua: the state of many lanes (streams) in one call, read-only.
-- KEYS: lane streams. Returns, per key, in order:
--   {0}                                a missing key
--   {2, type}                          a key of another type
--   {1, length, newestId|nil, groups}  a stream; groups is XINFO GROUPS
-- It reads what a pipeline of TYPE, XLEN, XREVRANGE + - COUNT 1 and XINFO
-- GROUPS per lane reads, without a command's dispatch and reply per lane:
-- see internal/inspect/scripted.go.
local out = {}
for i, k in ipairs(KEYS) do
  local t = redis.call('TYPE', k)['ok']
  if t == 'none' then
    out[i] = {0}
  elseif t ~= 'stream' then
    out[i] = {2, t}
  else
    local newest = redis.call('XREVRANGE', k, '+', '-', 'COUNT', 1)
    local id = false
    if newest[1] then
      id = newest[1][1]
    end
    out[i] = {1, redis.call('XLEN', k), id, redis.call('XINFO', 'GROUPS', k)}
  end
end
return out
