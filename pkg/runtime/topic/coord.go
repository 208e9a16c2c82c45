package topic

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/placement"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// topicEvent is something the topic's coordinator reacts to.
type topicEvent interface{ isTopicEvent() }

type (
	// evTopicPartitions: the topic's partitions, from a refresh.
	evTopicPartitions struct{ parts []int32 }
	// evTopicPartEnded: a held partition was handed off or lost.
	evTopicPartEnded struct {
		tp   *topicPart
		lost bool
	}
)

func (evTopicPartitions) isTopicEvent() {}
func (evTopicPartEnded) isTopicEvent()  {}

// post delivers an event to the coordinator, or drops it once the
// coordinator is gone.
func (t *Consumer) post(ev topicEvent) {
	select {
	case t.events <- ev:
	case <-t.coordDone:
	}
}

type slotState uint8

const (
	slotIdle   slotState = iota // no lease here
	slotHeld                    // a topicPart runs
	slotEnding                  // handed off, its topicPart not finished yet
)

// slot is the coordinator's record of one partition of the topic. Only
// the coordinator goroutine touches it.
type slot struct {
	p         int32
	mine      bool
	state     slotState
	tp        *topicPart
	retryAt   time.Time // next acquire attempt while mine and idle
	since     time.Time // when acquires began to fail
	backoff   time.Duration
	fromStart bool // found by a refresh: read from its beginning
}

// topicCoord decides which partitions this node holds (HRW over the live
// members), acquires them, hands them off, and keeps the partition list
// fresh. It runs on one goroutine; everything that drains or waits on
// handlers happens on the partitions' own goroutines.
type topicCoord struct {
	t        *Consumer
	slots    map[int32]*slot
	members  []string
	memberCh <-chan struct{}
	stopping bool
}

func newTopicCoord(t *Consumer) *topicCoord {
	return &topicCoord{t: t, slots: make(map[int32]*slot)}
}

func (c *topicCoord) tickEvery() time.Duration {
	return max(c.t.cfg.RenewEvery/4, 10*time.Millisecond)
}

func (c *topicCoord) run() {
	t := c.t
	defer t.wg.Done()
	defer close(t.coordDone)
	if !c.joinLoop() {
		return
	}
	tick := t.clk.NewTimer(c.tickEvery())
	defer tick.Stop()
	stopping := t.stopping
	if c.isStopping() {
		stopping = nil
		c.beginStop()
	}
	for {
		if c.stopping && c.busy() == 0 {
			return
		}
		select {
		case <-c.memberCh:
			members, ch := t.host.Members()
			c.memberCh = ch
			if !c.stopping && members != nil {
				c.members = slices.Clone(members)
				c.reassign()
			}
		case ev := <-t.events:
			c.handle(ev)
		case <-tick.C():
			if !c.stopping {
				c.tick()
			}
			tick.Reset(c.tickEvery())
		case <-stopping:
			stopping = nil
			c.beginStop()
		}
	}
}

func (c *topicCoord) isStopping() bool {
	select {
	case <-c.t.stopping:
		return true
	default:
		return false
	}
}

// busy counts the partitions held or still ending.
func (c *topicCoord) busy() int {
	n := 0
	for _, s := range c.slots {
		if s.state != slotIdle {
			n++
		}
	}
	return n
}

// joinLoop joins, retrying with backoff, until it succeeds (true) or the
// subscriptions stop (false).
func (c *topicCoord) joinLoop() bool {
	t := c.t
	b := backoff.New(t.cfg.JoinBackoff, t.cfg.JoinMaxBackoff, t.jit)
	for {
		if c.isStopping() || t.runCtx.Err() != nil {
			return false
		}
		// A join attempt ends early when Stop begins.
		ctx, cancel := context.WithCancel(t.runCtx)
		go func() {
			select {
			case <-t.stopping:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := c.join(ctx)
		cancel()
		if err == nil {
			t.mu.Lock()
			if t.join == runtime.JoinJoining {
				t.join = runtime.JoinJoined
			}
			t.mu.Unlock()
			close(t.started)
			t.log.Info("topic subscriptions joined", "members", c.members, "partitions", len(c.slots), "held", len(t.Held()))
			return true
		}
		if c.isStopping() || t.runCtx.Err() != nil {
			return false
		}
		wait := b.Next()
		t.mu.Lock()
		t.joinFailures++
		first := t.lastJoinErr == nil
		t.lastJoinErr = err
		t.mu.Unlock()
		t.c.joinFailures.Add(1)
		if first {
			t.log.Warn("joining failed; retrying", "err", err, "retryIn", wait)
		} else {
			t.log.Debug("joining failed; retrying", "err", err, "retryIn", wait)
		}
		observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "join", Err: err})
		select {
		case <-t.stopping:
			return false
		case <-t.runCtx.Done():
			return false
		default:
		}
		tm := t.clk.NewTimer(wait)
		select {
		case <-tm.C():
		case <-t.stopping:
			tm.Stop()
			return false
		case <-t.runCtx.Done():
			tm.Stop()
			return false
		}
	}
}

// join lists the partitions, reads the membership and takes this node's
// share. It is all or nothing: when any partition fails (other than being
// held by another node, which is retried later), every lease it took is
// released again.
func (c *topicCoord) join(ctx context.Context) error {
	t := c.t
	octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
	ps, err := t.cfg.Source.Partitions(octx, t.cfg.Topic)
	cancel()
	if err != nil {
		return fmt.Errorf("runtime: join topic %q: list partitions: %w", t.cfg.Topic, err)
	}
	if len(ps) == 0 {
		return fmt.Errorf("runtime: join topic %q: %w", t.cfg.Topic, ErrNoPartitions)
	}
	members, ch := t.host.Members()
	if members == nil {
		wctx, cancel := context.WithTimeout(ctx, t.cfg.LeaseTTL)
		for members == nil {
			select {
			case <-ch:
				members, ch = t.host.Members()
			case <-wctx.Done():
				cancel()
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("runtime: join topic %q: %w (no heartbeat of this node succeeded within %s)", t.cfg.Topic, ErrNoMembership, t.cfg.LeaseTTL)
			}
		}
		cancel()
	}
	c.members, c.memberCh = slices.Clone(members), ch
	for _, p := range ps {
		if c.slots[p] == nil {
			c.slots[p] = &slot{p: p}
		}
	}
	c.decide()
	var want []*slot
	for _, s := range c.sorted() {
		if s.mine {
			want = append(want, s)
		}
	}
	var ready []*topicPart
	undo := func() {
		for _, tp := range ready {
			tp.releaseUnstarted()
		}
	}
	now := t.clk.Now()
	for _, s := range want {
		tp, contested, err := c.acquireOne(ctx, s)
		if err != nil {
			undo()
			return fmt.Errorf("runtime: join topic %q: %w", t.cfg.Topic, err)
		}
		if contested {
			c.contested(s, now)
			continue
		}
		ready = append(ready, tp)
	}
	if err := c.attachLedger(ctx, ready); err != nil {
		undo()
		return fmt.Errorf("runtime: join topic %q: %w", t.cfg.Topic, err)
	}
	for _, tp := range ready {
		c.startPart(c.slots[tp.p], tp)
	}
	c.reportAssignment(len(want), 0)
	return nil
}

// hrwKey names partition p for rendezvous hashing: the topic is part of
// it so that partition 0 of every topic does not land on the same node.
func (c *topicCoord) hrwKey(p int32) string { return c.t.cfg.Topic + "/" + strconv.Itoa(int(p)) }

func (c *topicCoord) sorted() []*slot {
	out := make([]*slot, 0, len(c.slots))
	for _, s := range c.slots {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *slot) int { return int(a.p) - int(b.p) })
	return out
}

// decide sets mine on every slot from the members; it returns how many
// were gained and lost.
func (c *topicCoord) decide() (gained, lost int) {
	t := c.t
	pl := placement.Of(t.host) // placement.go
	var owners map[string]string
	if t.cfg.MaxPartitions > 0 {
		owners = c.placed(pl)
	}
	assigned := 0
	for p, s := range c.slots {
		var mine bool
		if owners != nil {
			mine = owners[c.hrwKey(p)] == t.node
		} else {
			mine = pl.Owner(placement.TopicScope(t.cfg.Topic), strconv.Itoa(int(p)), c.hrwKey(p), c.members, t.node, s.state == slotHeld) == t.node
		}
		if mine {
			assigned++
		}
		if mine != s.mine {
			if mine {
				gained++
				s.retryAt, s.since, s.backoff = time.Time{}, time.Time{}, 0
			} else {
				lost++
			}
			s.mine = mine
		}
	}
	t.c.assigned.Store(int64(assigned))
	return gained, lost
}

func (c *topicCoord) reportAssignment(gained, lost int) {
	t := c.t
	observe.Assignment(t.obs, runtime.AssignmentEvent{Subscription: t.name, Members: slices.Clone(c.members),
		Assigned: int(t.c.assigned.Load()), Known: len(c.slots), Gained: gained, Lost: lost})
	if gained > 0 || lost > 0 {
		t.log.Debug("assignment changed", "assigned", t.c.assigned.Load(), "known", len(c.slots),
			"gained", gained, "lost", lost, "members", c.members)
	}
}

// reassign recomputes ownership: partitions given away are handed off,
// partitions gained are acquired.
func (c *topicCoord) reassign() {
	if c.members == nil || c.stopping {
		return
	}
	gained, lost := c.decide()
	for _, s := range c.sorted() {
		if !s.mine && s.state == slotHeld {
			c.handoff(s, "handover")
		}
	}
	c.acquireDue()
	c.reportAssignment(gained, lost)
}

// acquireDue acquires every partition that is mine, idle and due.
func (c *topicCoord) acquireDue() {
	t := c.t
	now := t.clk.Now()
	var due []*slot
	for _, s := range c.sorted() {
		if s.mine && s.state == slotIdle && !now.Before(s.retryAt) {
			due = append(due, s)
		}
	}
	if len(due) == 0 {
		return
	}
	var ready []*topicPart
	for _, s := range due {
		tp, contested, err := c.acquireOne(t.runCtx, s)
		switch {
		case err != nil:
			c.failed(s, now, err)
		case contested:
			c.contested(s, now)
		default:
			ready = append(ready, tp)
		}
	}
	if err := c.attachLedger(t.runCtx, ready); err != nil {
		for _, tp := range ready {
			tp.releaseUnstarted()
			c.failed(c.slots[tp.p], now, err)
		}
		return
	}
	for _, tp := range ready {
		c.startPart(c.slots[tp.p], tp)
	}
}

// contested schedules the next acquire of a partition another node
// holds: often for a lease TTL and a renewal period (the time a dead
// owner's lease takes to expire), then backing off.
func (c *topicCoord) contested(s *slot, now time.Time) {
	cfg := &c.t.cfg
	if s.since.IsZero() {
		s.since = now
	}
	d := cfg.RenewEvery / 2
	if now.Sub(s.since) > cfg.LeaseTTL+cfg.RenewEvery {
		if s.backoff == 0 {
			s.backoff = d
		}
		s.backoff = min(2*s.backoff, cfg.LeaseTTL)
		// Jittered below the doubling ceiling, so nodes kept out
		// together do not retry together.
		d = c.t.jit.Between(d, s.backoff)
	}
	s.retryAt = now.Add(d)
}

func (c *topicCoord) failed(s *slot, now time.Time, err error) {
	t := c.t
	if t.runCtx.Err() != nil {
		return
	}
	if s.backoff == 0 {
		s.backoff = t.cfg.RenewEvery / 2
	} else {
		s.backoff = min(2*s.backoff, t.cfg.LeaseTTL)
	}
	// After a store outage every node's partitions failed at once: a wait
	// drawn below the ceiling scatters their retries.
	wait := t.jit.Between(s.backoff/2, s.backoff)
	s.retryAt = now.Add(wait)
	t.log.Warn("taking a partition failed", "partition", s.p, "err", err, "retryIn", wait)
	observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "acquire", Err: err})
}

// attachLedger reads the subscriptions' parked entries once and gives
// each acquired partition its own.
func (c *topicCoord) attachLedger(ctx context.Context, tps []*topicPart) error {
	t := c.t
	if len(tps) == 0 {
		return nil
	}
	for i, sr := range t.subs {
		octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
		entries, err := t.cfg.Ledger.ListParked(octx, sr.cfg.Name)
		cancel()
		if err != nil {
			return fmt.Errorf("list parked of %q: %w", sr.cfg.Name, err)
		}
		byPart := t.entriesByPartition(entries)
		for _, tp := range tps {
			tp.subs[i].adopt(byPart[tp.p])
		}
	}
	return nil
}

// entriesByPartition keeps the entries of this topic, by partition.
func (t *Consumer) entriesByPartition(entries []ledger.Parked) map[int32][]ledger.Parked {
	m := make(map[int32][]ledger.Parked)
	for _, e := range entries {
		if e.Source != source.Kafka || e.Topic != t.cfg.Topic {
			continue
		}
		p, err := strconv.ParseInt(e.Partition, 10, 32)
		if err != nil {
			continue
		}
		m[int32(p)] = append(m[int32(p)], e)
	}
	return m
}

// acquireOne takes partition s.p: lease, checkpoints, watermarks. The
// partition is returned prepared, not started. On an error the lease is
// released again.
func (c *topicCoord) acquireOne(ctx context.Context, s *slot) (*topicPart, bool, error) {
	t := c.t
	p := s.p
	start := t.clk.Now()
	octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
	defer cancel()
	leaseKey, genKey := t.cfg.Checkpoints.LeaseKeys(t.group, p)
	lease, ok, err := t.cfg.Leases.AcquirePartitionLease(octx, leaseKey, genKey, t.node, t.cfg.LeaseTTL)
	if err != nil {
		return nil, false, fmt.Errorf("acquire lease of partition %d: %w", p, err)
	}
	if !ok {
		t.c.contested.Add(1)
		t.leaseEvent(p, runtime.LeaseContested, 0, "")
		return nil, true, nil
	}
	l := &topicLease{p: p, fence: lease.Fence, gen: lease.Generation}
	l.trust.Begin(start, t.cfg.TrustWindow)
	// Counted and reported at once: a failure below gives the lease back
	// (releaseUnstarted), and that end is reported too.
	t.c.acquired.Add(1)
	t.leaseEvent(p, runtime.LeaseAcquired, l.gen, "")
	tp := newTopicPart(t, l)
	// Renewed from now on, until it starts (start) or is given back
	// (releaseUnstarted).
	t.partsMu.Lock()
	t.acquired[p] = l
	t.partsMu.Unlock()
	fail := func(err error) (*topicPart, bool, error) {
		tp.releaseUnstarted()
		return nil, false, err
	}
	checkpoints := make([]int64, len(t.subs))
	found := make([]bool, len(t.subs))
	for _, sr := range t.subs {
		sr.dedupFor(p, l.gen)
	}
	for i, sr := range t.subs {
		next, ok, err := t.cfg.Checkpoints.Load(octx, t.group, sr.cfg.Name, p)
		if err != nil {
			return fail(fmt.Errorf("load checkpoint of %q partition %d: %w", sr.cfg.Name, p, err))
		}
		checkpoints[i], found[i] = next, ok
	}
	wms, err := t.cfg.Source.Watermarks(octx, t.cfg.Topic, p)
	if err != nil {
		return fail(fmt.Errorf("read watermarks of partition %d: %w", p, err))
	}
	wm := wms[p]
	for i, sr := range t.subs {
		var startAt int64
		switch {
		case found[i]:
			startAt = checkpoints[i]
		case s.fromStart || t.cfg.StartFrom == kafkasource.FromEarliest:
			startAt = wm.Earliest
		default:
			startAt = wm.Head
		}
		saved := int64(-1)
		if found[i] {
			saved = checkpoints[i]
		}
		switch {
		case startAt < wm.Earliest:
			// Retention (or DeleteRecords) took records nobody handled:
			// say so loudly, then go on from what is left.
			sr.reportLost(p, startAt, wm.Earliest, "checkpoint below the earliest retained offset")
			startAt = wm.Earliest
		case startAt > wm.Head:
			// Usually a topic deleted and created again: everything it
			// holds now is new to the subscription.
			t.log.Error("checkpoint beyond the partition's head; reading the partition from its start",
				"subscription", sr.cfg.Name, "partition", p, "checkpoint", startAt, "earliest", wm.Earliest, "head", wm.Head)
			observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "checkpoint", Err: &kafkasource.OffsetError{
				Topic: t.cfg.Topic, Partition: p, Offset: startAt, Earliest: wm.Earliest, Head: wm.Head, Err: kafkasource.ErrOffsetBeyondHead}})
			startAt = wm.Earliest
			// The offsets dedup remembers are of the old topic.
			sr.dedupOf(p).forgetOffsets()
		}
		tp.addSub(sr, startAt, saved)
	}
	tp.head = wm.Head
	t.log.Debug("partition acquired", "partition", p, "generation", l.gen)
	return tp, false, nil
}

func (c *topicCoord) startPart(s *slot, tp *topicPart) {
	if tp.lease.lost.Load() {
		// Refused or untrusted while it waited to start: someone else may
		// hold it now; retry as for a contested lease.
		tp.releaseUnstarted()
		c.contested(s, c.t.clk.Now())
		return
	}
	s.state, s.tp = slotHeld, tp
	s.retryAt, s.since, s.backoff = time.Time{}, time.Time{}, 0
	tp.start()
}

func (c *topicCoord) handoff(s *slot, reason string) {
	s.state = slotEnding
	s.tp.handoff(reason)
}

func (c *topicCoord) beginStop() {
	c.stopping = true
	for _, s := range c.sorted() {
		if s.state == slotHeld {
			c.handoff(s, "stop")
		}
	}
}

func (c *topicCoord) handle(ev topicEvent) {
	t := c.t
	switch ev := ev.(type) {
	case evTopicPartEnded:
		s := c.slots[ev.tp.p]
		if s == nil || s.tp != ev.tp {
			return
		}
		s.state, s.tp = slotIdle, nil
		if ev.lost && !c.stopping {
			// Someone else may hold it now; try again as for a
			// contested lease.
			c.contested(s, t.clk.Now())
		}
		if s.mine && !c.stopping {
			c.acquireDue()
		}
	case evTopicPartitions:
		added := 0
		for _, p := range ev.parts {
			if c.slots[p] == nil {
				// New since the join: read from its beginning whatever
				// StartFrom says, or its first records are never read.
				c.slots[p] = &slot{p: p, fromStart: true}
				added++
			}
		}
		if added > 0 {
			t.log.Info("topic gained partitions", "added", added, "partitions", len(c.slots))
			c.reassign()
		}
	}
}

// tick retries partitions that are mine but not held.
func (c *topicCoord) tick() { c.acquireDue() }

// refreshLoop lists the topic's partitions every RefreshEvery and tells
// the coordinator.
func (t *Consumer) refreshLoop(ctx context.Context) {
	defer t.wg.Done()
	select {
	case <-t.started:
	case <-ctx.Done():
		return
	}
	for t.sleep(ctx, t.cfg.RefreshEvery) {
		octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
		ps, err := t.cfg.Source.Partitions(octx, t.cfg.Topic)
		cancel()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				t.log.Warn("listing the topic's partitions failed", "err", err)
				observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "refresh", Err: err})
			}
			continue
		}
		select {
		case t.events <- evTopicPartitions{parts: ps}:
		case <-ctx.Done():
			return
		}
	}
}
