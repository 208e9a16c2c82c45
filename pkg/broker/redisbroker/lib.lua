-- lib.lua follows the shared prelude (pkg/internal/redisadapter's
-- prelude.lua: key_type, fence, numcmp and the error codes
-- PROTCTL_WRONGTYPE and PROTCTL_LEASELOST) in every script of the package
-- (see scripts.go), so that id comparison and consumer pruning read the
-- same everywhere.

-- idcmp compares two stream ids "ms-seq" (a bare "ms" is "ms-0").
local function idcmp(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  if not am then am, as = a, '0' end
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not bm then bm, bs = b, '0' end
  local c = numcmp(am, bm)
  if c ~= 0 then return c end
  return numcmp(as, bs)
end

-- entry_digest is the digest of an entry's flat field list {k1, v1, ...}
-- (EntryDigest is the Go copy): SHA-1 of each string's length, ':' and
-- the string, joined by ','. An operator's plan records it, and the
-- scripts that act on the entry compare it, so that an id that came to
-- hold something else is never acted on.
local function entry_digest(flat)
  local parts = {}
  for i = 1, #flat do
    parts[i] = #flat[i] .. ':' .. flat[i]
  end
  return redis.sha1hex(table.concat(parts, ','))
end

-- fields turns a flat reply {k1, v1, k2, v2, ...} into a table.
local function fields(flat)
  local t = {}
  for i = 1, #flat, 2 do
    t[flat[i]] = flat[i + 1]
  end
  return t
end


-- prune_consumers deletes every consumer of group on KEYS[i] (a stream,
-- type checked already) that has no pending entries, except keep (the
-- caller's own consumer, the fence token its lease proves), and returns
-- how many it deleted. Each generation of a lease reads as a consumer of
-- its own (owner:generation), so without this a partition's group gains a
-- consumer at every handover. XGROUP DELCONSUMER destroys the consumer's
-- pending entries, so a consumer holding any is never touched: the
-- pending count is read in the same script as the delete, and nothing
-- runs in between. A consumer a Protean instance named otherwise is
-- treated the same way: the caller holds the lease (Protean's workers
-- take the same lease key), so nobody else may read the partition, and
-- an empty consumer carries no state but its idle time. A stale reader
-- that reads anyway (a paused old owner) only has its consumer created
-- again by its next XREADGROUP, and its reads are fenced elsewhere; its
-- idle time starts over. A missing group has no consumers.
local function prune_consumers(i, group, keep)
  local r = redis.pcall('XINFO', 'CONSUMERS', KEYS[i], group)
  if type(r) == 'table' and r.err then
    if string.sub(r.err, 1, 7) == 'NOGROUP' then
      return 0
    end
    error(r)
  end
  local n = 0
  for _, c in ipairs(r) do
    local f = fields(c)
    if f['name'] ~= keep and tonumber(f['pending']) == 0 then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[i], group, f['name'])
      n = n + 1
    end
  end
  return n
end
