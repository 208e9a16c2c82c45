package runtime

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// Causes a partition worker's context is cancelled with when its lease
// can no longer be trusted. They never reach callers: the worker turns
// them into lease events.
var (
	errLeaseLost = errors.New("runtime: lease lost")
	errUntrusted = errors.New("runtime: lease not renewed within the trust window")
)

// heldLease is one lease a worker holds. The renewer and the worker share
// it: the renewer extends trustedUntil after each successful renewal and
// cancels the worker (lose) when a renewal is refused or the trust window
// passes; the worker checks trusted before every handler call and ack.
type heldLease struct {
	key   string
	fence broker.Fence
	gen   int64

	trust  trustDeadline
	lost   atomic.Bool
	cancel context.CancelCauseFunc
}

func (l *heldLease) trusted(now time.Time) bool { return !l.lost.Load() && l.trust.left(now) > 0 }

func (l *heldLease) extend(from time.Time, window time.Duration) { l.trust.extend(from, window) }

// trustDeadline is when a lease stops being trusted: the start of the
// last successful renewal (or of the acquire) plus the trust window.
// Measuring from the start of the call is the conservative side: the
// server may have applied the renewal at any moment of the round trip.
//
// It is elapsed time, never wall time: the deadline is kept as the
// nanoseconds from base, a reading of the clock at the acquire, and every
// comparison is a time.Time Sub, which uses the readings' monotonic clock
// (time.Now's carry one, as clock.Fake's do). A Unix time would follow the
// wall clock instead: a wall clock stepped back by more than TTL minus
// the trust window would keep the node calling handlers after the server
// expired the lease and another node took it.
type trustDeadline struct {
	base  time.Time    // set once (begin) before the lease is shared
	until atomic.Int64 // nanoseconds after base
}

// begin sets the deadline of a lease acquired by a call started at from.
// It is called once, before the lease is shared.
func (d *trustDeadline) begin(from time.Time, window time.Duration) {
	d.base = from
	d.until.Store(int64(window))
}

// extend moves the deadline to from+window, never back.
func (d *trustDeadline) extend(from time.Time, window time.Duration) {
	until := int64(from.Sub(d.base) + window)
	for {
		cur := d.until.Load()
		if until <= cur || d.until.CompareAndSwap(cur, until) {
			return
		}
	}
}

// left is the time until the deadline as of now (<= 0: passed).
func (d *trustDeadline) left(now time.Time) time.Duration {
	return time.Duration(d.until.Load()) - now.Sub(d.base)
}

// lose cancels the worker with cause; only the first cause counts.
func (l *heldLease) lose(cause error) {
	if l.lost.CompareAndSwap(false, true) {
		l.cancel(cause)
	}
}

// deadline is the trust deadline as a clock reading (monotonic, as base
// is).
func (d *trustDeadline) deadline() time.Time {
	return d.base.Add(time.Duration(d.until.Load()))
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
	if t.wake != nil && !t.wakeAt.IsZero() && l.trust.deadline().Before(t.wakeAt) {
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
func (t *leaseTable) held(sub string, categories []string) []HeldPartition {
	t.mu.Lock()
	out := make([]HeldPartition, 0, len(t.m))
	for _, l := range t.m {
		if l.lost.Load() {
			continue
		}
		for _, c := range categories {
			out = append(out, HeldPartition{Subscription: sub, Source: SourceRedis, Category: c, Partition: l.key, Generation: l.gen})
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
func (p *Partitioned) renewLoop(ctx context.Context) {
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
func (p *Partitioned) renewOnce(ctx context.Context) {
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
		p.obs.error(ErrorEvent{Subscription: p.cfg.Name, Op: "renew", Err: err})
	}
	for i, l := range leases {
		switch res[i] {
		case renewed:
			l.extend(start, p.cfg.TrustWindow)
		case refused:
			l.lose(errLeaseLost)
		}
	}
	// A lease whose renewals keep failing (Redis unreachable, or this
	// goroutine stalled) is dropped when its trust window passes, before
	// the server can expire it and hand it to another node.
	now := p.clk.Now()
	for _, l := range leases {
		if !l.lost.Load() && !l.trusted(now) {
			l.lose(errUntrusted)
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
func (p *Partitioned) trustLoop(ctx context.Context) {
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
			left := l.trust.left(now)
			if left <= 0 {
				l.lose(errUntrusted)
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

type renewResult int8

const (
	renewUnknown renewResult = iota // the call failed: nothing is known
	renewed
	refused // the lease no longer holds the token
)

// renewAll renews leases in one call when the broker batches, else one
// call per lease.
func (p *Partitioned) renewAll(ctx context.Context, leases []*heldLease) ([]renewResult, error) {
	res := make([]renewResult, len(leases))
	if p.batchRenewer != nil {
		fences := make([]broker.Fence, len(leases))
		for i, l := range leases {
			fences[i] = l.fence
		}
		oks, err := p.batchRenewer.RenewPartitionLeases(ctx, fences, p.cfg.LeaseTTL)
		if err != nil {
			return res, err
		}
		if len(oks) != len(leases) {
			return res, errors.New("runtime: batch renewal answered for the wrong number of leases")
		}
		for i, ok := range oks {
			res[i] = refused
			if ok {
				res[i] = renewed
			}
		}
		return res, nil
	}
	var firstErr error
	for i, l := range leases {
		ok, err := p.cfg.Broker.RenewPartitionLease(ctx, l.fence, p.cfg.LeaseTTL)
		switch {
		case err != nil:
			if firstErr == nil {
				firstErr = err
			}
		case ok:
			res[i] = renewed
		default:
			res[i] = refused
		}
	}
	return res, firstErr
}
