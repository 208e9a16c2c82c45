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
func (w *worker) releaseLease(ctx context.Context) (bool, error) {
	p := w.p
	if cr, ok := p.cfg.Broker.(broker.ConsumerReleaser); ok {
		return cr.ReleasePartitionLeaseConsumer(ctx, w.lease.fence, p.cfg.Name, w.streams()...)
	}
	return p.cfg.Broker.ReleasePartitionLease(ctx, w.lease.fence)
}
