-- lib.lua is prepended to every script of the package (see scripts.go), so
-- that type checks, fencing and id comparison read the same everywhere.
--
-- Errors are raised as tables ({err = ...}) so that Redis replies with our
-- own code as the prefix; the Go side matches only that prefix and the
-- space-separated words after it:
--   PROTCTL_WRONGTYPE <want> <got> <index of the key in KEYS>
--   PROTCTL_LEASELOST
-- Redis appends " script: <sha>, on @user_script:<line>." to raised
-- errors, which the Go side ignores.

-- key_type returns the type of KEYS[i] and raises PROTCTL_WRONGTYPE unless
-- it is want or none. Scripts call it for every key before their first
-- write, because a Lua script is not rolled back when it fails half way.
local function key_type(i, want)
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= want then
    error({err = 'PROTCTL_WRONGTYPE ' .. want .. ' ' .. t .. ' ' .. i})
  end
  return t
end

-- fence raises PROTCTL_LEASELOST unless KEYS[i] (a lease, type checked
-- already) holds exactly token.
local function fence(i, token)
  if redis.call('GET', KEYS[i]) ~= token then
    error({err = 'PROTCTL_LEASELOST'})
  end
end

-- numcmp compares two decimal strings without leading zeros, as Redis
-- formats stream ids. Lua numbers are doubles and cannot hold every 64-bit
-- id part exactly, so ids are never converted to numbers for comparison.
local function numcmp(a, b)
  if #a ~= #b then
    if #a < #b then return -1 end
    return 1
  end
  if a == b then return 0 end
  if a < b then return -1 end
  return 1
end

-- idcmp compares two stream ids "ms-seq" (a bare "ms" is "ms-0").
local function idcmp(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  if not am then am, as = a, '0' end
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not bm then bm, bs = b, '0' end
  local c = numcmp(am, bm)
  if c ~= 0 then return c end
  return numcmp(as, bs)
end

-- fields turns a flat reply {k1, v1, k2, v2, ...} into a table.
local function fields(flat)
  local t = {}
  for i = 1, #flat, 2 do
    t[flat[i]] = flat[i + 1]
  end
  return t
end

