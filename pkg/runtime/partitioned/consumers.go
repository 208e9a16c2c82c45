package partitioned

import (
	"context"

	"github.com/protctl/protctl/pkg/broker"
)

// releaseLease gives the worker's lease back, fenced. On a broker that
// offers broker.ConsumerReleaser the same step deletes the group's
// consumers that hold no pending entries on the partition's lanes (this
// generation's own included), so that a partition released when idle,
// every few seconds, does not leave a consumer per generation behind; a
// consumer still holding entries stays for the next owner's reclaim,
// which prunes what it empties (ReclaimPartitionPending).
//
// On the live path (a broker.BatchReleaser) the release goes with the
// other partitions' steps, a round trip for all: partitions handled
// together reach IdleAfter together, and a thousand releases sent one by
// one held the server, and the live path's connections, for tens of
// milliseconds (BenchmarkLatencyRedis, Zipf keys at 500/s). Not when ctx
// is not the worker's own (a release after a hard stop or a lost trust,
// under a deadline of its own): the live path's steps run under the
// subscription's context, which a hard stop cancels.
func (w *worker) releaseLease(ctx context.Context) (bool, error) {
	p := w.p
	if p.live != nil && p.live.releaser != nil && ctx == w.ctx && ctx.Err() == nil {
		return w.liveRelease()
	}
	if cr, ok := p.cfg.Broker.(broker.ConsumerReleaser); ok {
		return cr.ReleasePartitionLeaseConsumer(ctx, w.lease.fence, p.cfg.Name, w.streams()...)
	}
	return p.cfg.Broker.ReleasePartitionLease(ctx, w.lease.fence)
}
