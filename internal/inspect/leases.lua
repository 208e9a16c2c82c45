-- leases.lua: many leases and generations in one call, read-only.
-- KEYS: lease1, generation1, lease2, generation2, ...
-- Returns three values per pair, flat: the lease's value (nil when
-- missing or not a string, as MGET), its PTTL, the generation's value.
local out = {}
for i = 1, #KEYS, 2 do
  local v = redis.call('MGET', KEYS[i], KEYS[i + 1])
  out[#out + 1] = v[1]
  out[#out + 1] = redis.call('PTTL', KEYS[i])
  out[#out + 1] = v[2]
end
return out
