package partitioned

import (
	"context"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// leaseAcquirer is what a pinned reader may offer besides reads.
type leaseAcquirer interface {
	AcquirePartitionLease(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration) (broker.Lease, bool, error)
}

// acquireTailer is what a pinned reader may offer besides reads: the
// acquisition and the lanes' tails in one round trip. The tails are taken
// after the lease, before anything its owner reads, as worker.tails
// takes them; nil tails (with acquired true) when they could not be read.
type acquireTailer interface {
	AcquirePartitionLeaseAndTails(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration, streams []string) (lease broker.Lease, acquired bool, tails map[string]string, err error)
}

// slotReader is a pinned reader kept with a worker slot.
type slotReader struct {
	reader broker.AckReader
	acq    leaseAcquirer       // nil when the reader does not acquire
	acqt   acquireTailer       // nil when it does not acquire and tail at once
	tails  broker.StreamTailer // nil when the reader does not tail
	close  func(context.Context) error
}

// takeReader returns a free pinned reader, or a new one; nil when the
// broker cannot pin. The caller holds a worker slot, so at most Workers
// readers exist.
func (p *Subscription) takeReader() *slotReader {
	if p.pinner == nil {
		return nil
	}
	select {
	case r := <-p.readers:
		return r
	default:
	}
	ar, closeFn := p.pinner.PinnedReader()
	r := &slotReader{reader: ar, close: closeFn}
	r.acq, _ = ar.(leaseAcquirer)
	r.acqt, _ = ar.(acquireTailer)
	r.tails, _ = ar.(broker.StreamTailer)
	return r
}

// putReader keeps r, with its connection, for the next worker to take a
// slot. Closing it here would give the connection back to the pool
// between partitions, at the cost of a round trip (UNWATCH) per slot
// handover: measured, about a tenth of the runtime's throughput
// (docs/decisions/0023-fenced-read-transactions.md). The broker bounds what
// readers pin per client and checks a connection that idled before using
// it again.
func (p *Subscription) putReader(r *slotReader) {
	if r == nil {
		return
	}
	select {
	case p.readers <- r:
	default: // not expected: there are as many places as slots
		p.closeReader(r)
	}
}

// closeReaders closes the free pinned readers; it runs once every worker
// has returned (and so given its reader back).
func (p *Subscription) closeReaders() {
	if p.pinner == nil {
		return
	}
	for {
		select {
		case r := <-p.readers:
			p.closeReader(r)
		default:
			return
		}
	}
}

func (p *Subscription) closeReader(r *slotReader) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.runCtx), p.cfg.RenewEvery)
	defer cancel()
	if err := r.close(ctx); err != nil {
		p.log.Debug("closing a pinned reader failed", "subscription", p.cfg.Name, "err", err)
	}
}

// acquire takes the worker's lease: with its slot's reader when that
// acquires, so that the first read carries the lease check, and with the
// lanes' tails in the same round trip when the worker will take them
// (kept in w.preTails for tails).
func (w *worker) acquire(leaseKey string) (broker.Lease, bool, error) {
	p := w.p
	if p.live != nil {
		return w.liveAcquire(leaseKey)
	}
	genKey := p.layout.GenerationKey(p.cfg.Name, w.key)
	if w.rd != nil && w.rd.acqt != nil && p.tailer != nil && p.waiter != nil {
		l, ok, tails, err := w.rd.acqt.AcquirePartitionLeaseAndTails(w.ctx, leaseKey, genKey, p.node, p.cfg.LeaseTTL, w.streams())
		w.preTails = tails
		return l, ok, err
	}
	return w.acquirer().AcquirePartitionLease(w.ctx, leaseKey, genKey, p.node, p.cfg.LeaseTTL)
}

// streams are the worker's lanes' streams.
func (w *worker) streams() []string {
	streams := make([]string, len(w.lanes))
	for i, ln := range w.lanes {
		streams[i] = ln.stream
	}
	return streams
}

// acquirer is what the worker takes its lease with: its slot's reader
// when that acquires, so that the first read carries the lease check.
func (w *worker) acquirer() leaseAcquirer {
	if w.rd != nil && w.rd.acq != nil {
		return w.rd.acq
	}
	return w.p.cfg.Broker
}

// tailer is what the worker takes its lanes' tails with (p.tailer is
// set).
func (w *worker) tailer() broker.StreamTailer {
	if w.rd != nil && w.rd.tails != nil {
		return w.rd.tails
	}
	return w.p.tailer
}
