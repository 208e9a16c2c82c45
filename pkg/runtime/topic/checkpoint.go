package topic

import (
	"context"
	"errors"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/lease"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
)

// saveCheckpoints saves each subscription's low watermark that moved,
// fenced by the lease. A refused save means the lease is gone: the
// partition stops.
func (tp *topicPart) saveCheckpoints(ctx context.Context) error {
	t := tp.t
	if tp.lease.lost.Load() {
		return lease.ErrLost
	}
	tp.saveMu.Lock()
	defer tp.saveMu.Unlock()
	var firstErr error
	for _, sp := range tp.subs {
		tp.mu.Lock()
		next, saved := sp.win.low(sp.next), sp.saved
		tp.mu.Unlock()
		if next <= saved {
			continue
		}
		err := t.cfg.Checkpoints.Save(ctx, tp.lease.fence, t.group, sp.sr.cfg.Name, tp.p, next)
		if err != nil {
			if errors.Is(err, broker.ErrLeaseLost) {
				t.loseLease(tp.lease, lease.ErrLost)
				return err
			}
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		t.c.checkpoints.Add(1)
		tp.mu.Lock()
		sp.saved = max(sp.saved, next)
		tp.mu.Unlock()
	}
	return firstErr
}

// checkpointLoop saves the held partitions' checkpoints every
// CheckpointEvery.
func (t *Consumer) checkpointLoop(ctx context.Context) {
	defer t.wg.Done()
	for t.sleep(ctx, t.cfg.CheckpointEvery) {
		t.saveAll(ctx)
	}
}

// saveAll saves every held partition's checkpoints once.
func (t *Consumer) saveAll(ctx context.Context) error {
	var firstErr error
	for _, tp := range t.heldParts() {
		octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
		err := tp.saveCheckpoints(octx)
		cancel()
		if err != nil && ctx.Err() == nil {
			if firstErr == nil {
				firstErr = err
			}
			if !errors.Is(err, broker.ErrLeaseLost) && !errors.Is(err, lease.ErrLost) {
				t.log.Warn("saving checkpoints failed", "partition", tp.p, "err", err)
				observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "checkpoint", Err: err})
			}
		}
	}
	return firstErr
}
