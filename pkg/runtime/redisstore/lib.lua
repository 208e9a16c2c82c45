-- lib.lua follows the shared prelude (pkg/internal/redisadapter's
-- prelude.lua: key_type, fence, numcmp and the error codes
-- PROTCTL_WRONGTYPE and PROTCTL_LEASELOST) in every script of the package
-- (see scripts.go), so that time and ledger records read the same
-- everywhere. Its scripts raise these codes too (see errors.go):
--   PROTCTL_NOTPARKED
--   PROTCTL_UNRECOVERABLE
--   PROTCTL_BADRECORD <index of the key in KEYS>

-- now_ms is the server's time in milliseconds since the epoch. Membership
-- expiry is measured on it, so the nodes' clocks never matter. (Redis 7
-- replicates a script's effects, not the script, so reading TIME before a
-- write is allowed.) Milliseconds since the epoch fit a double exactly.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function iso_now()
  local t = redis.call('TIME')
  return iso_time(tonumber(t[1]), tonumber(t[2]), 'Z')
end

-- decimal strips leading zeros from a string of digits, or returns nil
-- when s is not one.
local function decimal(s)
  if not string.match(s, '^%d+$') then
    return nil
  end
  local stripped = string.gsub(s, '^0+', '')
  if stripped == '' then
    return '0'
  end
  return stripped
end

-- load_record returns the parked entry at KEYS[i] decoded, or raises
-- PROTCTL_NOTPARKED when the key is missing and PROTCTL_BADRECORD when it
-- is not a JSON object.
--
-- The entry is edited in Lua (cjson) rather than read, changed in Go and
-- compared-and-set, so that an edit is one round trip and keeps fields a
-- newer protctl added. This is safe for ledger.Parked because it has no
-- array fields (cjson writes an empty array back as {}) and its integers
-- (attempts, generation) stay far below the 14 significant digits cjson
-- writes numbers with.
local function load_record(i)
  local raw = redis.call('GET', KEYS[i])
  if not raw then
    error({err = 'PROTCTL_NOTPARKED'})
  end
  local ok, p = pcall(cjson.decode, raw)
  if not ok or type(p) ~= 'table' then
    error({err = 'PROTCTL_BADRECORD ' .. i})
  end
  return p
end


-- set_request records an operator's request in the decoded entry p (the
-- caller SETs it back): a retry sets the status to retrying, and raises
-- PROTCTL_UNRECOVERABLE for an unrecoverable entry; a skip keeps the
-- status. Empty reason, by and token are left out. Returns the request's
-- time (the server's).
local function set_request(p, action, reason, by, token)
  if action == 'retry' then
    if p.status == 'unrecoverable' then
      error({err = 'PROTCTL_UNRECOVERABLE'})
    end
    p.status = 'retrying'
  end
  local at = iso_now()
  local r = {action = action, requestedAt = at}
  if reason ~= '' then r.reason = reason end
  if by ~= '' then r.by = by end
  if token ~= '' then r.token = token end
  p.request = r
  return at
end
