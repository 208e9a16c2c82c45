-- read: fenced XREADGROUP of one partition lane.
-- KEYS[1] lease, KEYS[2] stream
-- ARGV[1] token (also the consumer name), ARGV[2] group, ARGV[3] count,
-- ARGV[4] mode: "pending", "new" or "both" (pending, and new when there is
-- no pending entry).
-- Returns the stream's entries as XREADGROUP does: {{id, {f, v, ...}}, ...};
-- a pending entry whose body was deleted is {id, false} (nil to the client).
key_type(1, 'string')
key_type(2, 'stream')
fence(1, ARGV[1])

local created = false
local function xread(id)
  for attempt = 1, 2 do
    local r = redis.pcall('XREADGROUP', 'GROUP', ARGV[2], ARGV[1], 'COUNT', ARGV[3],
      'STREAMS', KEYS[2], id)
    if type(r) == 'table' and r.err then
      -- The group (or the stream) is missing: create both from id 0, once
      -- per call, and read again. This is also how a group deleted under a
      -- running owner is recovered.
      if string.sub(r.err, 1, 7) ~= 'NOGROUP' or created then
        error(r)
      end
      local c = redis.pcall('XGROUP', 'CREATE', KEYS[2], ARGV[2], '0', 'MKSTREAM')
      if type(c) == 'table' and c.err and string.sub(c.err, 1, 9) ~= 'BUSYGROUP' then
        error(c)
      end
      created = true
    else
      if not r then
        return {}
      end
      return r[1][2]
    end
  end
  return {}
end

local mode = ARGV[4]
if mode == 'new' then
  return xread('>')
end
local pending = xread('0')
if mode == 'pending' or #pending > 0 then
  return pending
end
return xread('>')
