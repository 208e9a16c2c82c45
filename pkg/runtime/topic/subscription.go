package topic

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
)

// Runtime is one subscription of a topic on this node: its
// handler, dedup memory, counters and fatal error.
type Runtime struct {
	t   *Consumer
	cfg Subscription

	failed atomic.Bool
	mu     sync.Mutex
	err    error
	dedup  map[int32]*dedupMemory
	// ledgerReads counts the ledger polls' ListParked calls, each taking
	// its number before it starts: the logical clock reconcile judges a
	// list's age by (see parkState.seen).
	ledgerReads atomic.Int64
	// dedupGen is the lease generation each partition's dedup memory was
	// last used under (dedupFor).
	dedupGen map[int32]int64

	c subCounters
}

// Name is the subscription's name.
func (s *Runtime) Name() string { return s.cfg.Name }

// Err is the fatal error that stopped the subscription, or nil.
func (s *Runtime) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Counters returns the subscription's counters (see the Counter* names).
func (s *Runtime) Counters() map[string]int64 { return s.c.snapshot() }

// fail stops the subscription on a fatal handler error and reports it to
// the node. Other subscriptions of the topic go on.
func (s *Runtime) fail(err error) {
	s.mu.Lock()
	first := s.err == nil
	if first {
		s.err = err
	}
	s.mu.Unlock()
	if !first {
		return
	}
	s.failed.Store(true)
	t := s.t
	t.log.Error("fatal handler failure: stopping the subscription", "subscription", s.cfg.Name, "err", err)
	all := true
	for _, o := range t.subs {
		all = all && o.failed.Load()
	}
	t.mu.Lock()
	if t.fatalErr == nil {
		t.fatalErr = err
	}
	if all {
		t.join = runtime.JoinFailed
		if t.state == runtime.StateRunning {
			t.state = runtime.StateFailed
		}
	}
	t.mu.Unlock()
	t.host.Fail(t.name, fmt.Errorf("subscription %q: %w", s.cfg.Name, err))
	// Wake the partitions so that lanes blocked on this subscription let
	// the shared reader move on for the others.
	for _, tp := range t.heldParts() {
		tp.mu.Lock()
		tp.cond.Broadcast()
		tp.mu.Unlock()
		tp.kickFetch()
	}
}

// dedupOf returns the subscription's dedup memory of partition p. It
// outlives the partition's lease, so a partition that comes back to this
// node drops what it handled before.
// dedupFor readies partition p's dedup memory for a lease of generation
// gen. When another node held the partition since this node last did
// (gen is not the next generation), the memory starts empty: the other
// owner may have read the partition again from a checkpoint below what
// this node handled (a handoff leaves the records it did not start, and
// a checkpoint at their low watermark), and dropping the records this
// node remembers would then skip them after that replay, a gap in the
// aggregate's order.
func (s *Runtime) dedupFor(p int32, gen int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.dedupGen[p]; ok && last != gen-1 {
		delete(s.dedup, p)
	}
	s.dedupGen[p] = gen
}

func (s *Runtime) dedupOf(p int32) *dedupMemory {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dedup[p]
	if d == nil {
		d = newDedupMemory(s.t.cfg.DedupSize)
		s.dedup[p] = d
	}
	return d
}

// subCounters are one subscription's counters.
type subCounters struct {
	processed, failed, parked, resolved, duplicates, skipped, lost, catchUps observe.Counter
}

func (c *subCounters) snapshot() map[string]int64 {
	return map[string]int64{
		runtime.CounterProcessed: c.processed.Load(),
		runtime.CounterFailed:    c.failed.Load(),
		runtime.CounterParked:    c.parked.Load(),
		runtime.CounterResolved:  c.resolved.Load(),
		CounterDuplicates:        c.duplicates.Load(),
		CounterSkipped:           c.skipped.Load(),
		CounterLost:              c.lost.Load(),
		CounterCatchUps:          c.catchUps.Load(),
	}
}

// topicCounters are the topic's own counters (leases, checkpoints).
type topicCounters struct {
	acquired, released, leaseLost, untrusted, contested, renewals observe.Counter
	checkpoints, joinFailures, assigned, held                     observe.Counter
}

func (c *topicCounters) snapshot() map[string]int64 {
	return map[string]int64{
		runtime.CounterAcquired:  c.acquired.Load(),
		runtime.CounterReleased:  c.released.Load(),
		runtime.CounterLeaseLost: c.leaseLost.Load(),
		runtime.CounterUntrusted: c.untrusted.Load(),
		runtime.CounterContested: c.contested.Load(),
		runtime.CounterRenewals:  c.renewals.Load(),
		CounterCheckpoints:       c.checkpoints.Load(),
		CounterJoinFailures:      c.joinFailures.Load(),
		runtime.CounterAssigned:  c.assigned.Load(),
		CounterHeld:              c.held.Load(),
	}
}
