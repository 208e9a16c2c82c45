-- reap: retire a cold partition, or say why not (Protean layout: the
-- index, the registry and the lanes in one script).
-- KEYS[1] index (SET), KEYS[2] registered groups (SET), KEYS[3] main lane,
-- KEYS[4] backfill lane, KEYS[5..] leases the caller saw (STRING)
-- ARGV[1] partition key, ARGV[2] min idle ms, ARGV[3..] the value seen of
-- each lease KEYS[5..] ('' for none)
-- Returns {1} when reaped, else reap_check's or leases_check's verdict
-- (reaplib.lua).
--
-- Everything is checked before the first write, and the script runs
-- atomically, so a publish either lands before the checks (and blocks the
-- reap) or after the delete (and recreates the stream and the index entry),
-- and a lease acquired or renewed to another value after the caller looked
-- keeps the partition.
key_type(1, 'set')
key_type(2, 'set')
local types = {key_type(3, 'stream'), key_type(4, 'stream')}
local tokens = {}
for i = 3, #ARGV do
  tokens[#tokens + 1] = ARGV[i]
end
local registered = redis.call('SMEMBERS', KEYS[2])
local verdict = reap_check({3, 4}, types, registered, tonumber(ARGV[2]))
if verdict then
  return verdict
end
verdict = leases_check(5, tokens)
if verdict then
  return verdict
end
redis.call('SREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[3], KEYS[4])
for i = 5, #KEYS do
  redis.call('DEL', KEYS[i])
end
return {1}
