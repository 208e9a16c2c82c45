package partitioned

import (
	"slices"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/placement"
)

// event is something the coordinator reacts to.
type event interface{ isEvent() }

type (
	// evDiscovered: keys found in the indexes; complete when every
	// category was scanned to the end.
	evDiscovered struct {
		keys     []string
		complete bool
		started  time.Time // when the scan began
	}
	// evSignal: partitions published to (PartitionWatcher), or appended
	// to (AppendWatcher).
	evSignal struct {
		keys []string
		// news, when not nil, is per key the lanes the appends were
		// to (0: unknown, any lane).
		news []laneNews
		// batch numbers the announcements the keys were checked for
		// (followAppends), 0 for other signals: see evCandidates.
		batch uint64
	}
	// evCandidates: keys announced appends may be for that are not known
	// to be partitions yet, sent before their index check (followAppends,
	// batch numbering the announcements). Those HRW gives this node are
	// taken on at once, their acquisition checking the index
	// (LeaseRequest.Index); the others wait for the check's evSignal.
	// docs/decisions/0052-index-check-with-the-acquisition.md.
	evCandidates struct {
		category string
		keys     []string
		news     []laneNews // per key, the lanes appended to, as evSignal's
		batch    uint64
	}
	// evAnnounced: partition keys an announced append may be for that
	// the category's index did not confirm (a lane of another category,
	// a reaped key, or a failed check): woken if known, never taken on.
	evAnnounced struct{ keys []string }
	// evWake: watched partitions with entries (EntryWaiter).
	evWake struct {
		keys []string
		news laneNews // the lanes of the watch that fired
	}
	// evResync: wake-up signals may have been lost.
	evResync struct{}
	// evLedgerList: the subscription's parked entries, as read by the
	// list numbered started (Subscription.ledgerReads).
	evLedgerList struct {
		entries []ledger.Parked
		started int64
	}
	// evLedgerSignal: an operator request on key.
	evLedgerSignal struct{ key string }
	// evWorkerDone: a worker returned.
	evWorkerDone struct {
		w   *worker
		res result
	}
	// evRegistered: the group is registered on every category; partitions
	// may be read.
	evRegistered struct{}
	// evReaped: a reap attempt finished.
	evReaped struct {
		key    string
		reaped bool
		last   bool // the last key of the reap batch
	}
)

func (evDiscovered) isEvent() {}
func (evSignal) isEvent()     {}
func (evCandidates) isEvent() {}

// newsOf is the lanes the announcements for its i-th key are about.
func (ev evCandidates) newsOf(i int) laneNews {
	return evSignal{news: ev.news}.newsOf(i)
}
func (evAnnounced) isEvent()    {}
func (evWake) isEvent()         {}
func (evResync) isEvent()       {}
func (evLedgerList) isEvent()   {}
func (evLedgerSignal) isEvent() {}
func (evWorkerDone) isEvent()   {}
func (evReaped) isEvent()       {}
func (evRegistered) isEvent()   {}

// newsOf is the lanes the signal for its i-th key is about.
func (ev evSignal) newsOf(i int) laneNews {
	if i < len(ev.news) && ev.news[i] != 0 {
		return ev.news[i]
	}
	return newsAll
}

// pstate is a known partition's state on this node.
type pstate uint8

const (
	pForeign   pstate = iota // HRW gives it to another node (or to nobody, under a cap)
	pActive                  // a worker runs for it (waiting for a slot, leased, or drained)
	pWatched                 // mine, idle, no lease: waiting for entries
	pContested               // mine, but its lease is held by someone else: retry at retryAt
	pBackoff                 // mine, the last activation failed: retry at retryAt
	pParked                  // mine, parked in the ledger: waiting for an operator
)

// part is the coordinator's record of one partition key. Only the
// coordinator goroutine touches it.
type part struct {
	key   string
	mine  bool
	state pstate
	w     *worker

	// after is, per lane stream, the newest id known to be delivered; a
	// missing stream means unknown. It is what the node waits from.
	after map[string]string
	// cleanGen is the generation this node last released with nothing
	// pending; a next acquire at cleanGen+1 proves nobody held the key in
	// between.
	cleanGen int64

	dirty       bool      // woken while a worker ran: activate again when it returns
	checkLedger bool      // the next worker must read the ledger even when fresh
	retryAt     time.Time // pContested, pBackoff
	since       time.Time // when pContested began
	backoff     time.Duration
	sweepAt     time.Time // pWatched without a usable wait
	idleSince   time.Time // pWatched
	reapAt      time.Time // next reap attempt (ReapAfter > 0)
	reapBackoff time.Duration
	reaping     bool
	parked      *ledger.Parked
	reaped      bool      // retired by this node; not reaped again until active
	created     time.Time // when the coordinator learnt of the key
	// candidate is the category whose index the key's next acquisition
	// checks it against, "" once the key is known to be a partition
	// (evCandidates); candidateBatch is the announcements it was taken
	// on or woken for before their check, whose signal wakes it no more.
	candidate      string
	candidateBatch uint64
	// ledgerSeen is ledgerReads read once a worker's park or resolve of
	// the key had returned: a list numbered above it started after that
	// write. (A wall time here would trust the clock's order of two
	// goroutines' readings; a count does not.)
	ledgerSeen int64
}

// coordinator owns the partition map: it decides which keys this node
// should hold (HRW over the live members), starts a worker for each key
// that needs one, and routes wake-ups, operator requests and worker
// results. It runs on one goroutine, so part needs no locks; everything
// that blocks (leases, reads, handlers) happens on workers.
type coordinator struct {
	p        *Subscription
	parts    map[string]*part
	members  []string
	memberCh <-chan struct{}
	stopping bool
	active   int
	reaping  bool
	// registered: the group is registered on every category. Until then
	// no worker starts: assigned partitions wait in pBackoff.
	registered bool
}

func newCoordinator(p *Subscription) *coordinator {
	return &coordinator{p: p, parts: make(map[string]*part)}
}

// tickEvery is the coordinator's timer: contested partitions are retried,
// idle ones swept and reaps started on it. It is fine-grained because it
// bounds failover: a dead owner's partition is taken at most one tick
// after its retry is due.
func (c *coordinator) tickEvery() time.Duration {
	d := c.p.cfg.RenewEvery / 8
	return max(d, 10*time.Millisecond)
}

func (c *coordinator) run() {
	p := c.p
	defer p.wg.Done()
	defer close(p.coordDone)
	defer p.bgCancel()
	defer p.closeReaders() // every worker has returned its reader

	members, ch := p.host.Members()
	c.memberCh = ch
	if members != nil {
		c.setMembers(members)
	}
	tick := p.clk.NewTimer(c.tickEvery())
	defer tick.Stop()
	stopping := p.stopping
	for {
		if c.stopping && c.active == 0 {
			return
		}
		select {
		case <-c.memberCh:
			members, ch := p.host.Members()
			c.memberCh = ch
			if !c.stopping {
				c.setMembers(members)
			}
		case ev := <-p.events:
			c.handle(ev)
		case <-tick.C():
			if !c.stopping {
				c.tick()
			}
			tick.Reset(c.tickEvery())
		case <-stopping:
			stopping = nil
			c.stopping = true
		}
	}
}

func (c *coordinator) now() time.Time { return c.p.clk.Now() }

// setMembers recomputes ownership for the new membership.
func (c *coordinator) setMembers(members []string) {
	if members == nil {
		return
	}
	c.members = slices.Clone(members)
	c.reassign(nil)
}

// reassign decides ownership of every known key, or, without a cap, of
// only the keys given (the others' answer cannot have changed).
func (c *coordinator) reassign(only []string) {
	p := c.p
	if c.members == nil || c.stopping {
		return
	}
	capped := p.cfg.MaxPartitions > 0
	pl := placement.Of(p.host) // placement.go
	var owners map[string]string
	if capped {
		only = nil
		owners = c.placed(pl)
	}
	gained, lost := 0, 0
	decide := func(pt *part) {
		var mine bool
		if capped {
			mine = owners[pt.key] == p.node
		} else {
			mine = pl.Owner(p.cfg.Name, pt.key, pt.key, c.members, p.node, c.holds(pt)) == p.node
		}
		if mine != pt.mine {
			if mine {
				gained++
			} else {
				lost++
			}
			c.setMine(pt, mine)
		}
	}
	if only != nil {
		for _, k := range only {
			if pt := c.parts[k]; pt != nil {
				decide(pt)
			}
		}
	} else {
		for _, pt := range c.parts {
			decide(pt)
		}
	}
	if gained > 0 || lost > 0 || only == nil {
		observe.Assignment(p.obs, runtime.AssignmentEvent{
			Subscription: p.cfg.Name, Members: slices.Clone(c.members),
			Assigned: int(p.c.assigned.Load()), Known: len(c.parts), Gained: gained, Lost: lost,
		})
		if gained > 0 || lost > 0 {
			p.log.Debug("assignment changed", "subscription", p.cfg.Name, "assigned", p.c.assigned.Load(),
				"known", len(c.parts), "gained", gained, "lost", lost, "members", c.members)
		}
	}
}

func (c *coordinator) setMine(pt *part, mine bool) {
	p := c.p
	pt.mine = mine
	p.assigned.set(pt.key, mine)
	if mine {
		p.c.assigned.Add(1)
		switch pt.state {
		case pForeign:
			if pt.parked != nil {
				c.setState(pt, pParked)
				return
			}
			c.activate(pt, false)
		case pActive:
			// A worker still hands the key over; when it returns the key
			// is activated again (see workerDone).
			pt.dirty = true
		}
		return
	}
	p.c.assigned.Add(-1)
	switch pt.state {
	case pActive:
		pt.w.handOver()
	default:
		c.setState(pt, pForeign)
	}
}

// setState moves pt to s, keeping the gauges and the watch set in step.
func (c *coordinator) setState(pt *part, s pstate) {
	p := c.p
	if pt.state == s {
		return
	}
	switch pt.state {
	case pWatched:
		p.c.watched.Add(-1)
		p.watch.remove(pt.key)
	case pParked:
		p.c.parkedNow.Add(-1)
	}
	pt.state = s
	switch s {
	case pWatched:
		p.c.watched.Add(1)
	case pParked:
		p.c.parkedNow.Add(1)
		p.watch.forget(pt.key)
	case pForeign:
		p.watch.forget(pt.key)
	}
}

// activate starts a worker for pt. The worker waits for a slot, takes the
// lease and processes until the partition is idle, handed over or
// stopped.
func (c *coordinator) activate(pt *part, fromWaiter bool) {
	p := c.p
	if c.stopping || !pt.mine {
		return
	}
	if pt.state == pActive {
		pt.dirty = true
		pt.w.poke(fromWaiter, newsAll)
		return
	}
	if !c.registered {
		pt.retryAt = time.Time{}
		c.setState(pt, pBackoff)
		return
	}
	c.setState(pt, pActive)
	p.watch.remove(pt.key)
	pt.reaped = false
	w := newWorker(p, pt)
	w.fromWaiter.Store(fromWaiter)
	pt.checkLedger = false
	pt.dirty = false
	pt.w = w
	c.active++
	p.c.active.Add(1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		res := w.run()
		p.send(evWorkerDone{w: w, res: res})
	}()
}

func (c *coordinator) part(key string) *part {
	pt := c.parts[key]
	if pt == nil {
		pt = &part{key: key, created: c.now()}
		c.parts[key] = pt
	}
	return pt
}

func (c *coordinator) handle(ev event) {
	p := c.p
	switch ev := ev.(type) {
	case evRegistered:
		c.registered = true
		p.log.Debug("group registered", "subscription", p.cfg.Name, "categories", p.cfg.Categories)
		c.tick()
	case evWorkerDone:
		c.workerDone(ev.w, ev.res)
	case evDiscovered:
		var added []string
		for _, k := range ev.keys {
			if c.parts[k] == nil {
				added = append(added, k)
			}
			c.part(k).candidate = "" // indexed: a partition
		}
		if ev.complete {
			c.forgetUnindexed(ev.keys, ev.started)
		}
		if len(added) > 0 && !c.stopping {
			c.reassign(added)
		}
	case evSignal:
		var added []string
		for i, k := range ev.keys {
			pt := c.parts[k]
			if pt == nil {
				added = append(added, k)
				c.part(k)
				continue
			}
			// The index holds it: a partition.
			fresh := ev.batch != 0 && ev.batch == pt.candidateBatch
			pt.candidate, pt.candidateBatch = "", 0
			if fresh && (pt.state == pActive || pt.state == pWatched) {
				// The appends it was taken on or woken for already
				// (evCandidates): its worker, started or woken after they
				// were announced, reads (or read) them. One whose
				// acquisition failed is retried now.
				continue
			}
			c.wake(pt, false, ev.newsOf(i))
		}
		if len(added) > 0 {
			c.reassign(added)
		}
	case evCandidates:
		c.candidates(ev)
	case evAnnounced:
		for _, k := range ev.keys {
			if pt := c.parts[k]; pt != nil {
				c.wake(pt, false, newsAll)
			}
		}
	case evWake:
		for _, k := range ev.keys {
			if pt := c.parts[k]; pt != nil {
				c.wake(pt, true, ev.news)
			}
		}
	case evResync:
		// Signals may have been lost: without a waiter, read every idle
		// partition once.
		if p.waiter == nil {
			for _, pt := range c.parts {
				if pt.mine && pt.state == pWatched {
					c.activate(pt, false)
				}
			}
		}
	case evLedgerSignal:
		// The next worker of the key reads the ledger, whatever it
		// knows: that is where the request is.
		known := c.parts[ev.key] != nil
		pt := c.part(ev.key)
		pt.checkLedger = true
		pt.candidate = "" // in the ledger: a partition
		if !known {
			c.reassign([]string{ev.key})
		}
		if pt.mine {
			switch pt.state {
			case pParked, pWatched, pContested, pBackoff:
				c.activate(pt, false)
			case pActive:
				pt.dirty = true
			}
		}
	case evLedgerList:
		c.ledgerList(ev.entries, ev.started)
	case evReaped:
		if ev.last {
			c.reaping = false
		}
		pt := c.parts[ev.key]
		if pt == nil {
			return
		}
		pt.reaping = false
		if ev.reaped {
			p.c.reaped.Add(1)
			pt.reaped = true
			// The streams are gone: any entry a publisher appends from
			// now on is news, whatever its id.
			pt.after = nil
			pt.reapBackoff = 0
			if pt.state == pWatched {
				after := make(map[string]string)
				for _, ln := range p.lanesOf(pt.key) {
					after[ln.stream] = "0-0"
				}
				pt.after = after
				if p.waiter != nil {
					p.watch.add(pt.key, after)
				}
			}
			return
		}
		if pt.reapBackoff == 0 {
			pt.reapBackoff = p.cfg.ReapAfter
		} else {
			pt.reapBackoff = min(2*pt.reapBackoff, time.Hour)
		}
		pt.reapAt = c.now().Add(pt.reapBackoff)
	}
}

// candidates takes on the candidate keys of ev that HRW gives this node,
// each acquisition checking the key against ev.category's index; it
// forgets the others, which their own node checks that way and this node
// learns of from the index check (evSignal). Under a MaxPartitions cap
// every placement decision weighs every known key, and before the first
// membership none can be made: new candidates wait for the check there.
// Candidates the node knows as partitions are woken at once.
func (c *coordinator) candidates(ev evCandidates) {
	if c.stopping {
		return
	}
	place := c.p.cfg.MaxPartitions == 0 && c.members != nil
	var added []string
	for i, k := range ev.keys {
		if pt := c.parts[k]; pt != nil {
			if pt.candidate == "" {
				// A partition already (found by a scan, or checked in
				// another category): woken now, as the check's signal
				// (or, not in this category's index, evAnnounced) would
				// wake it, and not again by the check's signal for
				// this batch.
				pt.candidateBatch = ev.batch
				c.wake(pt, false, ev.newsOf(i))
			}
			continue
		}
		if !place {
			continue
		}
		pt := c.part(k)
		pt.candidate, pt.candidateBatch = ev.category, ev.batch
		added = append(added, k)
	}
	if len(added) == 0 {
		return // reassign(nil) would place every known key again
	}
	c.reassign(added)
	for _, k := range added {
		if pt := c.parts[k]; pt != nil && !pt.mine {
			delete(c.parts, k)
		}
	}
}

// forget drops pt from the known partitions.
func (c *coordinator) forget(pt *part) {
	if pt.mine {
		c.p.c.assigned.Add(-1)
		c.p.assigned.set(pt.key, false)
	}
	c.setState(pt, pForeign)
	delete(c.parts, pt.key)
}

// wake reacts to news on pt: activate it, or tell its worker.
func (c *coordinator) wake(pt *part, fromWaiter bool, news laneNews) {
	if !pt.mine || c.stopping {
		return
	}
	switch pt.state {
	case pActive:
		pt.dirty = true
		pt.w.poke(fromWaiter, news)
	case pWatched, pBackoff:
		c.activate(pt, fromWaiter)
	}
}

// forgetUnindexed drops idle partitions that left every index (reaped):
// a publish records them again. Keys learnt of after the scan began (from
// a publish signal) are kept: the scan may simply have missed them.
func (c *coordinator) forgetUnindexed(indexed []string, started time.Time) {
	in := make(map[string]bool, len(indexed))
	for _, k := range indexed {
		in[k] = true
	}
	for k, pt := range c.parts {
		if in[k] || pt.state == pActive || pt.state == pParked || pt.parked != nil || !pt.created.Before(started) {
			continue
		}
		c.forget(pt)
	}
}

// workerDone moves pt on according to how its worker ended.
func (c *coordinator) workerDone(w *worker, res result) {
	p := c.p
	c.active--
	p.c.active.Add(-1)
	pt := c.parts[w.key]
	if pt == nil || pt.w != w {
		return
	}
	pt.w = nil
	now := c.now()
	// Leave pActive by hand. The worker put the key in the watch set when
	// it drained; it stays there only if the key goes on idle here
	// (leaving it spares the wait loop a restart).
	pt.state = pForeign
	c.unkeep(pt) // placement.go
	switch {
	case c.stopping || !pt.mine:
		p.watch.forget(pt.key)
	case res.kind != resIdle || pt.dirty:
		p.watch.remove(pt.key)
	}
	if res.after != nil {
		pt.after = res.after
	}
	if res.kind == resIdle {
		pt.cleanGen = res.gen
	} else if res.kind != resContested {
		// Entries may be pending, or the ledger changed behind us.
		pt.cleanGen = 0
	}
	switch {
	case res.kind == resParked:
		pt.parked = res.parked
		pt.ledgerSeen = p.ledgerReads.Load()
	case res.resolved:
		pt.parked = nil
		pt.ledgerSeen = p.ledgerReads.Load()
	}
	if res.kind == resFatal {
		p.fail(res.err)
		return
	}
	if res.indexed {
		pt.candidate = "" // the batch stays, for the check's signal (evSignal)
	}
	if pt.candidate != "" {
		// Its acquisition did not find it indexed: not a partition (a
		// stream that only looks like one), not yet indexed, or not
		// known (it failed, or the key went to another node first).
		// The index check decides: it takes the key on if the index
		// holds it, and remembers it to check again when the index
		// changes otherwise (followAppends).
		pt.dirty = false
		c.forget(pt)
		return
	}
	dirty := pt.dirty
	pt.dirty = false
	if c.stopping || !pt.mine {
		return
	}
	switch res.kind {
	case resParked:
		c.setState(pt, pParked)
	case resContested, resLost:
		if pt.since.IsZero() || res.kind == resLost {
			pt.since = now
		}
		// Retry often for a lease TTL and a renewal period (the time a
		// dead owner's lease can take to expire), then back off. With
		// the tick, a lease that expires is taken within 3/8 of a
		// renewal period, which keeps failover under TTL + RenewEvery.
		d := p.cfg.RenewEvery / 4
		if now.Sub(pt.since) > p.cfg.LeaseTTL+p.cfg.RenewEvery {
			if pt.backoff == 0 {
				pt.backoff = d
			}
			pt.backoff = min(2*pt.backoff, p.cfg.LeaseTTL)
			// Jittered below the doubling ceiling, so nodes kept out
			// together do not retry together.
			d = p.jit.Between(d, pt.backoff)
		}
		pt.retryAt = now.Add(d)
		c.setState(pt, pContested)
	case resError:
		if pt.backoff == 0 {
			pt.backoff = p.cfg.RenewEvery / 2
		} else {
			pt.backoff = min(2*pt.backoff, p.cfg.LeaseTTL)
		}
		// After a Redis outage every node's partitions failed at once:
		// a wait drawn below the ceiling scatters their retries.
		pt.retryAt = now.Add(p.jit.Between(pt.backoff/2, pt.backoff))
		c.setState(pt, pBackoff)
	default: // resIdle, resHandedOff, resStopped
		pt.since, pt.backoff = time.Time{}, 0
		if dirty || res.kind != resIdle {
			c.activate(pt, false)
			return
		}
		c.watchIdle(pt, now)
	}
}

// watchIdle puts an idle partition in the watched set.
func (c *coordinator) watchIdle(pt *part, now time.Time) {
	p := c.p
	c.setState(pt, pWatched)
	pt.idleSince = now
	if p.cfg.ReapAfter > 0 && pt.reapAt.Before(now) {
		pt.reapAt = now.Add(p.cfg.ReapAfter)
	}
	if p.waiter != nil && pt.after != nil && len(pt.after) == len(p.lanesOf(pt.key)) {
		p.watch.add(pt.key, pt.after)
		pt.sweepAt = time.Time{}
		return
	}
	pt.sweepAt = now.Add(p.cfg.SweepEvery)
}

// tick retries contested and failed partitions, sweeps idle partitions
// the broker cannot wait on, and starts reaps.
func (c *coordinator) tick() {
	p := c.p
	now := c.now()
	var reap []string
	for _, pt := range c.parts {
		if !pt.mine {
			continue
		}
		switch pt.state {
		case pContested, pBackoff:
			if !now.Before(pt.retryAt) {
				c.activate(pt, false)
			}
		case pWatched:
			if !pt.sweepAt.IsZero() && !now.Before(pt.sweepAt) {
				c.activate(pt, false)
				continue
			}
			if p.cfg.ReapAfter > 0 && !pt.reaping && !pt.reaped && !now.Before(pt.reapAt) && len(reap) < 100 {
				reap = append(reap, pt.key)
			}
		}
	}
	if len(reap) > 0 && !c.reaping {
		c.reaping = true
		for _, k := range reap {
			c.parts[k].reaping = true
		}
		p.wg.Add(1)
		go p.reapKeys(p.bgCtx, reap)
	}
}
