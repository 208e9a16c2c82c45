package partitioned

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/lease"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// heldLease is one lease a worker holds. The renewer and the worker share
// it: the renewer extends trustedUntil after each successful renewal and
// cancels the worker (lose) when a renewal is refused or the trust window
// passes; the worker checks trusted before every handler call and ack.
type heldLease struct {
	key   string
	fence broker.Fence
	gen   int64

	trust  lease.Deadline
	lost   atomic.Bool
	cancel context.CancelCauseFunc
}

func (l *heldLease) trusted(now time.Time) bool { return !l.lost.Load() && l.trust.Left(now) > 0 }

func (l *heldLease) extend(from time.Time, window time.Duration) { l.trust.Extend(from, window) }

// lose cancels the worker with cause; only the first cause counts.
func (l *heldLease) lose(cause error) {
	if l.lost.CompareAndSwap(false, true) {
		l.cancel(cause)
	}
}

// leaseTable is the set of leases a subscription holds, shared by the
// workers (add, remove), the renewer and the trust watch (snapshot) and
// Status.
type leaseTable struct {
	mu sync.Mutex
	m  map[string]*heldLease
	// wakeAt is when the trust watch (trustLoop) wakes next (zero: not
	// running); wake, buffered, wakes it earlier, for a lease added with
	// an earlier trust deadline.
	wakeAt time.Time
	wake   chan struct{}
}

func (t *leaseTable) add(l *heldLease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[string]*heldLease)
	}
	t.m[l.key] = l
	if t.wake != nil && !t.wakeAt.IsZero() && l.trust.Deadline().Before(t.wakeAt) {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

func (t *leaseTable) remove(l *heldLease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[l.key] == l {
		delete(t.m, l.key)
	}
}

func (t *leaseTable) snapshot() []*heldLease {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*heldLease, 0, len(t.m))
	for _, l := range t.m {
		out = append(out, l)
	}
	return out
}

// held returns the held partitions sorted by key, for status records.
func (t *leaseTable) held(sub string, categories []string) []runtime.HeldPartition {
	t.mu.Lock()
	out := make([]runtime.HeldPartition, 0, len(t.m))
	for _, l := range t.m {
		if l.lost.Load() {
			continue
		}
		for _, c := range categories {
			out = append(out, runtime.HeldPartition{Subscription: sub, Source: source.Redis, Category: c, Partition: l.key, Generation: l.gen})
		}
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Category < out[j].Category
	})
	return out
}

// renewLoop renews every held lease once per RenewEvery, in one batched
// call, until ctx ends. It runs on its own goroutine so that a slow
// handler never delays a renewal.
func (p *Subscription) renewLoop(ctx context.Context) {
	defer p.wg.Done()
	t := p.clk.NewTimer(p.cfg.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if gate := p.renewGate; gate != nil {
			gate(ctx)
		}
		p.renewOnce(ctx)
		t.Reset(p.cfg.RenewEvery)
	}
}

// renewOnce renews the held leases and drops those refused or past their
// trust window.
func (p *Subscription) renewOnce(ctx context.Context) {
	leases := p.leases.snapshot()
	if len(leases) == 0 {
		return
	}
	start := p.clk.Now()
	rctx, cancel := context.WithTimeout(ctx, p.cfg.RenewEvery)
	res, err := p.renewAll(rctx, leases)
	cancel()
	p.c.renewals.Add(1)
	if err != nil && ctx.Err() == nil {
		p.log.Warn("lease renewal failed", "subscription", p.cfg.Name, "leases", len(leases), "err", err)
		observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "renew", Err: err})
	}
	for i, l := range leases {
		switch res[i] {
		case lease.Renewed:
			l.extend(start, p.cfg.TrustWindow)
		case lease.Refused:
			l.lose(lease.ErrLost)
		}
	}
	// A lease whose renewals keep failing (Redis unreachable, or this
	// goroutine stalled) is dropped when its trust window passes, before
	// the server can expire it and hand it to another node.
	now := p.clk.Now()
	for _, l := range leases {
		if !l.lost.Load() && !l.trusted(now) {
			l.lose(lease.ErrUntrusted)
		}
	}
}

// trustLoop drops every held lease at its trust deadline, whatever the
// renewer is doing: a renewal stuck on a dead or blackholed connection
// returns only when the client gives up on it (its read timeout, and
// go-redis's retries), which can be later than the deadline, and a
// handler running then must not outlive the lease. Dropping cancels the
// worker's context, which is the handler's: the handler's context ends
// at the trust deadline, and the worker starts no call after it (it
// checks trusted before each). One goroutine watches every lease of the
// subscription: it sleeps until the earliest deadline, and when it wakes
// to deadlines renewals moved, it sleeps again; a lease added with an
// earlier deadline than its wake-up wakes it (leaseTable.add).
func (p *Subscription) trustLoop(ctx context.Context) {
	defer p.wg.Done()
	next := p.cfg.TrustWindow
	t := p.clk.NewTimer(next)
	defer t.Stop()
	p.leases.setWake(p.clk.Now().Add(next))
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-p.leases.wake:
			t.Stop()
		}
		now := p.clk.Now()
		next = p.cfg.TrustWindow
		for _, l := range p.leases.snapshot() {
			if l.lost.Load() {
				continue
			}
			left := l.trust.Left(now)
			if left <= 0 {
				l.lose(lease.ErrUntrusted)
				continue
			}
			next = min(next, left)
		}
		p.leases.setWake(now.Add(next))
		t.Reset(next)
	}
}

func (t *leaseTable) setWake(at time.Time) {
	t.mu.Lock()
	t.wakeAt = at
	t.mu.Unlock()
}

// renewAll renews leases in one call when the broker batches, else one
// call per lease.
func (p *Subscription) renewAll(ctx context.Context, leases []*heldLease) ([]lease.Result, error) {
	fences := make([]broker.Fence, len(leases))
	for i, l := range leases {
		fences[i] = l.fence
	}
	return lease.RenewAll(ctx, p.cfg.Broker, p.batchRenewer, fences, p.cfg.LeaseTTL)
}
