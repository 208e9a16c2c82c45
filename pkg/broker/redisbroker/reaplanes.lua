-- reaplanes: the cluster layout's reap of one partition's lanes, which
-- share the partition's slot (so do its leases); the index and the group
-- registry live in other slots, so the caller reads the registry
-- beforehand and removes (or restores) the index entry around this script
-- (see maintain.go).
-- KEYS[1] main lane, KEYS[2] backfill lane, KEYS[3..] leases the caller
-- saw (STRING)
-- ARGV[1] min idle ms, ARGV[2] "check" (verdict only) or "delete",
-- ARGV[3] n, the number of leases; ARGV[4..3+n] the value seen of each
-- lease KEYS[3..] ('' for none); ARGV[4+n..] registered groups
-- Returns {1} when the lanes are cold and the leases as seen (and, with
-- "delete", deleted), else reap_check's or leases_check's verdict
-- (reaplib.lua). Nothing is written unless cold.
local types = {key_type(1, 'stream'), key_type(2, 'stream')}
local n = tonumber(ARGV[3])
local tokens = {}
for i = 4, 3 + n do
  tokens[#tokens + 1] = ARGV[i]
end
local registered = {}
for i = 4 + n, #ARGV do
  registered[#registered + 1] = ARGV[i]
end
local verdict = reap_check({1, 2}, types, registered, tonumber(ARGV[1]))
if verdict then
  return verdict
end
verdict = leases_check(3, tokens)
if verdict then
  return verdict
end
if ARGV[2] == 'delete' then
  redis.call('DEL', KEYS[1], KEYS[2])
  for i = 3, #KEYS do
    redis.call('DEL', KEYS[i])
  end
end
return {1}
