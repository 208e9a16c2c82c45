-- reaplanes: the cluster layout's reap of one partition's lanes, which
-- share the partition's slot; the index and the group registry live in
-- other slots, so the caller reads the registry beforehand and removes
-- (or restores) the index entry around this script (see maintain.go).
-- KEYS[1] main lane, KEYS[2] backfill lane
-- ARGV[1] min idle ms, ARGV[2] "check" (verdict only) or "delete",
-- ARGV[3..] registered groups
-- Returns {1} when the lanes are cold (and, with "delete", deleted), else
-- reap_check's verdict (reaplib.lua). Nothing is written unless cold.
local types = {key_type(1, 'stream'), key_type(2, 'stream')}
local registered = {}
for i = 3, #ARGV do
  registered[#registered + 1] = ARGV[i]
end
local verdict = reap_check({1, 2}, types, registered, tonumber(ARGV[1]))
if verdict then
  return verdict
end
if ARGV[2] == 'delete' then
  redis.call('DEL', KEYS[1], KEYS[2])
end
return {1}
