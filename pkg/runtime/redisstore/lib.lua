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

-- iso_time formats secs.micros since the epoch as RFC 3339 in UTC with
-- microseconds, the form Go's time.Time reads from JSON. Lua in Redis has
-- no os.date, so the civil date is computed from the day number (Howard
-- Hinnant's days-to-civil algorithm; all values are small integers held
-- exactly in doubles).
local function iso_time(secs, micros)
  local days = math.floor(secs / 86400)
  local rem = secs - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m
  if mp < 10 then m = mp + 3 else m = mp - 9 end
  if m <= 2 then y = y + 1 end
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%06dZ', y, m, d,
    math.floor(rem / 3600), math.floor((rem % 3600) / 60), rem % 60, micros)
end

local function iso_now()
  local t = redis.call('TIME')
  return iso_time(tonumber(t[1]), tonumber(t[2]))
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
-- newer protctl added. This is safe for runtime.Parked because it has no
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
