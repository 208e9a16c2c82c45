-- seek: moves a group's position on a partition's lanes (XGROUP SETID)
-- and settles its pending entries, in one step, against the lease.
-- KEYS[1] lease, KEYS[2] generation counter, KEYS[3] seek request (a
-- hash, SeekRequestKey), KEYS[4..] the lanes
-- ARGV[1] mode, ARGV[2] group
--   'free':    ARGV[3] the generation the plan saw ('' for none); for
--              each of the n lanes ARGV[3+i] the position the lane must
--              still have ('*': any), ARGV[3+n+i] the target and
--              ARGV[3+2n+i] the position the plan saw ('' unknown). The
--              lease must be free and the counter and positions
--              unchanged.
--   'release': as 'free', with ARGV[4+3n] a lease token: the lease may
--              hold exactly it (the operator's --force takes the
--              partition from its holder), and is deleted once every
--              check passed.
--   'request': ARGV[3] the caller's fence token, ARGV[4] its generation.
--              The targets (and the positions the plan saw) are the
--              waiting request's in KEYS[3]; the lease must hold the
--              token, and the request must have been made against it.
-- Returns {status, ...}: 'applied' followed by one {stream, from, to,
-- acked, kept} per lane with the group; 'leased' {value seen}; 'moved'
-- {stream, position now}; 'none' (request mode: nothing waiting);
-- 'conflict' {token the request was made against}.
--
-- Direction: the plan's, from the position it saw (P) to the target (T),
-- never the one the lane's position at this moment (C) suggests. The
-- owner reads on between the plan and its next batch boundary, and may
-- have passed T: a planned forward move must not turn into a rewind
-- (handing back entries the operator asked to skip, some of them handled
-- already), nor a planned rewind into a skip. So:
--   forward (P < T): the position becomes max(T, C); pending entries at
--     or before T are acked (skipped, as planned); those after T were
--     delivered past the target and stay pending, handled first.
--   rewind (T < P): the position becomes min(T, C); pending entries after
--     it are acked, so that the read from it delivers them again, once
--     and in order, and nothing else holds them; those at or before it
--     stay pending: never finished, handled first.
--   none (T = P): the lane is left alone.
-- Without a planned position (an older request) C stands for P.
key_type(1, 'string')
key_type(2, 'string')
key_type(3, 'hash')
for i = 4, #KEYS do key_type(i, 'stream') end
local group = ARGV[2]

local function position(i)
  if redis.call('EXISTS', KEYS[i]) == 0 then return nil end
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[i])) do
    local f = fields(g)
    if f['name'] == group then return f['last-delivered-id'] end
  end
  return nil
end

local function settle(i, to, planned)
  local from = position(i)
  if not from then return nil end
  if not planned or planned == '' or planned == '*' then planned = from end
  local dir = idcmp(to, planned)
  local pos = to
  if (dir > 0 and idcmp(from, to) > 0) or (dir < 0 and idcmp(from, to) < 0) or dir == 0 then pos = from end
  local ids, kept = {}, 0
  local start = '-'
  while true do
    local p = redis.call('XPENDING', KEYS[i], group, start, '+', 1000)
    for _, e in ipairs(p) do
      local ack
      if dir > 0 then ack = idcmp(e[1], to) <= 0 elseif dir < 0 then ack = idcmp(e[1], pos) > 0 else ack = false end
      if ack then ids[#ids + 1] = e[1] else kept = kept + 1 end
    end
    if #p < 1000 then break end
    start = '(' .. p[#p][1]
  end
  for j = 1, #ids, 1000 do
    redis.call('XACK', KEYS[i], group, unpack(ids, j, math.min(j + 999, #ids)))
  end
  if pos ~= from then redis.call('XGROUP', 'SETID', KEYS[i], group, pos) end
  return {KEYS[i], from, pos, #ids, kept}
end

local n = #KEYS - 3
if ARGV[1] == 'free' or ARGV[1] == 'release' then
  local lease = redis.call('GET', KEYS[1])
  if lease and (ARGV[1] == 'free' or lease ~= ARGV[4 + 3 * n]) then return {'leased', lease} end
  local g = redis.call('GET', KEYS[2]) or ''
  if g ~= ARGV[3] then return {'leased', 'generation ' .. g} end
  for i = 1, n do
    local now = position(3 + i) or ''
    if ARGV[3 + i] ~= '*' and now ~= ARGV[3 + i] then return {'moved', KEYS[3 + i], now} end
  end
  -- Every check passed: take the partition from the lease's holder.
  if lease then redis.call('DEL', KEYS[1]) end
  local out = {'applied'}
  for i = 1, n do
    local r = settle(3 + i, ARGV[3 + n + i], ARGV[3 + 2 * n + i])
    if r then out[#out + 1] = r end
  end
  return out
end

-- request mode
local req = KEYS[3]
local id = redis.call('HGET', req, 'id')
if not id or redis.call('HEXISTS', req, 'status') == 1 then return {'none'} end
fence(1, ARGV[3])
local t = redis.call('TIME')
local now = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local planned = redis.call('HGET', req, 'token')
if planned ~= ARGV[3] then
  redis.call('HSET', req, 'status', 'conflict', 'doneAt', now, 'generation', ARGV[4],
    'detail', 'the lease is now ' .. ARGV[3] .. ', the plan saw ' .. tostring(planned))
  return {'conflict', tostring(planned)}
end
local idx = {}
for i = 4, #KEYS do idx[KEYS[i]] = i end
local lanes = cjson.decode(redis.call('HGET', req, 'lanes'))
for _, l in ipairs(lanes) do
  if not idx[l.stream] then
    redis.call('HSET', req, 'status', 'conflict', 'doneAt', now, 'generation', ARGV[4],
      'detail', 'the owner does not read ' .. l.stream)
    return {'conflict', tostring(planned)}
  end
end
local out, res = {'applied'}, {}
for _, l in ipairs(lanes) do
  local r = settle(idx[l.stream], l.to, l.from)
  if r then
    out[#out + 1] = r
    res[#res + 1] = {stream = r[1], from = r[2], to = r[3], acked = r[4], kept = r[5]}
  end
end
local enc = '[]'
if #res > 0 then enc = cjson.encode(res) end
redis.call('HSET', req, 'status', 'applied', 'doneAt', now, 'generation', ARGV[4], 'result', enc)
return out
