-- request: record an operator's retry or skip in the entry. No fence: the
-- owner acts on the request under its own.
-- KEYS[1] record
-- ARGV[1] action (retry|skip), ARGV[2] reason, ARGV[3] by
key_type(1, 'string')
local p = load_record(1)
if ARGV[1] == 'retry' then
  if p.status == 'unrecoverable' then
    error({err = 'PROTCTL_UNRECOVERABLE'})
  end
  p.status = 'retrying'
end
local req = {action = ARGV[1], requestedAt = iso_now()}
if ARGV[2] ~= '' then req.reason = ARGV[2] end
if ARGV[3] ~= '' then req.by = ARGV[3] end
p.request = req
redis.call('SET', KEYS[1], cjson.encode(p))
return 1
