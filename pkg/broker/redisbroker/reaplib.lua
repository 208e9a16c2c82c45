-- reaplib.lua is prepended (after lib.lua) to reap.lua and reaplanes.lua:
-- the checks that decide whether a partition is cold, shared by the
-- single-script reap of the Protean layout and the cluster layout's
-- check-then-delete.

-- reap_check returns nil when every lane KEYS[i] (i in lanes; types[n] is
-- the type of lanes[n], checked already) is cold, else the verdict
-- {0, lane, group, reason, detail}, where reason is one of: nogroup,
-- pending (detail: count), behind (detail: "last-delivered last-entry"),
-- unregistered, young (detail: age ms). registered lists the groups that
-- must have read a non-empty lane, whether or not they exist on it yet.
local function reap_check(lanes, types, registered, minidle)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for n, i in ipairs(lanes) do
    if types[n] == 'stream' then
      local key = KEYS[i]
      local info = fields(redis.call('XINFO', 'STREAM', key))
      local len = info['length']
      local last = info['last-entry']
      local groups = redis.call('XINFO', 'GROUPS', key)
      if len > 0 and #groups == 0 then
        return {0, key, '', 'nogroup', ''}
      end
      local present = {}
      for _, flat in ipairs(groups) do
        local g = fields(flat)
        present[g['name']] = true
        if g['pending'] > 0 then
          return {0, key, g['name'], 'pending', tostring(g['pending'])}
        end
        if last and idcmp(g['last-delivered-id'], last[1]) < 0 then
          return {0, key, g['name'], 'behind', g['last-delivered-id'] .. ' ' .. last[1]}
        end
      end
      if len > 0 then
        for _, name in ipairs(registered) do
          if not present[name] then
            return {0, key, name, 'unregistered', ''}
          end
        end
      end
      -- The newest entry's age: last-generated-id also covers entries
      -- that were appended and then deleted or trimmed.
      local ms = tonumber(string.match(info['last-generated-id'], '^(%d+)'))
      if now - ms < minidle then
        return {0, key, '', 'young', tostring(now - ms)}
      end
    end
  end
  return nil
end


-- leases_check returns nil when every lease KEYS[first + n - 1] holds
-- exactly tokens[n] ('' meaning no key), else the verdict {0, lease key,
-- '', 'lease', what it holds now ('' for nothing)}. Each key is type
-- checked first (PROTCTL_WRONGTYPE), before anything is written.
local function leases_check(first, tokens)
  for n, token in ipairs(tokens) do
    key_type(first + n - 1, 'string')
  end
  for n, token in ipairs(tokens) do
    local now = redis.call('GET', KEYS[first + n - 1])
    if not now then now = '' end
    if now ~= token then
      return {0, KEYS[first + n - 1], '', 'lease', now}
    end
  end
  return nil
end
