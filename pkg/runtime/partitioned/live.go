package partitioned

import (
	"context"
	"errors"

	"github.com/protctl/protctl/pkg/broker"
)

// The live path: when the broker can run many partitions' fenced steps in
// one round trip (broker.BatchReader and broker.BatchAcquirer), a worker
// acquires its lease and reads its partition without a worker slot, and
// the steps that workers need at the same time go to the broker together,
// a round trip for all of them (liveLoop). A worker takes a slot only to
// call the handler on what it read, and gives it back after a short batch,
// so Workers bounds the handler calls in flight, not the partitions being
// read: when a wait wakes a thousand partitions, their reads cost a few
// round trips instead of a thousand, queued sixteen at a time behind the
// slots. A partition that reads a full batch (a backlog) keeps its slot
// and reads on the slot's pinned reader until it drains, as before.
// docs/decisions/0035-live-reads.md.

// liveIO is the live path's queue of steps, served by liveFlushers loops.
type liveIO struct {
	reader   broker.BatchReader
	acquirer broker.BatchAcquirer
	releaser broker.BatchReleaser // nil: releases go one by one
	reads    chan *liveRead
	acqs     chan *liveAcquire
	rels     chan *liveRelease
}

const (
	// liveFlushers is how many round trips of the live path may be in
	// flight at once: a step that arrives while one is in flight goes out
	// at once on another, instead of waiting for it.
	liveFlushers = 2
	// liveMaxBatch bounds the steps of one round trip.
	liveMaxBatch = 256
	// liveBatch bounds the entries a read on the live path asks for:
	// the scripts convert each entry to Lua and back (about 1.5µs an
	// entry on the server), cheap for the few a flow leaves per
	// partition; a read that fills it is a backlog, which the worker
	// reads on with its slot's pinned reader in batches of BatchSize.
	liveBatch = 16
	// aheadPerWorker is how many partitions per worker slot may be on the
	// live path at once (reading, or holding what they read until a slot
	// is free): it bounds what the node reads ahead of its handlers to
	// aheadPerWorker x Workers batches.
	aheadPerWorker = 16
)

// liveStep is one step on the live path: its request, its answer, and
// done, which holds one token once res is set. A worker has at most one
// step in flight, and keeps its read for the next (worker.lr), so that a
// read costs no allocation of its own.
type liveStep[Req, Res any] struct {
	req  Req
	res  Res
	done chan struct{}
}

type (
	liveRead    = liveStep[broker.FencedRead, broker.ReadResult]
	liveAcquire = liveStep[broker.LeaseRequest, broker.LeaseGrant]
	liveRelease = liveStep[broker.LeaseRelease, broker.ReleaseResult]
)

func newLiveStep[Req, Res any](req Req) *liveStep[Req, Res] {
	return &liveStep[Req, Res]{req: req, done: make(chan struct{}, 1)}
}

// sendSteps runs steps in one call of send, which answers each request
// in order, and hands each step its answer.
func sendSteps[Req, Res any](steps []*liveStep[Req, Res], send func([]Req) []Res) {
	if len(steps) == 0 {
		return
	}
	reqs := make([]Req, len(steps))
	for i, st := range steps {
		reqs[i] = st.req
	}
	for i, res := range send(reqs) {
		steps[i].res = res
		steps[i].done <- struct{}{}
	}
}

// runStep queues st on q and waits for its answer. false: the worker's
// context ended before st was queued, and nothing was sent. Once queued
// a step is always answered (liveLoop): a step once sent must be known
// to have run or not before the worker goes on.
func runStep[Req, Res any](w *worker, q chan<- *liveStep[Req, Res], st *liveStep[Req, Res]) bool {
	select {
	case q <- st:
	case <-w.ctx.Done():
		return false
	}
	<-st.done
	return true
}

// newLiveIO returns the live path of b, nil when b cannot batch.
func newLiveIO(b broker.PartitionedBroker) *liveIO {
	r, rok := b.(broker.BatchReader)
	a, aok := b.(broker.BatchAcquirer)
	if !rok || !aok {
		return nil
	}
	rl, _ := b.(broker.BatchReleaser)
	return &liveIO{
		reader:   r,
		acquirer: a,
		releaser: rl,
		reads:    make(chan *liveRead, liveMaxBatch),
		acqs:     make(chan *liveAcquire, liveMaxBatch),
		rels:     make(chan *liveRelease, liveMaxBatch),
	}
}

// liveLoop sends the queued steps of the live path, as many as are queued
// (up to liveMaxBatch) in one round trip per kind, until ctx ends. It
// runs until the coordinator is done (bgCtx), after every worker
// returned, so that a step once queued is always answered; the steps
// themselves run under runCtx, which a hard stop cancels.
func (p *Subscription) liveLoop(ctx context.Context) {
	defer p.wg.Done()
	io := p.live
	for {
		var (
			reads []*liveRead
			acqs  []*liveAcquire
			rels  []*liveRelease
		)
		select {
		case <-ctx.Done():
			return
		case r := <-io.reads:
			reads = append(reads, r)
		case a := <-io.acqs:
			acqs = append(acqs, a)
		case r := <-io.rels:
			rels = append(rels, r)
		}
	more:
		for len(reads)+len(acqs)+len(rels) < liveMaxBatch {
			select {
			case r := <-io.reads:
				reads = append(reads, r)
			case a := <-io.acqs:
				acqs = append(acqs, a)
			case r := <-io.rels:
				rels = append(rels, r)
			default:
				break more
			}
		}
		sendSteps(rels, func(reqs []broker.LeaseRelease) []broker.ReleaseResult {
			return io.releaser.ReleasePartitionLeasesConsumers(p.runCtx, reqs)
		})
		sendSteps(acqs, func(reqs []broker.LeaseRequest) []broker.LeaseGrant {
			return io.acquirer.AcquirePartitionLeases(p.runCtx, reqs)
		})
		sendSteps(reads, func(reqs []broker.FencedRead) []broker.ReadResult {
			return io.reader.AckAndReadPartitionsFenced(p.runCtx, reqs)
		})
	}
}

// liveRead runs one fenced ack-and-read on the live path. A read the
// worker's context ended before it was queued was not sent.
func (w *worker) liveRead(r broker.FencedRead) broker.ReadResult {
	if w.lr == nil {
		w.lr = newLiveStep[broker.FencedRead, broker.ReadResult](broker.FencedRead{})
	}
	lr := w.lr
	lr.req, lr.res = r, broker.ReadResult{}
	if !runStep(w, w.p.live.reads, lr) {
		lr.req = broker.FencedRead{}
		return broker.ReadResult{Err: context.Cause(w.ctx)}
	}
	res := lr.res
	lr.req, lr.res = broker.FencedRead{}, broker.ReadResult{} // nothing kept alive
	return res
}

// liveAcquire takes the worker's lease on the live path, with the lanes'
// tails (kept in w.preTails) and, when the worker can tell the generation
// at which nothing older than new entries can be pending (the one after
// the generation this node last released clean), the first read of its
// main lanes in the same step (kept in w.prefetch).
func (w *worker) liveAcquire(leaseKey string) (broker.Lease, bool, error) {
	p := w.p
	req := broker.LeaseRequest{
		LeaseKey:      leaseKey,
		GenerationKey: p.layout.GenerationKey(p.cfg.Name, w.key),
		Owner:         p.node,
		TTL:           p.cfg.LeaseTTL,
	}
	if p.tailer != nil && p.waiter != nil {
		req.Tails = w.streams()
	}
	if w.index != "" {
		req.Index, req.Member = p.layout.IndexKey(w.index), w.key
	}
	if !w.checkLedger && !w.pausedNow() {
		req.ReadAtGeneration = w.cleanGen + 1
		req.Group, req.Count = p.cfg.Name, int64(w.readCount())
		for _, ln := range w.lanes {
			if !ln.backfill {
				req.Read = append(req.Read, ln.stream)
			}
		}
	}
	la := newLiveStep[broker.LeaseRequest, broker.LeaseGrant](req)
	if !runStep(w, p.live.acqs, la) {
		return broker.Lease{}, false, context.Cause(w.ctx)
	}
	g := la.res
	if g.NotIndexed {
		return broker.Lease{}, false, errNotIndexed
	}
	if req.Index != "" && (g.Acquired || g.Err == nil) {
		w.indexed = true // checked before anything else: held or taken, it is a partition
	}
	if !g.Acquired {
		return broker.Lease{}, false, g.Err
	}
	if g.Err != nil {
		// The lease is ours whatever else failed: go on without the
		// tails and the read, which the worker takes again. The script
		// may have read (delivered) entries under this generation that
		// the reply lost: the generation is not a fresh one, so that
		// the worker reads its pending entries first (checkLedger
		// turns off the fresh-generation shortcut).
		p.log.Debug("lease acquired without its tails", "subscription", p.cfg.Name, "key", w.key, "err", g.Err)
		w.checkLedger = true
		return g.Lease, true, nil
	}
	if req.Tails != nil {
		w.preTails = g.Tails
	}
	if g.Read != nil {
		w.prefetch = make(map[string]broker.ReadResult, len(g.Read))
		for i, s := range req.Read {
			w.prefetch[s] = g.Read[i]
		}
	}
	return g.Lease, true, nil
}

// errNotIndexed is liveAcquire's answer for a candidate key its
// acquisition found in no index.
var errNotIndexed = errors.New("runtime: the key is in no partition index")

// liveRelease gives the worker's lease back on the live path
// (releaseLease), deleting the group's consumers that hold nothing on
// its lanes in the same step. Always answered once queued (liveLoop).
func (w *worker) liveRelease() (bool, error) {
	p := w.p
	lr := newLiveStep[broker.LeaseRelease, broker.ReleaseResult](broker.LeaseRelease{Fence: w.lease.fence, Group: p.cfg.Name, Streams: w.streams()})
	if !runStep(w, p.live.rels, lr) {
		return false, context.Cause(w.ctx)
	}
	return lr.res.Released, lr.res.Err
}

// takeAhead takes a place on the live path (see aheadPerWorker). stop
// means the worker must end instead (its lease, if any, released).
func (w *worker) takeAhead() (result, bool) {
	if w.ahead {
		return result{}, false
	}
	if r, stop := w.take(w.p.ahead); stop {
		return r, true
	}
	w.ahead = true
	return result{}, false
}

func (w *worker) releaseAhead() {
	if w.ahead {
		w.ahead = false
		<-w.p.ahead
	}
}
