package inspect

import (
	"context"
	"slices"
	"strconv"
	"sync"
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

	// Chunks are read by in.cfg.workers goroutines at once, so that the
	// client decodes one chunk while the server answers the next; they
	// are handed to fn in the order the index yielded them. At most
	// workers+1 chunks are in memory besides what fn keeps.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type job struct {
		keys  []string
		parts []Partition
		err   error
		done  chan struct{}
	}
	jobs := make(chan *job)
	order := make(chan *job, in.cfg.workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs before wg.Wait: stops the producer and workers
	for range in.cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				j.parts, j.err = in.readChunk(ctx, w, j.keys)
				close(j.done)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(jobs)
		defer close(order)
		send := func(j *job) bool {
			select {
			case order <- j:
			case <-ctx.Done():
				return false
			}
			if j.err != nil {
				close(j.done)
				return false
			}
			select {
			case jobs <- j:
				return true
			case <-ctx.Done():
				return false
			}
		}
		index := in.layout.IndexKey(category)
		seen := make(map[string]struct{})
		chunk := make([]string, 0, in.cfg.chunk)
		var cursor uint64
		for {
			keys, next, err := in.client.SScan(ctx, index, cursor, "", page).Result()
			if err != nil {
				send(&job{err: wrapErr(op, index, "set", err), done: make(chan struct{})})
				return
			}
			for _, k := range keys {
				if _, dup := seen[k]; dup {
					continue
				}
				seen[k] = struct{}{}
				chunk = append(chunk, k)
				if len(chunk) == in.cfg.chunk {
					if !send(&job{keys: chunk, done: make(chan struct{})}) {
						return
					}
					chunk = make([]string, 0, in.cfg.chunk)
				}
			}
			cursor = next
			if cursor == 0 {
				break
			}
		}
		if len(chunk) > 0 {
			send(&job{keys: chunk, done: make(chan struct{})})
		}
	}()

	emitted := 0
	for j := range order {
		select {
		case <-j.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if j.err != nil {
			return j.err
		}
		for i := range j.parts {
			if opts.Filter != nil && !opts.Filter(&j.parts[i]) {
				continue
			}
			if err := fn(j.parts[i]); err != nil {
				return err
			}
			emitted++
			if opts.Limit > 0 && emitted >= opts.Limit {
				return nil
			}
		}
	}
	return nil
}

// laneRead is a lane's state as readLanes read it.
type laneRead struct {
	lane   Lane
	groups []redis.XInfoGroup
	err    error // a reply error other than "no such key" (e.g. WRONGTYPE)
}

// readGroups fills r from XINFO GROUPS: a missing stream is not an error.
func (r *laneRead) readGroups(c *redis.XInfoGroupsCmd) {
	groups, err := c.Result()
	switch {
	case err == nil:
		r.lane.Exists = true
		r.groups = groups
	case isNoSuchKey(err):
	default:
		r.err = wrapErr("read lane", r.lane.Stream, "stream", err)
	}
}

func (r *laneRead) readTail(length *redis.IntCmd, last *redis.Cmd) {
	if !r.lane.Exists {
		return
	}
	r.lane.Length = length.Val()
	if id := newestID(last); id != "" {
		r.lane.LastEntryID = ptr(id)
	}
}

// newestID reads a lane's newest entry id from XREVRANGE + - COUNT 1. It is sent as a generic
// command: go-redis's typed XREVRANGE decodes each entry's fields into a
// map, which cost more than everything else a listing reads.
func newestID(c *redis.Cmd) string {
	entries, _ := c.Val().([]any)
	if len(entries) == 0 {
		return ""
	}
	e, _ := entries[0].([]any)
	if len(e) == 0 {
		return ""
	}
	id, _ := e[0].(string)
	return id
}

func queueNewest(ctx context.Context, p redis.Pipeliner, stream string) *redis.Cmd {
	return p.Do(ctx, "xrevrange", stream, "+", "-", "count", 1)
}

// leaseRead is one (group, key)'s lease and generation.
type leaseRead struct {
	lease, gen any // string, or nil when missing
	pttl       int64
	pttlOK     bool
}

// readChunk reads keys' partitions in two pipelined round trips:
//
//  1. the main lane's XLEN, XREVRANGE + - COUNT 1 and XINFO GROUPS, and
//     the backfill lane's XINFO GROUPS (which fails for a missing lane,
//     the common case, at the cost of one cheap command);
//  2. one MGET of every group's lease and generation keys (they share
//     the partition's hash tag in the cluster layout), PTTL of each
//     lease, and XLEN and XREVRANGE of the backfill lanes that exist.
//
// (Read-only Lua scripts doing the same were measured slower on the
// server, one per partition and also one per chunk of 250 partitions,
// which took twice the server CPU of this pipeline: inside a script each
// redis.call still runs the command on a fake client and converts its
// reply to Lua and back, so only the network reads are saved.)
func (in *Inspector) readChunk(ctx context.Context, w *walk, keys []string) ([]Partition, error) {
	parts, _, err := in.readLanes(ctx, w, keys)
	return parts, err
}

// readLanes is readChunk that also returns each lane's groups.
func (in *Inspector) readLanes(ctx context.Context, w *walk, keys []string) ([]Partition, [][2]laneRead, error) {
	const op = "read partitions"
	type phase1 struct {
		mainLen              *redis.IntCmd
		mainLast             *redis.Cmd
		mainGroups, bfGroups *redis.XInfoGroupsCmd
	}
	cmds1 := make([]phase1, len(keys))
	lanes := make([][2]laneRead, len(keys))
	p := in.client.Pipeline()
	for i, k := range keys {
		main, bf := in.layout.Stream(w.category, k), in.layout.LaneStream(w.category, k, in.cfg.backfill)
		lanes[i] = [2]laneRead{{lane: Lane{Name: "main", Stream: main}}, {lane: Lane{Name: in.cfg.backfill, Stream: bf}}}
		cmds1[i] = phase1{
			mainLen:    p.XLen(ctx, main),
			mainLast:   queueNewest(ctx, p, main),
			mainGroups: p.XInfoGroups(ctx, main),
			bfGroups:   p.XInfoGroups(ctx, bf),
		}
	}
	_, err := p.Exec(ctx)
	if err := pipeErr(op, err); err != nil {
		return nil, nil, err
	}

	type phase2 struct {
		bfLen  *redis.IntCmd
		bfLast *redis.Cmd
		mget   *redis.SliceCmd
		pttl   []*redis.DurationCmd
	}
	cmds2 := make([]phase2, len(keys))
	names := make([][]string, len(keys))
	for i, k := range keys {
		c, l := cmds1[i], &lanes[i]
		l[0].readGroups(c.mainGroups)
		l[0].readTail(c.mainLen, c.mainLast)
		l[1].readGroups(c.bfGroups)
		if l[1].lane.Exists {
			cmds2[i].bfLen = p.XLen(ctx, l[1].lane.Stream)
			cmds2[i].bfLast = queueNewest(ctx, p, l[1].lane.Stream)
		}
		names[i] = groupNames(w, *l)
		if len(names[i]) == 0 {
			continue
		}
		mk := make([]string, 0, 2*len(names[i]))
		cmds2[i].pttl = make([]*redis.DurationCmd, len(names[i]))
		for j, g := range names[i] {
			lk := in.layout.LeaseKey(g, k)
			mk = append(mk, lk, in.layout.GenerationKey(g, k))
			cmds2[i].pttl[j] = p.PTTL(ctx, lk)
		}
		cmds2[i].mget = p.MGet(ctx, mk...)
	}
	if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
		return nil, nil, pipeErr(op, err)
	}
	parts := make([]Partition, len(keys))
	for i, k := range keys {
		c := cmds2[i]
		if c.bfLen != nil {
			lanes[i][1].readTail(c.bfLen, c.bfLast)
		}
		lr := make([]leaseRead, len(names[i]))
		if c.mget != nil {
			vals, err := c.mget.Result()
			if err != nil {
				return nil, nil, wrapErr(op, in.layout.LeaseKey(names[i][0], k), "string", err)
			}
			for j := range names[i] {
				lr[j] = leaseRead{lease: stringOrNil(vals[2*j]), gen: stringOrNil(vals[2*j+1])}
				if d, err := c.pttl[j].Result(); err == nil {
					lr[j].pttl, lr[j].pttlOK = ttlMs(d), true
				}
			}
		}
		parts[i] = in.assemble(w, k, lanes[i], names[i], lr)
	}
	return parts, lanes, nil
}

func stringOrNil(v any) any {
	if s, ok := v.(string); ok {
		return s
	}
	return nil
}

// ttlMs turns go-redis's PTTL result (-1ns, -2ns for no expiry and no
// key) into the server's integer reply.
func ttlMs(d time.Duration) int64 {
	if d < 0 {
		return int64(d)
	}
	return d.Milliseconds()
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

func (in *Inspector) assemble(w *walk, key string, lanes [2]laneRead, names []string, lr []leaseRead) Partition {
	p := Partition{
		Category: w.category,
		Key:      key,
		Stream:   lanes[0].lane.Stream,
		Groups:   make([]Group, 0, len(names)),
	}
	var newest int64 = -1
	for li, l := range lanes {
		if l.err != nil && p.Error == "" {
			p.Error = l.err.Error()
		}
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
		g.Lease, g.Generation = leaseOf(lr[j])
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

// leaseOf turns a leaseRead into the snapshot's lease and generation.
func leaseOf(r leaseRead) (*LeaseInfo, *int64) {
	var gen *int64
	if s, ok := r.gen.(string); ok {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			gen = &n
		}
	}
	v, ok := r.lease.(string)
	if !ok {
		return nil, gen
	}
	li := &LeaseInfo{Token: v, Owner: v}
	if owner, g, err := broker.ParseFenceToken(v); err == nil {
		li.Owner, li.Generation = owner, g
	}
	if r.pttlOK {
		switch {
		case r.pttl >= 0:
			li.TTLMs = ptr(r.pttl)
		case r.pttl == -2:
			// Expired between the GET and the PTTL.
			li.TTLMs = ptr(int64(0))
		}
	}
	return li, gen
}
