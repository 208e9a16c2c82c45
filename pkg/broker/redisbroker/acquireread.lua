-- acquireread: a lease acquisition (as acquire.lua), the newest id of
-- some lanes and, at the generation the caller expects, a first read of
-- some lanes for its group (as read.lua in "new" mode), in one atomic
-- step (broker.BatchAcquirer). Every key is type checked before the first
-- write: a script is not rolled back when it fails half way, and a lease
-- taken by a call that then fails would be held by nobody who knows it.
-- KEYS[1] lease, KEYS[2] generation, KEYS[3 .. 2+nt] the lanes to tail,
-- KEYS[3+nt ..] the lanes to read
-- ARGV[1] owner, ARGV[2] ttl in ms, ARGV[3] nt, ARGV[4] the generation to
-- read at ("0": no read), ARGV[5] group, ARGV[6] count
-- Returns {0} when the lease is held (by anyone), else {g, tails, reads}:
-- tails the lanes' newest ids ("0-0" for a missing or empty lane), reads
-- one read_lane flat list per lane to read, empty unless g is ARGV[4]. A
-- lane with no entry is not read (its group is not created): the reader
-- reads it when an entry comes, as it does any lane whose tail was 0-0.
local lt = key_type(1, 'string')
key_type(2, 'string')
check_generation(2)
for i = 3, #KEYS do
  key_type(i, 'stream')
end
if lt ~= 'none' then
  return {0}
end
local g = take_lease(1, 2, ARGV[1], ARGV[2])
local token = ARGV[1] .. ':' .. g
local nt = tonumber(ARGV[3])
local function tail(i)
  local r = redis.call('XREVRANGE', KEYS[i], '+', '-', 'COUNT', 1)
  if r[1] then
    return r[1][1]
  end
  return '0-0'
end
local tails = {}
for i = 1, nt do
  tails[i] = tail(2 + i)
end
local reads = {}
if g == tonumber(ARGV[4]) then
  for i = 3 + nt, #KEYS do
    if tail(i) == '0-0' then
      reads[#reads + 1] = {}
    else
      reads[#reads + 1] = read_lane(i, token, ARGV[5], ARGV[6], 'new')
    end
  end
end
return {g, tails, reads}
