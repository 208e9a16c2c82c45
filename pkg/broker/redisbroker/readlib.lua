-- readlib.lua is prepended (after lib.lua) to the scripts that read a
-- partition lane for a group, read.lua and ackread.lua, so that both read
-- exactly the same way.

-- read_lane reads up to count entries of KEYS[si] for group as consumer
-- (the fence token). mode is "pending", "new" or "both" (pending, and new
-- when there is no pending entry). It returns a flat list {id1, v1, id2,
-- v2, ...}, where v is the entry's data field (a string), false for a
-- pending entry whose body was deleted, or the entry's whole field list
-- {f, v, ...} when it has no data field (written by another tool). The
-- flat form costs the client a fraction of the allocations of
-- XREADGROUP's nested reply.
--
-- A missing group (or stream) is created from id 0 with MKSTREAM, once
-- per call, and the read retried; this is also how a group deleted under
-- a running owner is recovered. A key of another type raises
-- PROTCTL_WRONGTYPE (checked only then, as typed_call does).
local function read_lane(si, consumer, group, count, mode)
  local created = false
  local function xread(id)
    for attempt = 1, 2 do
      local r = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count,
        'STREAMS', KEYS[si], id)
      if type(r) == 'table' and r.err then
        if string.sub(r.err, 1, 7) ~= 'NOGROUP' or created then
          key_type(si, 'stream') -- raises PROTCTL_WRONGTYPE if that is why
          error(r)
        end
        local c = redis.pcall('XGROUP', 'CREATE', KEYS[si], group, '0', 'MKSTREAM')
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

  local entries
  if mode == 'new' then
    entries = xread('>')
  else
    entries = xread('0')
    if mode ~= 'pending' and #entries == 0 then
      entries = xread('>')
    end
  end

  local out = {}
  for i, e in ipairs(entries) do
    local v = e[2]
    if v then
      local data = nil
      for j = 1, #v, 2 do
        if v[j] == 'data' then
          data = v[j + 1]
          break
        end
      end
      if data then
        v = data
      end
    end
    out[2 * i - 1] = e[1]
    out[2 * i] = v
  end
  return out
end

-- ack_ids acknowledges ARGV[from..] for group on KEYS[si] and returns how
-- many were pending (0 for a missing stream); a key of another type
-- raises PROTCTL_WRONGTYPE before anything is acknowledged. unpack is
-- bounded by the Lua C stack, so it acknowledges in chunks.
local function ack_ids(si, group, from)
  local n = 0
  for i = from, #ARGV, 1000 do
    local j = math.min(i + 999, #ARGV)
    n = n + typed_call(si, 'stream', 'XACK', KEYS[si], group, unpack(ARGV, i, j))
  end
  return n
end

