-- requestpinned: record an operator's request on a parked entry only
-- while the entry is in the state the request was decided on, and at most
-- once per token. No fence: the owner acts on the request under its own.
-- KEYS[1] record, KEYS[2] marker (RequestMarkerKey of the record and token)
-- ARGV[1] action (retry|skip), ARGV[2] reason, ARGV[3] by, ARGV[4] token,
-- ARGV[5] marker ttl (ms), ARGV[6] pinned position, ARGV[7] pinned
-- attempts, ARGV[8] pinned generation, ARGV[9] pinned status, ARGV[10]
-- pinned request action ('' for none)
-- Returns {'ok', requestedAt}, {'done', marker JSON} when the token was
-- recorded here before, or {'changed', record JSON} when the entry no
-- longer matches the pin; raises PROTCTL_NOTPARKED, PROTCTL_UNRECOVERABLE.
key_type(1, 'string')
key_type(2, 'string')
local marker = redis.call('GET', KEYS[2])
if marker then
  return {'done', marker}
end
local p = load_record(1)
local req = ''
if type(p.request) == 'table' and type(p.request.action) == 'string' then
  req = p.request.action
end
if tostring(p.position or '') ~= ARGV[6]
  or tonumber(p.attempts or 0) ~= tonumber(ARGV[7])
  or tonumber(p.generation or 0) ~= tonumber(ARGV[8])
  or tostring(p.status or '') ~= ARGV[9]
  or req ~= ARGV[10] then
  return {'changed', redis.call('GET', KEYS[1])}
end
local at = set_request(p, ARGV[1], ARGV[2], ARGV[3], ARGV[4])
redis.call('SET', KEYS[1], cjson.encode(p))
local m = {action = ARGV[1], at = at}
if ARGV[3] ~= '' then m.by = ARGV[3] end
redis.call('SET', KEYS[2], cjson.encode(m), 'PX', ARGV[5])
return {'ok', at}
