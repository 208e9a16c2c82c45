package inspect

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
)

// walk holds what every chunk of one listing shares.
type walk struct {
	category   string
	group      string // filter
	registered []string
	parked     map[string]bool // group + "\x00" + key, nil without a ledger
	now        time.Time
	laneGroups bool
}

// newWalk reads what a listing of category needs once: the registered
// groups, the server's clock and (with listParked and a ledger) the
// parked entries.
func (in *Inspector) newWalk(ctx context.Context, op, category, group string, listParked bool) (*walk, error) {
	if err := in.layout.ValidateName(op, "category", category); err != nil {
		return nil, err
	}
	w := &walk{category: category, group: group}
	gk := in.layout.GroupsKey(category)
	reg, err := in.client.SMembers(ctx, gk).Result()
	if err != nil {
		return nil, wrapErr(op, gk, "set", err)
	}
	slices.Sort(reg)
	w.registered = reg
	if in.cfg.ledger != nil && listParked {
		ps, err := in.cfg.ledger.ListParked(ctx, group)
		if err != nil {
			return nil, err
		}
		w.parked = make(map[string]bool, len(ps))
		for _, p := range ps {
			if p.Source == runtime.SourceRedis && (p.Category == "" || p.Category == category) {
				w.parked[p.Subscription+"\x00"+p.Aggregate] = true
			}
		}
	}
	if w.now, err = in.serverTime(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

func (in *Inspector) eachPartition(ctx context.Context, category string, opts PartitionOptions, fn func(Partition) error) error {
	const op = "list partitions"
	w, err := in.newWalk(ctx, op, category, opts.Group, true)
	if err != nil {
		return err
	}
	w.laneGroups = opts.LaneGroups
	page := opts.PageSize
	if page <= 0 {
		page = in.cfg.pageSize
	}
	index := in.layout.IndexKey(category)
	seen := make(map[string]struct{})
	chunk := make([]string, 0, in.cfg.chunk)
	emitted := 0
	errStop := errors.New("stop")

	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		parts, err := in.readChunk(ctx, w, chunk)
		chunk = chunk[:0]
		if err != nil {
			return err
		}
		for i := range parts {
			if opts.Filter != nil && !opts.Filter(&parts[i]) {
				continue
			}
			if err := fn(parts[i]); err != nil {
				return err
			}
			emitted++
			if opts.Limit > 0 && emitted >= opts.Limit {
				return errStop
			}
		}
		return nil
	}

	var cursor uint64
	for {
		keys, next, err := in.client.SScan(ctx, index, cursor, "", page).Result()
		if err != nil {
			return wrapErr(op, index, "set", err)
		}
		for _, k := range keys {
			if _, dup := seen[k]; dup {
				continue
			}
			seen[k] = struct{}{}
			chunk = append(chunk, k)
			if len(chunk) == cap(chunk) {
				if err := flush(); err != nil {
					if err == errStop {
						return nil
					}
					return err
				}
			}
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	if err := flush(); err != nil && err != errStop {
		return err
	}
	return nil
}

// laneCmds are the phase-one reads of one lane.
type laneCmds struct {
	stream string
	len    *redis.IntCmd
	last   *redis.XMessageSliceCmd
	groups *redis.XInfoGroupsCmd
}

func queueLane(ctx context.Context, p redis.Pipeliner, stream string) laneCmds {
	return laneCmds{
		stream: stream,
		len:    p.XLen(ctx, stream),
		last:   p.XRevRangeN(ctx, stream, "+", "-", 1),
		groups: p.XInfoGroups(ctx, stream),
	}
}

// laneRead is a lane's state after phase one.
type laneRead struct {
	lane   Lane
	groups []redis.XInfoGroup
	err    error // a reply error other than "no such key" (e.g. WRONGTYPE)
}

func (lc laneCmds) result(name string) laneRead {
	r := laneRead{lane: Lane{Name: name, Stream: lc.stream}}
	groups, err := lc.groups.Result()
	switch {
	case err == nil:
		r.lane.Exists = true
		r.groups = groups
	case isNoSuchKey(err):
		return r
	default:
		r.err = wrapErr("read lane", lc.stream, "stream", err)
		return r
	}
	r.lane.Length = lc.len.Val()
	if msgs := lc.last.Val(); len(msgs) > 0 {
		r.lane.LastEntryID = ptr(msgs[0].ID)
	}
	return r
}

// leaseCmds are the phase-two reads of one (group, key).
type leaseCmds struct {
	lease *redis.StringCmd
	pttl  *redis.DurationCmd
	gen   *redis.StringCmd
}

// readChunk reads keys' partitions in two pipelined round trips: lanes
// and groups, then the leases and generations of the groups found.
func (in *Inspector) readChunk(ctx context.Context, w *walk, keys []string) ([]Partition, error) {
	parts, _, err := in.readLanes(ctx, w, keys)
	return parts, err
}

// readLanes is readChunk that also returns what phase one read of each
// lane.
func (in *Inspector) readLanes(ctx context.Context, w *walk, keys []string) ([]Partition, [][2]laneRead, error) {
	const op = "read partitions"
	main := make([]laneCmds, len(keys))
	back := make([]laneCmds, len(keys))
	p := in.client.Pipeline()
	for i, k := range keys {
		main[i] = queueLane(ctx, p, in.layout.Stream(w.category, k))
		back[i] = queueLane(ctx, p, in.layout.LaneStream(w.category, k, in.cfg.backfill))
	}
	_, err := p.Exec(ctx)
	if err := pipeErr(op, err); err != nil {
		return nil, nil, err
	}

	parts := make([]Partition, len(keys))
	lanes := make([][2]laneRead, len(keys))
	names := make([][]string, len(keys))
	for i, k := range keys {
		lanes[i] = [2]laneRead{main[i].result("main"), back[i].result(in.cfg.backfill)}
		names[i] = groupNames(w, lanes[i])
		for _, g := range names[i] {
			p.Get(ctx, in.layout.LeaseKey(g, k))
			p.PTTL(ctx, in.layout.LeaseKey(g, k))
			p.Get(ctx, in.layout.GenerationKey(g, k))
		}
	}
	cmds, err := p.Exec(ctx)
	if err := pipeErr(op, err); err != nil {
		return nil, nil, err
	}
	next := 0
	for i, k := range keys {
		lc := make([]leaseCmds, len(names[i]))
		for j := range names[i] {
			lc[j] = leaseCmds{
				lease: cmds[next].(*redis.StringCmd),
				pttl:  cmds[next+1].(*redis.DurationCmd),
				gen:   cmds[next+2].(*redis.StringCmd),
			}
			next += 3
		}
		parts[i] = in.assemble(w, k, lanes[i], names[i], lc)
	}
	return parts, lanes, nil
}

// groupNames is the sorted union of the groups on the lanes and the
// registered groups, or just the filter group.
func groupNames(w *walk, lanes [2]laneRead) []string {
	if w.group != "" {
		return []string{w.group}
	}
	names := slices.Clone(w.registered)
	for _, l := range lanes {
		for _, g := range l.groups {
			names = append(names, g.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func (in *Inspector) assemble(w *walk, key string, lanes [2]laneRead, names []string, lc []leaseCmds) Partition {
	p := Partition{
		Category: w.category,
		Key:      key,
		Stream:   lanes[0].lane.Stream,
		Groups:   make([]Group, 0, len(names)),
	}
	var newest int64 = -1
	for li, l := range lanes {
		if li > 0 && !l.lane.Exists {
			continue
		}
		if w.laneGroups {
			l.lane.Groups = make([]LaneGroup, 0, len(l.groups))
			for _, g := range l.groups {
				lg := LaneGroup{Name: g.Name, LastDeliveredID: g.LastDeliveredID, Pending: g.Pending}
				if lag := laneLag(l.lane, g); lag >= 0 {
					lg.Lag = ptr(lag)
				}
				l.lane.Groups = append(l.lane.Groups, lg)
			}
		}
		p.Lanes = append(p.Lanes, l.lane)
		p.Length += l.lane.Length
		if l.lane.LastEntryID != nil {
			if ms, ok := idMillis(*l.lane.LastEntryID); ok && ms > newest {
				newest = ms
			}
		}
		if l.err != nil && p.Error == "" {
			p.Error = l.err.Error()
		}
	}
	p.LastEntryID = lanes[0].lane.LastEntryID
	if newest >= 0 {
		idle := w.now.UnixMilli() - newest
		if idle < 0 {
			idle = 0
		}
		p.IdleMs = &idle
	}
	registered := make(map[string]bool, len(w.registered))
	for _, r := range w.registered {
		registered[r] = true
	}
	for j, name := range names {
		g := Group{Name: name, Registered: registered[name], Lag: ptr(int64(0))}
		for li, l := range lanes {
			if !l.lane.Exists {
				continue
			}
			info, ok := findGroup(l.groups, name)
			if !ok {
				// Not created: it will read the lane from id 0.
				if g.Lag != nil {
					*g.Lag += l.lane.Length
				}
				continue
			}
			g.Created = true
			g.Pending += info.Pending
			if li == 0 {
				g.LastDeliveredID = ptr(info.LastDeliveredID)
			}
			lag := laneLag(l.lane, info)
			if lag < 0 || g.Lag == nil {
				g.Lag = nil
			} else {
				*g.Lag += lag
			}
		}
		g.Lease, g.Generation = leaseOf(lc[j])
		if w.parked != nil {
			g.Parked = ptr(w.parked[name+"\x00"+key])
		}
		p.Groups = append(p.Groups, g)
	}
	return p
}

func findGroup(gs []redis.XInfoGroup, name string) (redis.XInfoGroup, bool) {
	for _, g := range gs {
		if g.Name == name {
			return g, true
		}
	}
	return redis.XInfoGroup{}, false
}

// laneLag is the number of entries of lane not delivered to group, -1
// when Redis cannot tell and the group is not at the end.
func laneLag(l Lane, g redis.XInfoGroup) int64 {
	if l.LastEntryID == nil || idCompare(g.LastDeliveredID, *l.LastEntryID) >= 0 {
		return 0
	}
	return g.Lag
}

// leaseOf reads a (group, key)'s lease and generation from phase two.
func leaseOf(c leaseCmds) (*LeaseInfo, *int64) {
	var gen *int64
	if s, err := c.gen.Result(); err == nil {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			gen = &n
		}
	}
	v, err := c.lease.Result()
	if err != nil {
		return nil, gen
	}
	li := &LeaseInfo{Token: v, Owner: v}
	if owner, g, err := broker.ParseFenceToken(v); err == nil {
		li.Owner, li.Generation = owner, g
	}
	if d, err := c.pttl.Result(); err == nil {
		switch {
		case d >= 0:
			li.TTLMs = ptr(d.Milliseconds())
		case d == -2*time.Nanosecond:
			// Expired between GET and PTTL.
			li.TTLMs = ptr(int64(0))
		}
	}
	return li, gen
}
