-- leaselib.lua is prepended (after lib.lua) to the scripts that take a
-- lease, acquire.lua, acquireat.lua and acquireread.lua, and to no other:
-- its INCR is a node's command, which the operator's ACL profile does not
-- grant, and the ACL test reads the scripts each role runs with what they
-- include.

-- check_generation returns what KEYS[i], a lease's generation counter,
-- holds (false when missing), and raises PROTCTL_WRONGTYPE unless it is
-- missing or an integer string: INCR would fail on anything else, and the
-- error should say which key is wrong.
local function check_generation(i)
  local g = typed_call(i, 'string', 'GET', KEYS[i])
  if g and not string.match(g, '^%-?%d+$') then
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
