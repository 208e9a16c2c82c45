package topic

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/lease"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// topicLease is the lease of one held partition, shared by the renewer,
// the partition's lanes (which check it before every handler call) and
// its fenced writes.
type topicLease struct {
	p     int32
	fence broker.Fence
	gen   int64

	// trust is measured on the clock's monotonic reading (see
	// trustDeadline): a wall clock set back does not extend it.
	trust  lease.Deadline
	lost   atomic.Bool
	cause  atomic.Value // error: the first cause lose was given
	onLose func(cause error)
	// ended is set by the one lease event that ends the lease
	// (Consumer.endLease), so that each acquired lease is
	// reported released, lost or untrusted exactly once.
	ended atomic.Bool
}

func (l *topicLease) trusted(now time.Time) bool { return !l.lost.Load() && l.trust.Left(now) > 0 }

func (l *topicLease) extend(from time.Time, window time.Duration) { l.trust.Extend(from, window) }

// watchTrust drops the lease when its trust window passes without a
// renewal: it sleeps until the trust deadline, and when it wakes to a
// deadline a renewal moved, it sleeps again. Handlers then need only
// check lost (an atomic load) before each call instead of reading the
// clock per record; the renewer also drops untrusted leases each round.
func (l *topicLease) watchTrust(ctx context.Context, t *Consumer) {
	tm := t.clk.NewTimer(l.trust.Left(t.clk.Now()))
	defer tm.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tm.C():
		}
		if l.lost.Load() {
			return
		}
		left := l.trust.Left(t.clk.Now())
		if left <= 0 {
			t.loseLease(l, lease.ErrUntrusted)
			return
		}
		tm.Reset(left)
	}
}

// lose marks the lease lost and stops its partition; only the first
// cause counts: lose reports whether it was the first.
func (l *topicLease) lose(cause error) bool {
	if !l.lost.CompareAndSwap(false, true) {
		return false
	}
	l.cause.Store(cause)
	if l.onLose != nil {
		l.onLose(cause)
	}
	return true
}

// lostTo is the first cause the lease was lost to, nil while it is not.
func (l *topicLease) lostTo() error {
	if err, ok := l.cause.Load().(error); ok {
		return err
	}
	return nil
}

// loseLease marks l lost to cause (errLeaseLost or errUntrusted) and
// counts it, once per lease whatever finds it first: a refused renewal,
// a refused fenced write of any lane, or the trust window.
func (t *Consumer) loseLease(l *topicLease, cause error) {
	if !l.lose(cause) {
		return
	}
	if errors.Is(cause, lease.ErrUntrusted) {
		t.c.untrusted.Add(1)
	} else {
		t.c.leaseLost.Add(1)
	}
}

// endLease reports the end of l, once per lease: lost or untrusted when
// it was lost (counted by loseLease), else released (with reason: why it
// was given up, or "expires" when the release call failed and the lease
// is left to its TTL). Every acquired lease ends exactly once, so that
// acquired - released - lost - untrusted is what the node holds or has
// acquired and not started yet.
func (t *Consumer) endLease(l *topicLease, reason string) {
	if !l.ended.CompareAndSwap(false, true) {
		return
	}
	switch cause := l.lostTo(); {
	case cause == nil:
		t.c.released.Add(1)
		t.leaseEvent(l.p, runtime.LeaseReleased, l.gen, reason)
	case errors.Is(cause, lease.ErrUntrusted):
		t.leaseEvent(l.p, runtime.LeaseUntrusted, l.gen, "")
	default:
		t.leaseEvent(l.p, runtime.LeaseLost, l.gen, "")
	}
}

// renewLoop renews every held lease once per RenewEvery, on its own
// goroutine so that no handler, drain or store call delays a renewal.
func (t *Consumer) renewLoop(ctx context.Context) {
	defer t.wg.Done()
	tm := t.clk.NewTimer(t.cfg.RenewEvery)
	defer tm.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tm.C():
		}
		if gate := t.renewGate; gate != nil {
			gate(ctx)
		}
		t.renewOnce(ctx)
		tm.Reset(t.cfg.RenewEvery)
	}
}

// renewOnce renews the held leases (those being handed off included: a
// drain must not lose its lease, and those acquired and not started yet)
// and drops those refused or past their trust window.
func (t *Consumer) renewOnce(ctx context.Context) {
	var leases []*topicLease
	for _, tp := range t.heldParts() {
		if !tp.lease.lost.Load() && !tp.released.Load() {
			leases = append(leases, tp.lease)
		}
	}
	// And those acquired but not started yet: a join that takes many
	// partitions would otherwise see its first leases pass their trust
	// window (and expire in the store) before it starts them.
	t.partsMu.RLock()
	for _, l := range t.acquired {
		if !l.lost.Load() {
			leases = append(leases, l)
		}
	}
	t.partsMu.RUnlock()
	if len(leases) == 0 {
		return
	}
	start := t.clk.Now()
	rctx, cancel := context.WithTimeout(ctx, t.cfg.RenewEvery)
	res, err := t.renewAll(rctx, leases)
	cancel()
	t.c.renewals.Add(1)
	if err != nil && ctx.Err() == nil {
		t.log.Warn("lease renewal failed", "leases", len(leases), "err", err)
		observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "renew", Err: err})
	}
	for i, l := range leases {
		switch res[i] {
		case lease.Renewed:
			l.extend(start, t.cfg.TrustWindow)
		case lease.Refused:
			t.loseLease(l, lease.ErrLost)
		}
	}
	// A lease whose renewals keep failing (the store unreachable, or this
	// goroutine stalled) is dropped when its trust window passes, before
	// the store can expire it and give it to another node.
	now := t.clk.Now()
	for _, l := range leases {
		if !l.lost.Load() && !l.trusted(now) {
			t.loseLease(l, lease.ErrUntrusted)
		}
	}
}

func (t *Consumer) renewAll(ctx context.Context, leases []*topicLease) ([]lease.Result, error) {
	fences := make([]broker.Fence, len(leases))
	for i, l := range leases {
		fences[i] = l.fence
	}
	br, _ := t.cfg.Leases.(broker.BatchRenewer)
	return lease.RenewAll(ctx, t.cfg.Leases, br, fences, t.cfg.LeaseTTL)
}

// leaseEvent reports a lease change of partition p.
func (t *Consumer) leaseEvent(p int32, kind runtime.LeaseEventKind, gen int64, reason string) {
	observe.Lease(t.obs, runtime.LeaseEvent{Subscription: t.name, Source: source.Kafka, Partition: strconv.Itoa(int(p)),
		Kind: kind, Generation: gen, Reason: reason})
}
