package inspect

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/pause"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// parkedKey is a parked (group, partition key): a struct, so that the
// lookup per group and partition builds no string.
type parkedKey struct{ group, key string }

// walk holds what every chunk of one listing shares.
type walk struct {
	category   string
	group      string // filter
	registered []string
	parked     map[parkedKey]bool // nil without a ledger
	pauses     map[string]pause.Set
	now        time.Time
	laneGroups bool
	health     bool
	thresholds Thresholds

	// learned is the groups found on the lanes of chunks read so far
	// (sorted): a category's partitions mostly have the same groups, so
	// later chunks read those groups' leases in their first round trip,
	// with the registered ones, instead of a second.
	mu      sync.Mutex
	learned []string
}

// knownGroups is the groups whose leases a chunk reads before its lanes:
// the filter group, or the registered and learned ones.
func (w *walk) knownGroups() []string {
	if w.group != "" {
		return []string{w.group}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.learned) == 0 {
		return w.registered
	}
	known := append(slices.Clone(w.registered), w.learned...)
	slices.Sort(known)
	return slices.Compact(known)
}

// learn adds groups found on a lane.
func (w *walk) learn(groups []string) {
	if len(groups) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range groups {
		if at, found := slices.BinarySearch(w.learned, g); !found {
			w.learned = slices.Insert(w.learned, at, g)
		}
	}
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
		w.parked = make(map[parkedKey]bool, len(ps))
		for _, p := range ps {
			if p.Source == source.Redis && (p.Category == "" || p.Category == category) {
				w.parked[parkedKey{p.Subscription, p.Aggregate}] = true
			}
		}
	}
	if w.pauses, err = in.Pauses(ctx); err != nil {
		return nil, err
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
	w.health, w.thresholds = opts.Health, opts.Thresholds
	page := opts.PageSize
	if page <= 0 {
		page = in.cfg.pageSize
	}
	index := in.layout.IndexKey(category)
	scan := func(ctx context.Context, emit func([]string) bool) error {
		seen := make(map[string]struct{})
		chunk := make([]string, 0, in.cfg.chunk)
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
				if len(chunk) == in.cfg.chunk {
					if !emit(chunk) {
						return nil
					}
					chunk = make([]string, 0, in.cfg.chunk)
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		if len(chunk) > 0 {
			emit(chunk)
		}
		return nil
	}
	return in.walkChunks(ctx, w, scan, opts, fn)
}

// eachPartitionByKey is eachPartition over the given keys, in their
// order, instead of the index.
func (in *Inspector) eachPartitionByKey(ctx context.Context, category string, keys []string, opts PartitionOptions, fn func(Partition) error) error {
	w, err := in.newWalk(ctx, "read partitions", category, opts.Group, true)
	if err != nil {
		return err
	}
	w.laneGroups = opts.LaneGroups
	w.health, w.thresholds = opts.Health, opts.Thresholds
	slice := func(_ context.Context, emit func([]string) bool) error {
		for lo := 0; lo < len(keys); lo += in.cfg.chunk {
			if !emit(keys[lo:min(lo+in.cfg.chunk, len(keys))]) {
				return nil
			}
		}
		return nil
	}
	return in.walkChunks(ctx, w, slice, opts, fn)
}

// walkChunks reads the chunks of keys that produce emits and calls fn
// for their partitions, applying opts.Filter and opts.Limit. Chunks are
// read by in.cfg.workers goroutines at once, each its own pipelined
// round trips, so that the client decodes one chunk while the server
// answers the next (the server is the listing's bottleneck: it must
// never wait for the client); fn still sees them in the order produce
// emitted them, from the calling goroutine. At most workers+1 chunks
// are in memory besides what fn keeps. An error of produce is returned
// after the chunks emitted before it.
func (in *Inspector) walkChunks(ctx context.Context, w *walk, produce func(ctx context.Context, emit func([]string) bool) error, opts PartitionOptions, fn func(Partition) error) error {
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
		err := produce(ctx, func(keys []string) bool {
			return send(&job{keys: keys, done: make(chan struct{})})
		})
		if err != nil {
			send(&job{err: err, done: make(chan struct{})})
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
	return ctx.Err()
}

// laneRead is a lane's state as readLanes read it.
type laneRead struct {
	lane   Lane
	groups []redis.XInfoGroup
	err    error // a reply error other than "no such key" (e.g. WRONGTYPE)
}

// readGroups fills r from XINFO GROUPS: a missing stream is not an error;
// a key of another type exists, but is no stream to read.
func (r *laneRead) readGroups(c *redis.XInfoGroupsCmd) {
	groups, err := c.Result()
	switch {
	case err == nil:
		r.lane.Exists = true
		r.groups = groups
	case isNoSuchKey(err):
	default:
		r.err = wrapErr("read lane", r.lane.Stream, "stream", err)
		r.lane.Exists = errors.Is(r.err, broker.ErrWrongType)
	}
}

func (r *laneRead) readTail(length *redis.IntCmd, last *redis.Cmd) {
	if !r.lane.Exists || r.err != nil {
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
	// err is a *broker.WrongTypeError when the lease or generation key
	// holds another type than a string (MGET reads it as nil: missing);
	// leaseBad and genBad say which (both may).
	err              error
	leaseBad, genBad bool
}

// readChunk reads keys' partitions in two pipelined round trips (three
// when a group exists only on a backfill lane):
//
//  1. the main lane's XLEN, XREVRANGE + - COUNT 1 and XINFO GROUPS,
//     EXISTS of the backfill lane (which nine partitions in ten do not
//     have), and the lease and generation of the groups known before
//     reading the lanes (the registered ones, or the --group filter): one
//     MGET for the whole chunk, or one per partition on a cluster, where
//     a partition's keys share a hash tag but partitions do not;
//  2. PTTL of the leases found, XLEN, XREVRANGE and XINFO GROUPS of the
//     backfill lanes that exist, and MGET + PTTL for groups found on the
//     main lane only.
//
// Every command is one the server answers from a key it must look up, and
// those lookups (hash chains and key compares missing the CPU cache) are
// most of the server's time, so the listing makes as few as it can: no
// PTTL of a lease that is not there, no XINFO of a lane that is not there.
//
// (Read-only Lua scripts doing the same were measured slower on the
// server, one per partition and also one per chunk of 250 partitions,
// which took twice the server CPU of this pipeline: inside a script each
// redis.call still runs the command on a fake client and converts its
// reply to Lua and back, so only the network reads are saved.)
func (in *Inspector) readChunk(ctx context.Context, w *walk, keys []string) ([]Partition, error) {
	parts, lanes, err := in.readLanes(ctx, w, keys)
	if err == nil && w.health {
		err = in.readHealth(ctx, w, parts, lanes)
	}
	return parts, err
}

// chunkLeases is the lease and generation reads of one round trip: the
// replies of one MGET per chunk (or one per partition on a cluster) and
// where each partition's pairs start in them.
type chunkLeases struct {
	mget []*redis.SliceCmd
	// exists counts the keys of the same MGET that exist: more than MGET
	// read means some hold another type than a string.
	exists []*redis.IntCmd
	at     []int // per partition: index into mget, or -1; pairs start at off
	off    []int
}

// queue asks for the lease and generation of (names[i], keys[i]) for
// every i, in one MGET or one per partition (perPartition).
func (in *Inspector) queueLeases(ctx context.Context, p redis.Pipeliner, keys []string, names [][]string, perPartition bool) chunkLeases {
	cl := chunkLeases{at: make([]int, len(keys)), off: make([]int, len(keys))}
	var mk []string
	flush := func() {
		if len(mk) > 0 {
			cl.mget = append(cl.mget, p.MGet(ctx, mk...))
			cl.exists = append(cl.exists, p.Exists(ctx, mk...))
			mk = nil
		}
	}
	for i, k := range keys {
		cl.at[i] = -1
		if len(names[i]) == 0 {
			continue
		}
		cl.at[i], cl.off[i] = len(cl.mget), len(mk)
		for _, g := range names[i] {
			mk = append(mk, in.layout.LeaseKey(g, k), in.layout.GenerationKey(g, k))
		}
		if perPartition {
			flush()
		}
	}
	flush()
	return cl
}

// read fills lr[i][j] (lease and generation of names[i][j]) from the
// replies; a failed MGET is returned as the error of the first key it
// read. A lease or generation key of another type than a string, which
// MGET reads as missing, is found by comparing the MGET with the EXISTS
// of the same keys; only then is each key read as missing TYPEd (one
// pipeline), and lr[i][j].err names it, its type and "string".
func (cl chunkLeases) read(ctx context.Context, op string, in *Inspector, keys []string, names [][]string, lr [][]leaseRead) error {
	var suspect []int // partitions whose MGET counts fewer keys than EXISTS
	for i := range keys {
		if cl.at[i] < 0 {
			continue
		}
		vals, err := cl.mget[cl.at[i]].Result()
		if err != nil {
			return wrapErr(op, in.layout.LeaseKey(names[i][0], keys[i]), "string", err)
		}
		for j := range names[i] {
			o := cl.off[i] + 2*j
			lr[i][j] = leaseRead{lease: stringOrNil(vals[o]), gen: stringOrNil(vals[o+1])}
		}
		read := int64(0)
		for _, v := range vals {
			if v != nil {
				read++
			}
		}
		if n, err := cl.exists[cl.at[i]].Result(); err == nil && n > read {
			suspect = append(suspect, i)
		}
	}
	if len(suspect) == 0 {
		return nil
	}
	type check struct {
		i, j int
		gen  bool
		key  string
		typ  *redis.StatusCmd
	}
	var checks []check
	p := in.client.Pipeline()
	for _, i := range suspect {
		for j, g := range names[i] {
			if lr[i][j].lease == nil {
				k := in.layout.LeaseKey(g, keys[i])
				checks = append(checks, check{i, j, false, k, p.Type(ctx, k)})
			}
			if lr[i][j].gen == nil {
				k := in.layout.GenerationKey(g, keys[i])
				checks = append(checks, check{i, j, true, k, p.Type(ctx, k)})
			}
		}
	}
	if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
		return pipeErr(op, err)
	}
	for _, c := range checks {
		t := c.typ.Val()
		if t == "" || t == "none" || t == "string" {
			continue
		}
		r := &lr[c.i][c.j]
		if c.gen {
			r.genBad = true
		} else {
			r.leaseBad = true
		}
		if r.err == nil {
			r.err = &broker.WrongTypeError{Op: op, Key: c.key, Want: "string", Got: t}
		}
	}
	return nil
}

// readLanes is readChunk that also returns each lane's groups.
func (in *Inspector) readLanes(ctx context.Context, w *walk, keys []string) ([]Partition, [][2]laneRead, error) {
	const op = "read partitions"
	_, perPartition := in.client.(*redis.ClusterClient)
	known := w.knownGroups()
	type phase1 struct {
		mainLen    *redis.IntCmd
		mainLast   *redis.Cmd
		mainGroups *redis.XInfoGroupsCmd
		bfExists   *redis.IntCmd
	}
	cmds1 := make([]phase1, len(keys))
	lanes := make([][2]laneRead, len(keys))
	knownNames := make([][]string, len(keys))
	p := in.client.Pipeline()
	for i, k := range keys {
		main, bf := in.layout.Stream(w.category, k), in.layout.LaneStream(w.category, k, in.cfg.backfill)
		lanes[i] = [2]laneRead{{lane: Lane{Name: "main", Stream: main}}, {lane: Lane{Name: in.cfg.backfill, Stream: bf}}}
		cmds1[i] = phase1{
			mainLen:    p.XLen(ctx, main),
			mainLast:   queueNewest(ctx, p, main),
			mainGroups: p.XInfoGroups(ctx, main),
			bfExists:   p.Exists(ctx, bf),
		}
		knownNames[i] = known
	}
	leases1 := in.queueLeases(ctx, p, keys, knownNames, perPartition)
	_, err := p.Exec(ctx)
	if err := pipeErr(op, err); err != nil {
		return nil, nil, err
	}

	// Per partition: the final group names, and for each its lease read.
	names := make([][]string, len(keys))
	lr := make([][]leaseRead, len(keys))
	known1 := make([][]leaseRead, len(keys))
	for i := range keys {
		known1[i] = make([]leaseRead, len(known))
	}
	if err := leases1.read(ctx, op, in, keys, knownNames, known1); err != nil {
		return nil, nil, err
	}

	type phase2 struct {
		bfLen    *redis.IntCmd
		bfLast   *redis.Cmd
		bfGroups *redis.XInfoGroupsCmd
		pttl     []*redis.DurationCmd // per name, nil where no lease was read
	}
	cmds2 := make([]phase2, len(keys))
	extraNames := make([][]string, len(keys)) // groups of the main lane not known before
	var unknown []string
	for i, k := range keys {
		c, l := cmds1[i], &lanes[i]
		l[0].readGroups(c.mainGroups)
		l[0].readTail(c.mainLen, c.mainLast)
		if n, err := c.bfExists.Result(); err == nil && n > 0 {
			cmds2[i].bfLen = p.XLen(ctx, l[1].lane.Stream)
			cmds2[i].bfLast = queueNewest(ctx, p, l[1].lane.Stream)
			cmds2[i].bfGroups = p.XInfoGroups(ctx, l[1].lane.Stream)
		}
		names[i] = groupNames(w, [2]laneRead{l[0], {}})
		lr[i] = make([]leaseRead, len(names[i]))
		cmds2[i].pttl = make([]*redis.DurationCmd, len(names[i]))
		for j, g := range names[i] {
			if kj := slices.Index(known, g); kj >= 0 {
				lr[i][j] = known1[i][kj]
				if lr[i][j].lease != nil {
					cmds2[i].pttl[j] = p.PTTL(ctx, in.layout.LeaseKey(g, k))
				}
				continue
			}
			extraNames[i] = append(extraNames[i], g)
			unknown = append(unknown, g)
			cmds2[i].pttl[j] = p.PTTL(ctx, in.layout.LeaseKey(g, k))
		}
	}
	// The groups of the main lane not known before are read into a side
	// table and copied by name.
	extra := make([][]leaseRead, len(keys))
	for i := range keys {
		extra[i] = make([]leaseRead, len(extraNames[i]))
	}
	leases2 := in.queueLeases(ctx, p, keys, extraNames, perPartition)
	if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
		return nil, nil, pipeErr(op, err)
	}
	if err := leases2.read(ctx, op, in, keys, extraNames, extra); err != nil {
		return nil, nil, err
	}

	// A group found only on a backfill lane needs a third round trip.
	var late []int
	lateNames := make([][]string, len(keys))
	for i := range keys {
		c := cmds2[i]
		if c.bfGroups != nil {
			lanes[i][1].readGroups(c.bfGroups)
			lanes[i][1].readTail(c.bfLen, c.bfLast)
		}
		for j, g := range names[i] {
			if e := slices.Index(extraNames[i], g); e >= 0 {
				lr[i][j] = extra[i][e]
			}
			if c.pttl[j] != nil {
				if d, err := c.pttl[j].Result(); err == nil {
					lr[i][j].pttl, lr[i][j].pttlOK = ttlMs(d), true
				}
			}
		}
		if w.group != "" || len(lanes[i][1].groups) == 0 {
			continue
		}
		for _, g := range lanes[i][1].groups {
			if !slices.Contains(names[i], g.Name) {
				lateNames[i] = append(lateNames[i], g.Name)
				unknown = append(unknown, g.Name)
			}
		}
		if len(lateNames[i]) > 0 {
			late = append(late, i)
		}
	}
	w.learn(unknown)
	if len(late) > 0 {
		if err := in.readLateLeases(ctx, op, keys, late, lateNames, names, lr, perPartition); err != nil {
			return nil, nil, err
		}
	}

	in.laneTypes(ctx, lanes)
	parts := make([]Partition, len(keys))
	for i, k := range keys {
		parts[i] = in.assemble(w, k, lanes[i], names[i], lr[i])
	}
	return parts, lanes, nil
}

// laneTypes fills in, with one pipelined TYPE per lane key that holds the
// wrong type (rare: nothing is sent when there is none), the type each
// holds, so that the partition's error names it.
func (in *Inspector) laneTypes(ctx context.Context, lanes [][2]laneRead) {
	var wrong []*broker.WrongTypeError
	for i := range lanes {
		for j := range lanes[i] {
			var wte *broker.WrongTypeError
			if errors.As(lanes[i][j].err, &wte) && wte.Got == "" {
				wrong = append(wrong, wte)
			}
		}
	}
	if len(wrong) == 0 {
		return
	}
	p := in.client.Pipeline()
	types := make([]*redis.StatusCmd, len(wrong))
	for i, wte := range wrong {
		types[i] = p.Type(ctx, wte.Key)
	}
	_, _ = p.Exec(ctx)
	for i, wte := range wrong {
		if t, err := types[i].Result(); err == nil && t != "none" {
			wte.Got = t
		}
	}
}

// readLateLeases reads, in a third round trip, the leases of the groups
// found only on backfill lanes (lateNames[i] for i in late) and merges
// them into names[i] and lr[i], keeping names sorted.
func (in *Inspector) readLateLeases(ctx context.Context, op string, keys []string, late []int, lateNames, names [][]string, lr [][]leaseRead, perPartition bool) error {
	p := in.client.Pipeline()
	sub := make([]string, len(late))
	subNames := make([][]string, len(late))
	pttl := make([][]*redis.DurationCmd, len(late))
	for n, i := range late {
		sub[n], subNames[n] = keys[i], lateNames[i]
		for _, g := range lateNames[i] {
			pttl[n] = append(pttl[n], p.PTTL(ctx, in.layout.LeaseKey(g, keys[i])))
		}
	}
	cl := in.queueLeases(ctx, p, sub, subNames, perPartition)
	if _, err := p.Exec(ctx); pipeErr(op, err) != nil {
		return pipeErr(op, err)
	}
	got := make([][]leaseRead, len(late))
	for n := range late {
		got[n] = make([]leaseRead, len(subNames[n]))
	}
	if err := cl.read(ctx, op, in, sub, subNames, got); err != nil {
		return err
	}
	for n, i := range late {
		for j, g := range subNames[n] {
			r := got[n][j]
			if d, err := pttl[n][j].Result(); err == nil {
				r.pttl, r.pttlOK = ttlMs(d), true
			}
			at, _ := slices.BinarySearch(names[i], g)
			names[i] = slices.Insert(names[i], at, g)
			lr[i] = slices.Insert(lr[i], at, r)
		}
	}
	return nil
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
	for _, r := range lr {
		// A lane's own error (read below) says more; it wins.
		if r.err != nil && p.Error == "" && lanes[0].err == nil && lanes[1].err == nil {
			p.Error, p.err = r.err.Error(), r.err
		}
	}
	for li, l := range lanes {
		if l.err != nil {
			l.lane.Error = l.err.Error()
			if p.Error == "" {
				p.Error, p.err = l.lane.Error, l.err
			}
		}
		if li > 0 && !l.lane.Exists && l.err == nil {
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
			if l.err != nil {
				// A lane that could not be read: what the group has left
				// to read there is unknown.
				g.Lag = nil
				continue
			}
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
		g.leaseUnread, g.genUnread = lr[j].leaseBad, lr[j].genBad
		if w.parked != nil {
			g.Parked = ptr(w.parked[parkedKey{name, key}])
		}
		g.LeaseState = LeaseStateOf(&g)
		g.Paused = pausedOf(w.pauses, name, key)
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
