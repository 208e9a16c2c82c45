-- acquireread: a lease acquisition (as acquire.lua), the newest id of
-- some lanes and, at the generation the caller expects, a first read of
-- some lanes for its group (as read.lua in "new" mode), in one atomic
-- step (broker.BatchAcquirer). Every key the step touches is read before
-- the first write, each read refused for its key's type raising
-- PROTCTL_WRONGTYPE (typed_call): a script is not rolled back when it
-- fails half way, and a lease taken by a call that then fails would be
-- held by nobody who knows it. A lease held by someone else returns
-- before the lanes are looked at.
-- KEYS[1] lease, KEYS[2] generation, KEYS[3 .. 2+nt] the lanes to tail,
-- KEYS[3+nt .. last] the lanes to read, and when ARGV[7] is not empty,
-- KEYS[last+1] (the last key) the category's partition index
-- ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3] nt, ARGV[4] the generation to
-- read at ("0": no read), ARGV[5] group, ARGV[6] count, ARGV[7] the
-- partition key that must be in the index ("": no check)
-- Returns {-1} when ARGV[7] is not in the index (nothing written), {0}
-- when the lease is held (by anyone), else {g, tails, reads}:
-- tails the lanes' newest ids ("0-0" for a missing or empty lane), reads
-- one read_lane flat list per lane to read, empty unless g is ARGV[4]. A
-- lane with no entry is not read (its group is not created): the reader
-- reads it when an entry comes, as it does any lane whose tail was 0-0.
local last = #KEYS
if ARGV[7] ~= '' then
  if typed_call(last, 'set', 'SISMEMBER', KEYS[last], ARGV[7]) == 0 then
    return {-1}
  end
  last = last - 1
end
local held = typed_call(1, 'string', 'GET', KEYS[1])
local gen = check_generation(2)
if held then
  return {0}
end
local nt = tonumber(ARGV[3])
-- A lane to read is usually one to tail as well: each is looked at once.
local newest = {}
local function tail(i)
  local k = KEYS[i]
  if newest[k] == nil then
    local r = typed_call(i, 'stream', 'XREVRANGE', k, '+', '-', 'COUNT', 1)
    if r[1] then
      newest[k] = r[1][1]
    else
      newest[k] = '0-0'
    end
  end
  return newest[k]
end
local tails = {}
for i = 1, nt do
  tails[i] = tail(2 + i)
end
-- The generation take_lease will set (INCR of what check_generation read).
local read = (tonumber(gen) or 0) + 1 == tonumber(ARGV[4])
for i = 3 + nt, last do
  if read then
    tail(i)
  elseif newest[KEYS[i]] == nil then
    -- Not read at this generation: still a stream or nothing, as a
    -- request that names a lane of another type fails whatever it gets.
    key_type(i, 'stream')
  end
end
local g = take_lease(1, 2, ARGV[1], ARGV[2])
local token = ARGV[1] .. ':' .. g
local reads = {}
if read then
  for i = 3 + nt, last do
    if tail(i) == '0-0' then
      reads[#reads + 1] = {}
    else
      reads[#reads + 1] = read_lane(i, token, ARGV[5], ARGV[6], 'new')
    end
  end
end
return {g, tails, reads}
