-- leaselib.lua is prepended (after lib.lua) to the scripts that take a
-- lease, acquire.lua, acquireat.lua and acquireread.lua, and to no other:
-- its INCR is a node's command, which the operator's ACL profile does not
-- grant, and the ACL test reads the scripts each role runs with what they
-- include.

-- generation_ok says whether the string g is a generation counter a
-- lease can be taken from: a non-negative integer written as Redis
-- writes one (no sign, no leading zero, no space), which INCR takes, and
-- whose successor has at most 14 digits. Lua holds numbers as doubles
-- and writes them with 14 significant digits: a generation of 15 digits
-- would be written into the lease as 1.2345678901234e+14, a token that
-- matches nobody's, and generation 0 is the scripts' "held". Equal-length
-- digit strings compare as their numbers.
local function generation_ok(g)
  if g == '0' then
    return true
  end
  if not string.match(g, '^[1-9]%d*$') then
    return false
  end
  return #g < 14 or (#g == 14 and g < '99999999999999')
end

-- check_generation returns what KEYS[i], a lease's generation counter,
-- holds (false when missing), and raises PROTCTL_WRONGTYPE unless it is
-- missing or a counter a lease can be taken from (generation_ok): INCR
-- would fail on most else ("007", "+7", " 7"), or the lease would come
-- out wrong, and the error should say which key is wrong.
local function check_generation(i)
  local g = typed_call(i, 'string', 'GET', KEYS[i])
  if g and not generation_ok(g) then
    error({err = 'PROTCTL_WRONGTYPE integer string ' .. i})
  end
  return g
end

-- take_lease increments the generation KEYS[gi] and sets the lease
-- KEYS[li] (free) to owner:generation for ttl milliseconds, and returns
-- the generation.
local function take_lease(li, gi, owner, ttl)
  local g = redis.call('INCR', KEYS[gi])
  redis.call('SET', KEYS[li], owner .. ':' .. g, 'PX', ttl)
  return g
end
