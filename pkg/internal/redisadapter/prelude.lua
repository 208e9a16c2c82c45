-- prelude.lua starts every script of redisbroker and redisstore (see
-- NewScript in scripts.go), so that type checks, fencing and number
-- comparison read the same in both; each package's lib.lua and then the
-- script itself follow it.
--
-- Errors are raised as tables ({err = ...}) so that Redis replies with our
-- own code as the prefix; the Go side (Map) matches only that prefix and
-- the space-separated words after it:
--   PROTCTL_WRONGTYPE <want> <got> <index of the key in KEYS>
--   PROTCTL_LEASELOST
-- A package's lib.lua lists the codes only its scripts raise. Redis
-- appends " script: <sha>, on @user_script:<line>." to raised errors,
-- which the Go side ignores.

-- key_type returns the type of KEYS[i] and raises PROTCTL_WRONGTYPE unless
-- it is want or none. Scripts call it for every key before their first
-- write, because a Lua script is not rolled back when it fails half way,
-- unless that write is a typed_call (below).
local function key_type(i, want)
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= want then
    error({err = 'PROTCTL_WRONGTYPE ' .. want .. ' ' .. t .. ' ' .. i})
  end
  return t
end

-- typed_call runs a command whose first key is KEYS[i] (redis.pcall(...))
-- and returns its reply. An error reply raises PROTCTL_WRONGTYPE when
-- KEYS[i] is neither want nor missing, and the error itself otherwise. A
-- command refused for its key's type changes nothing, so a script whose
-- first write to KEYS[i] is such a call (or comes after one) needs no
-- key_type before it: the check runs only when something failed, and the
-- hot scripts (the fenced reads and acks, the acquisitions) skip a TYPE
-- call per key, about a microsecond of the server's time each
-- (docs/benchmarks.md, "Lazy type checks").
local function typed_call(i, want, ...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    key_type(i, want)
    error(r)
  end
  return r
end

-- fence raises PROTCTL_LEASELOST unless KEYS[i] (a lease) holds exactly
-- token, and PROTCTL_WRONGTYPE when KEYS[i] is no string (typed_call). A
-- missing (expired, released) lease holds nothing and fails too.
local function fence(i, token)
  if typed_call(i, 'string', 'GET', KEYS[i]) ~= token then
    error({err = 'PROTCTL_LEASELOST'})
  end
end

-- numcmp compares two decimal strings without leading zeros, as Redis
-- formats stream id parts and as offsets are stored. Lua numbers are
-- doubles and cannot hold every 64-bit integer exactly, so these are never
-- converted to numbers for comparison.
local function numcmp(a, b)
  if #a ~= #b then
    if #a < #b then return -1 end
    return 1
  end
  if a == b then return 0 end
  if a < b then return -1 end
  return 1
end

-- iso_time formats secs.micros since the epoch in UTC with microseconds
-- and zone as the offset: 'Z' (RFC 3339, what Go's time.Time reads from
-- JSON) or '+00:00' (what Python's datetime.fromisoformat reads before
-- 3.11: Protean's dead-letter failed_at). Lua in Redis has no os.date, so
-- the civil date is computed from the day number (Howard Hinnant's
-- days-to-civil algorithm; all values are small integers held exactly in
-- doubles).
local function iso_time(secs, micros, zone)
  local days = math.floor(secs / 86400)
  local rem = secs - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m
  if mp < 10 then m = mp + 3 else m = mp - 9 end
  if m <= 2 then y = y + 1 end
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%06d%s', y, m, d,
    math.floor(rem / 3600), math.floor((rem % 3600) / 60), rem % 60, micros, zone)
end
