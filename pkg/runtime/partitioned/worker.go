package partitioned

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/lease"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// resultKind is how a worker ended.
type resultKind int

const (
	resIdle      resultKind = iota // drained for IdleAfter; lease released
	resHandedOff                   // HRW gave the key away; lease released
	resStopped                     // the subscription stops; lease released
	resContested                   // the lease was held by someone else
	resLost                        // the lease was lost or not renewed in time
	resParked                      // the head was parked; lease released
	resError                       // a transient I/O failure; lease released
	resFatal                       // a fatal handler error; lease released
	// resNotIndexed: the key was a candidate (evCandidates) and its
	// acquisition found it in no index; nothing was written.
	resNotIndexed
)

// result is what a worker reports to the coordinator.
type result struct {
	kind   resultKind
	gen    int64
	after  map[string]string // per lane, the newest id known delivered
	parked *ledger.Parked
	// resolved says the worker resolved the key's parked entry.
	resolved bool
	// indexed says the worker's acquisition found its candidate key in
	// the index (evCandidates): the key is a partition.
	indexed bool
	err     error
}

// worker processes one partition key under one lease generation, from
// acquire to release. It runs on its own goroutine; the coordinator talks
// to it only through poke and handOver.
type worker struct {
	p     *Subscription
	key   string
	lanes []lane

	// after is per lane the newest id known delivered to the group
	// (missing: unknown), inherited from the previous generation.
	after       map[string]string
	cleanGen    int64
	checkLedger bool
	// index is the category whose index the acquisition checks the key
	// against (a candidate, evCandidates), "" for a known partition;
	// indexed says the check found it there.
	index   string
	indexed bool

	wake       chan struct{}
	fromWaiter atomic.Bool // the last wake came from the EntryWaiter
	// news is which lanes the wakes not yet taken are about (laneNews
	// bits): set before the wake is sent, taken (takeNews) after it is
	// received, so that a received wake never misses its lanes.
	news     atomic.Uint32
	handover chan struct{}
	handOnce sync.Once

	ctx    context.Context
	cancel context.CancelCauseFunc
	lease  *heldLease
	// hctx is ctx with the lease's check (LeaseTrusted), for the handler.
	hctx   context.Context
	slot   bool
	grown  bool      // growStack ran on the worker's goroutine
	slotAt time.Time // when the worker took its slot
	// slotRounds counts the rounds that found entries since then.
	slotRounds int
	rd         *slotReader // the slot's pinned reader, while slot (nil: none)
	// ahead: the worker holds a place on the live path (p.ahead).
	ahead bool
	lr    *liveRead // the live path's read, kept for the next (liveRead)
	// preTails are the lanes' tails taken with the lease (acquire), for
	// tails; nil when they were not.
	preTails map[string]string
	// prefetch is the first read of the main lanes, taken with the lease
	// on the live path (liveAcquire); the generation's first round reads
	// it instead of the lanes.
	prefetch map[string]broker.ReadResult

	// acks is per stream the ids handled and not yet acked. A stream's
	// slice is kept, emptied, once acked (the broker keeps no reference
	// past the call): each batch appending to a new one was a third of
	// handleBatch's time at 44,000 events/s (BenchmarkSustainableRateRedis).
	acks      map[string][]string
	readSince bool // a message was read since the last wake
	full      bool // the last read returned all it asked for
	readLive  bool // the last read was on the live path
	// empty marks lanes that had no entry when the generation began (their
	// tail was 0-0): rounds skip them until a wake-up says otherwise, so
	// an unused lane (most backfill lanes) costs no read.
	empty map[string]bool
	// drainedPending marks lanes whose pending list this generation has
	// seen empty: their reads skip the pending check (XREADGROUP 0) and
	// ask for new entries only. It holds because every entry read is
	// acked (or the worker ends) before the next read of its lane.
	drainedPending map[string]bool
	// covered is the announcements' state (announcedCover) under which
	// every append to the partition's lanes past w.after wakes the worker,
	// taken before the generation's first look at its lanes or before the
	// worker last joined the watched set; nil when none is known. While
	// the state stays the same, a drained worker waits without joining the
	// watched set (drained).
	covered <-chan struct{}
	// drains counts the times this generation drained with its lanes'
	// ids known: from the second on, news came while it held the lease,
	// and it may wait with a blocking read (waitBlocked).
	drains int
	// waited: the prefetch holds a short batch a blocking wait's reads
	// delivered (waitBlocked); readsSent: a read of this round went to
	// the broker (not served from the prefetch).
	waited, readsSent bool
	// watching: the worker put its partition in the watched set since it
	// last took it out; joinedAt is when it last did (or when the
	// generation began).
	watching bool
	joinedAt time.Time
	// backingOff mirrors this key's entry in p.backingOff, so that the
	// shared, locked set is touched only when the state changes, not on
	// every message handled.
	backingOff bool
	retrying   *ledger.Parked // an operator's retry being carried out
	skipping   *ledger.Parked // an operator's skip being carried out
	resolved   bool
}

func newWorker(p *Subscription, pt *part) *worker {
	ctx, cancel := context.WithCancelCause(p.runCtx)
	w := &worker{
		p:           p,
		key:         pt.key,
		lanes:       p.lanesOf(pt.key),
		after:       make(map[string]string),
		cleanGen:    pt.cleanGen,
		checkLedger: pt.checkLedger || pt.parked != nil,
		index:       pt.candidate,
		wake:        make(chan struct{}, 1),
		handover:    make(chan struct{}),
		ctx:         ctx,
		cancel:      cancel,
		acks:        make(map[string][]string),
		empty:       make(map[string]bool),

		drainedPending: make(map[string]bool),
	}
	maps.Copy(w.after, pt.after)
	return w
}

// laneNews says which of a partition's lanes a wake-up is about.
type laneNews uint32

const (
	newsMain     laneNews = 1 << iota // its main lanes (their watch fired)
	newsBackfill                      // its backfill lanes (their watch fired)
	// newsAll: any lane (a publish signal, an announcement, a resume).
	newsAll = newsMain | newsBackfill
)

// poke tells the worker that its partition may have news on the lanes
// news names.
func (w *worker) poke(fromWaiter bool, news laneNews) {
	if fromWaiter {
		w.fromWaiter.Store(true)
	}
	w.news.Or(uint32(news))
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// takeNews takes the news of the wakes received so far, and the lanes of
// also: the lanes they name are read again even if they were empty
// (w.empty). A wake for the main lanes leaves empty backfill lanes
// skipped: their own watch wakes the worker for them (watchLanes).
// Clearing every mark at every wake read each idle backfill lane once per
// entry of the main lane, a third of the live path's reads
// (BenchmarkSustainableRateRedis).
func (w *worker) takeNews(also laneNews) {
	news := laneNews(w.news.Swap(0)) | also
	if news == newsAll {
		clear(w.empty)
		return
	}
	for _, ln := range w.lanes {
		if (ln.backfill && news&newsBackfill != 0) || (!ln.backfill && news&newsMain != 0) {
			delete(w.empty, ln.stream)
		}
	}
}

// handOver asks the worker to finish its in-flight message, ack and
// release the lease.
func (w *worker) handOver() { w.handOnce.Do(func() { close(w.handover) }) }

func (w *worker) run() (res result) {
	p := w.p
	defer func() { res.indexed = w.indexed }()
	defer w.cancel(nil)
	defer w.releaseAhead()
	defer w.releaseSlot()
	if r, stop := w.awaitPauses(); stop {
		return r
	}
	if p.live != nil {
		// The live path: no slot until there is something to handle.
		if r, stop := w.takeAhead(); stop {
			return r
		}
	} else if r, stop := w.takeSlot(); stop {
		return r
	}
	start := p.clk.Now()
	// Before the lease and the lanes' tails: an append after this point
	// is announced, one before it is in the tails.
	w.covered, w.joinedAt = p.announcedCover(), start
	leaseKey := p.layout.LeaseKey(p.cfg.Name, w.key)
	lease, ok, err := w.acquire(leaseKey)
	if errors.Is(err, errNotIndexed) {
		return result{kind: resNotIndexed}
	}
	if err != nil {
		if w.ctx.Err() != nil {
			return result{kind: resStopped}
		}
		p.log.Warn("acquiring a lease failed", "subscription", p.cfg.Name, "key", w.key, "err", err)
		observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "acquire", Err: err})
		return result{kind: resError, err: err}
	}
	if !ok {
		p.c.contested.Add(1)
		observe.Lease(p.obs, runtime.LeaseEvent{Subscription: p.cfg.Name, Source: source.Redis, Partition: w.key, Kind: runtime.LeaseContested})
		return result{kind: resContested}
	}
	w.lease = &heldLease{key: w.key, fence: lease.Fence, gen: lease.Generation, cancel: w.cancel}
	w.lease.trust.Begin(start, p.cfg.TrustWindow)
	held := w.lease
	w.hctx = runtime.WithLeaseCheck(w.ctx, func() bool { return held.trusted(p.clk.Now()) })
	p.leases.add(w.lease)
	defer p.leases.remove(w.lease)
	p.c.acquired.Add(1)
	observe.Lease(p.obs, runtime.LeaseEvent{Subscription: p.cfg.Name, Source: source.Redis, Partition: w.key, Kind: runtime.LeaseAcquired, Generation: lease.Generation})
	p.log.Debug("lease acquired", "subscription", p.cfg.Name, "key", w.key, "generation", lease.Generation)

	res = w.process()
	res.gen = lease.Generation
	res.resolved = res.resolved || w.resolved
	if res.after == nil {
		res.after = maps.Clone(w.after)
	}
	p.backingOff.set(w.key, false)
	return res
}

// process runs the partition from a fresh lease to its end.
func (w *worker) process() result {
	p := w.p
	// The first generation ever, or the one right after a generation this
	// node released clean, proves that nobody else held the key: nothing
	// can be pending for earlier generations and nobody can have parked
	// it (parking is fenced).
	if r, done := w.holdWhilePaused(); done {
		return r
	}
	fresh := !w.checkLedger && (w.lease.gen == 1 || (w.cleanGen > 0 && w.lease.gen == w.cleanGen+1))
	if p.tailer != nil && p.waiter != nil {
		if r, done := w.tails(); done {
			return r
		}
	}
	if fresh {
		for _, ln := range w.lanes {
			w.drainedPending[ln.stream] = true
		}
	} else {
		// What a generation that may inherit pending entries or a parked
		// head does first runs with a slot, as everything did before the
		// live path (the live acquisition read nothing: only a fresh
		// generation reads with the lease).
		w.prefetch = nil
		if r, stop := w.takeSlot(); stop {
			return r
		}
		if r, done := w.checkParked(); done {
			return r
		}
		if r, done := w.reclaim(); done {
			return r
		}
	}
	if w.retrying != nil {
		err := p.cfg.Ledger.SetStatus(w.ctx, w.lease.fence, p.cfg.Name, w.key, ledger.StatusRetrying)
		switch {
		case errors.Is(err, ledger.ErrNotParked):
			w.retrying = nil
		case err != nil:
			return w.ioFail("set parked status", err)
		default:
			p.log.Info("retrying parked partition", "subscription", p.cfg.Name, "key", w.key, "position", w.retrying.Position)
		}
	}
	if w.skipping != nil {
		if r, done := w.skip(); done {
			return r
		}
	}
	for {
		if r, stop := w.interrupted(); stop {
			return r
		}
		if r, done := w.seekIfAsked(); done {
			return r
		}
		if r, done := w.holdWhilePaused(); done {
			return r
		}
		waited := w.waited
		if !waited {
			select { // a wake for what the next round reads anyway
			case <-w.wake:
				w.takeNews(0)
			default:
			}
		}
		// After a blocking wait's batch, a wake is left for the wait that
		// follows it (drained): the round reads only that batch, and a
		// wake taken here, for an entry appended after the wait's reads,
		// would be lost to a wait that is not a blocking read.
		w.waited, w.readsSent = false, false
		got, r, done := w.round()
		w.prefetch = nil // the first round's, used or not
		if done {
			return r
		}
		if got && waited && !w.readsSent {
			// All the round read came from a blocking wait, short: the
			// next wait, from the ids just handled, checks the lanes
			// (waitBlocked), with no read of its own first.
			if r, done := w.drained(); done {
				return r
			}
			continue
		}
		if got {
			w.slotRounds++
			if w.slot && w.slotRounds > 1 && p.slotWaiters.Load() > 0 && p.clk.Now().Sub(w.slotAt) >= slotQuantum {
				if r, done := w.yieldSlot(); done {
					return r
				}
			}
			continue
		}
		if r, done := w.drained(); done {
			return r
		}
	}
}

// tails takes every lane's newest id before anything is read. Every read
// of this generation comes after it, so once a lane reads empty, all its
// entries up to the tail are known delivered: the tail (or a newer id
// read since) is where the node waits from when the partition goes idle,
// with no extra call. A lane whose tail is 0-0 has no entry at all and is
// not read until a wake-up.
func (w *worker) tails() (result, bool) {
	tails := w.preTails
	w.preTails = nil
	if tails == nil {
		var err error
		tails, err = w.tailer().LastEntryIDs(w.ctx, w.streams())
		if err != nil {
			return w.ioFail("last entry ids", err), true
		}
	}
	for _, ln := range w.lanes {
		id := tails[ln.stream]
		if id == "" || id == "0-0" {
			id = "0-0"
			w.empty[ln.stream] = true
		}
		if newer(id, w.after[ln.stream]) {
			w.after[ln.stream] = id
		}
	}
	// The ids are exact now: a wake that found nothing needs no re-tail.
	w.fromWaiter.Store(false)
	return result{}, false
}

// reclaim moves the earlier generations' pending entries of every lane to
// this generation's consumer, so that they are handled first and in order.
func (w *worker) reclaim() (result, bool) {
	p := w.p
	for _, ln := range w.lanes {
		res, err := p.cfg.Broker.ReclaimPartitionPending(w.ctx, w.lease.fence, ln.stream, p.cfg.Name, 0, int64(p.cfg.BatchSize))
		if err != nil {
			return w.ioFail("reclaim", err), true
		}
		for _, id := range res.Missing {
			// XAUTOCLAIM already dropped it from the pending list:
			// nothing to ack, but it must not vanish unnoticed.
			w.reportMissing(ln, id, "reclaim")
		}
	}
	return result{}, false
}

func (w *worker) reportMissing(ln lane, id, during string) {
	p := w.p
	p.c.missing.Add(1)
	p.log.Warn("pending entry without a body: acknowledged", "subscription", p.cfg.Name, "key", w.key,
		"stream", ln.stream, "id", id, "during", during)
	observe.Missing(p.obs, runtime.MissingEvent{Subscription: p.cfg.Name, Partition: w.key, Stream: ln.stream, ID: id, During: during})
}

// round reads each main lane once and handles what it got; only when
// every main lane is empty does it read the backfill lanes. got says
// something was read.
func (w *worker) round() (got bool, r result, done bool) {
	for _, backfill := range []bool{false, true} {
		progressed := false
		for _, ln := range w.lanes {
			if ln.backfill != backfill || w.empty[ln.stream] {
				continue
			}
			msgs, r, done := w.read(ln)
			if done {
				return progressed, r, true
			}
			if len(msgs) == 0 {
				continue
			}
			progressed = true
			if r, done := w.handleBatch(ln, msgs); done {
				return true, r, true
			}
		}
		if progressed {
			return true, result{}, false
		}
	}
	return false, result{}, false
}

// read is one fenced read of a lane: this generation's pending entries
// first, new entries when none is pending.
func (w *worker) read(ln lane) ([]broker.Message, result, bool) {
	p := w.p
	if !w.lease.trusted(p.clk.Now()) {
		w.lease.lose(lease.ErrUntrusted)
		return nil, w.lostResult(), true
	}
	// Pending entries first (a new generation's reclaimed ones), read
	// with ReadPending until a batch comes back short, then ReadNew.
	// ReadPendingThenNew would do both in one call, but the Redis adapter
	// serves it as a script, and ReadPending and ReadNew as a fenced
	// transaction: one round trip more, no Lua conversion of the entries
	// nor of the acks, cheaper even for a lane's last, empty read
	// (docs/decisions/0023-fenced-read-transactions.md).
	var (
		msgs []broker.Message
		err  error
		mode = broker.ReadPending
	)
	if w.drainedPending[ln.stream] {
		mode = broker.ReadNew
	}
	count := w.readCount()
	msgs, err = w.fencedRead(ln, mode, count)
	if err != nil {
		return nil, w.ioFail("read", err), true
	}
	p.c.reads.Add(1)
	if mode == broker.ReadPending && len(msgs) < count {
		// Short of a full batch: no pending entry is left once these are
		// handled and acked.
		w.drainedPending[ln.stream] = true
		if len(msgs) == 0 {
			// Nothing pending: read new entries at once, as
			// ReadPendingThenNew would have in the same call (the acks,
			// if any, went with the pending read).
			msgs, err = w.fencedRead(ln, broker.ReadNew, count)
			if err != nil {
				return nil, w.ioFail("read", err), true
			}
			p.c.reads.Add(1)
		}
	}
	w.full = len(msgs) == count
	if len(msgs) > 0 {
		w.readSince = true
		last := msgs[len(msgs)-1].ID
		if newer(last, w.after[ln.stream]) {
			w.after[ln.stream] = last
		}
	}
	return msgs, result{}, false
}

// readCount is how many entries the worker's next read asks for: a
// batch, or on the live path (no slot) at most liveBatch.
func (w *worker) readCount() int {
	if w.p.live != nil && !w.slot {
		return min(w.p.cfg.BatchSize, liveBatch)
	}
	return w.p.cfg.BatchSize
}

// fencedRead is one fenced read of up to count entries of ln in mode, on
// the live path when the worker has no slot, on the slot's pinned reader
// when there is one. The last batch's ack rides on it when the broker can
// (one round trip per batch, under one lease check).
func (w *worker) fencedRead(ln lane, mode broker.ReadMode, count int) ([]broker.Message, error) {
	p := w.p
	w.readLive = p.live != nil && !w.slot
	if pre, ok := w.prefetch[ln.stream]; ok {
		delete(w.prefetch, ln.stream)
		return pre.Messages, pre.Err
	}
	w.readsSent = true
	ack := w.acks[ln.stream]
	if w.readLive {
		res := w.liveRead(broker.FencedRead{Fence: w.lease.fence, Stream: ln.stream, Group: p.cfg.Name,
			Ack: ack, Count: int64(count), Mode: mode})
		if res.Err == nil && len(ack) > 0 {
			p.c.acks.Add(1)
			w.acks[ln.stream] = ack[:0] // kept for the next batch's ids
		}
		return res.Messages, res.Err
	}
	if !w.grown {
		// Once per worker, and only for a worker that reads on its own
		// goroutine (a backlog, or a broker without the live path): on
		// the live path the flushers do the I/O, and a stack grown for
		// nothing was copied back down by the garbage collector
		// (runtime.copystack and growStack were a fifth of the runtime's
		// CPU with 5,000 new keys a second, BenchmarkLatencyRedis).
		w.grown = true
		growStack()
	}
	var ar broker.AckReader
	switch {
	case w.rd != nil:
		ar = w.rd.reader
	case len(ack) > 0:
		ar = p.ackReader
	}
	if ar == nil {
		return p.cfg.Broker.ReadPartitionFenced(w.ctx, w.lease.fence, ln.stream, p.cfg.Name, int64(count), mode)
	}
	msgs, err := ar.AckAndReadPartitionFenced(w.ctx, w.lease.fence, ln.stream, p.cfg.Name, ack, int64(count), mode)
	if err == nil && len(ack) > 0 {
		p.c.acks.Add(1)
		w.acks[ln.stream] = ack[:0]
	}
	return msgs, err
}

// newer reports whether stream id a sorts after b ("" sorts first).
func newer(a, b string) bool {
	if b == "" {
		return true
	}
	ia, err1 := broker.ParseStreamID(a)
	ib, err2 := broker.ParseStreamID(b)
	if err1 != nil || err2 != nil {
		return false
	}
	return ib.Less(ia)
}

// sleepTrusted sleeps d unless the worker's context ends; false then.
func (w *worker) sleepTrusted(d time.Duration) bool {
	t := w.p.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-w.ctx.Done():
		return false
	}
}

// releaseAcked acks what the worker handled (flushAcks), then gives the
// lease back: a handover or a stop must not leave an entry handled and
// unacked for the next owner to handle again. stop is always true.
func (w *worker) releaseAcked(res result, reason string) (_ result, stop bool) {
	if r, done := w.flushAcks(); done {
		return r, true
	}
	return w.release(res, reason), true
}

// interrupted reports whether the worker must stop between two messages:
// it then releases its lease.
func (w *worker) interrupted() (result, bool) {
	select {
	case <-w.ctx.Done():
		return w.ctxResult(), true
	default:
	}
	select {
	case <-w.handover:
		return w.releaseAcked(result{kind: resHandedOff}, "handover")
	case <-w.p.stopping:
		return w.releaseAcked(result{kind: resStopped}, "stop")
	default:
		return result{}, false
	}
}

// release gives the lease back (fenced) and returns res. Without a lease
// it only returns res.
func (w *worker) release(res result, reason string) result {
	p := w.p
	if w.lease == nil || w.lease.lost.Load() {
		return res
	}
	ctx := w.ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), p.cfg.RenewEvery)
		defer cancel()
	}
	ok, err := w.releaseLease(ctx)
	w.lease.lost.Store(true) // no longer ours either way: the renewer skips it
	switch {
	case err != nil:
		// The lease expires on its own within its TTL; it is no longer
		// this node's all the same, and reported so (one end per lease:
		// acquired - released - lost - untrusted stays what is held).
		p.log.Warn("releasing a lease failed", "subscription", p.cfg.Name, "key", w.key, "err", err)
		observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "release", Err: err})
		p.c.released.Add(1)
		observe.Lease(p.obs, runtime.LeaseEvent{Subscription: p.cfg.Name, Source: source.Redis, Partition: w.key, Kind: runtime.LeaseReleased, Generation: w.lease.gen, Reason: "expires"})
	case ok:
		p.c.released.Add(1)
		observe.Lease(p.obs, runtime.LeaseEvent{Subscription: p.cfg.Name, Source: source.Redis, Partition: w.key, Kind: runtime.LeaseReleased, Generation: w.lease.gen, Reason: reason})
	default:
		p.c.leaseLost.Add(1)
		observe.Lease(p.obs, runtime.LeaseEvent{Subscription: p.cfg.Name, Source: source.Redis, Partition: w.key, Kind: runtime.LeaseLost, Generation: w.lease.gen, Reason: "release refused"})
		if res.kind == resIdle {
			res.kind = resLost
		}
	}
	if res.kind == resIdle && res.after == nil {
		res.after = maps.Clone(w.after)
	}
	return res
}

// ioFail turns an error of a fenced or ledger call into the worker's end:
// a lost lease, a stop, or a transient failure (lease released, retried
// later by the coordinator).
func (w *worker) ioFail(op string, err error) result {
	p := w.p
	if errors.Is(err, broker.ErrLeaseLost) {
		w.lease.lose(lease.ErrLost)
		return w.lostResult()
	}
	if w.ctx.Err() != nil {
		return w.ctxResult()
	}
	p.log.Warn("partition I/O failed; retrying later", "subscription", p.cfg.Name, "key", w.key, "op", op, "err", err)
	observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: op, Err: err})
	return w.release(result{kind: resError, err: err}, "error")
}

// ctxResult is the worker's end after its context was cancelled: the
// lease was lost or not renewed in time, or the subscription stops hard.
func (w *worker) ctxResult() result {
	switch context.Cause(w.ctx) {
	case lease.ErrLost, lease.ErrUntrusted:
		return w.lostResult()
	}
	return w.release(result{kind: resStopped}, "stop")
}

// lostResult reports a lost lease. The partition stops at once: nothing
// more is handled or acked under it.
func (w *worker) lostResult() result {
	p := w.p
	cause := context.Cause(w.ctx)
	kind, c := runtime.LeaseLost, &p.c.leaseLost
	if errors.Is(cause, lease.ErrUntrusted) {
		kind, c = runtime.LeaseUntrusted, &p.c.untrusted
	}
	c.Add(1)
	p.log.Warn("lease lost: partition dropped", "subscription", p.cfg.Name, "key", w.key,
		"generation", w.lease.gen, "cause", strings.TrimPrefix(fmt.Sprint(cause), "runtime: "))
	observe.Lease(p.obs, runtime.LeaseEvent{Subscription: p.cfg.Name, Source: source.Redis, Partition: w.key, Kind: kind, Generation: w.lease.gen})
	if kind == runtime.LeaseUntrusted {
		// The lease may still be ours (only renewals failed): give it
		// back if the server answers, so that the next owner need not
		// wait for the TTL.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), p.cfg.RenewEvery)
		defer cancel()
		_, _ = w.releaseLease(ctx)
	}
	return result{kind: resLost}
}

// growStack grows the calling goroutine's stack to 32 KiB at once, while
// it is shallow. A worker is a new goroutine (2 KiB of stack) per
// activated partition, and its I/O runs deep (go-redis's pipelines and
// hooks, the recursive raw reply reader): grown on demand, its stack is
// copied three or four times per partition, each copy walking every frame
// (runtime.newstack was about 10% of the workers' CPU in
// BenchmarkRuntimeThroughput). Grown here, in one step with two frames to
// move, the copy is cheap; a stack the goroutine no longer needs is
// shrunk by the garbage collector as any other. fencedRead calls it
// before a worker's first read on its own goroutine.
//
//go:noinline
func growStack() {
	var frame [16 << 10]byte
	stackSink(frame[:])
}

//go:noinline
func stackSink(b []byte) { b[0] = 0 }
