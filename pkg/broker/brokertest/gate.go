package brokertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// runCapabilityGate holds a broker without StreamPartitioning to its word:
// every partitioning method fails loudly, naming the operation, and never
// half-works.
func runCapabilityGate(t *testing.T, target Target) {
	b := target.Broker
	ctx := context.Background()
	l := b.Layout()
	f := broker.Fence{LeaseKey: l.LeaseKey(group, key), Token: broker.FenceToken(owner, 1)}
	calls := map[string]func() error{
		"RecordPartition": func() error { return b.RecordPartition(ctx, cat, key) },
		"PartitionKeys":   func() error { _, err := b.PartitionKeys(ctx, cat); return err },
		"ScanPartitionKeys": func() error {
			_, _, err := b.ScanPartitionKeys(ctx, cat, 0, 10)
			return err
		},
		"RegisterGroup":    func() error { return b.RegisterGroup(ctx, cat, group) },
		"RegisteredGroups": func() error { _, err := b.RegisteredGroups(ctx, cat); return err },
		"AcquirePartitionLease": func() error {
			_, _, err := b.AcquirePartitionLease(ctx, l.LeaseKey(group, key), l.GenerationKey(group, key), owner, time.Second)
			return err
		},
		"RenewPartitionLease":   func() error { _, err := b.RenewPartitionLease(ctx, f, time.Second); return err },
		"ReleasePartitionLease": func() error { _, err := b.ReleasePartitionLease(ctx, f); return err },
		"ReadPartitionFenced": func() error {
			_, err := b.ReadPartitionFenced(ctx, f, l.Stream(cat, key), group, 10, broker.ReadPendingThenNew)
			return err
		},
		"AckPartitionFenced": func() error {
			_, err := b.AckPartitionFenced(ctx, f, l.Stream(cat, key), group, "1-1")
			return err
		},
		"ReclaimPartitionPending": func() error {
			_, err := b.ReclaimPartitionPending(ctx, f, l.Stream(cat, key), group, 0, 10)
			return err
		},
		"DeadLetterPartitionFenced": func() error {
			_, err := b.DeadLetterPartitionFenced(ctx, f, l.Stream(cat, key), group, "1-1", l.DLQStream(cat, key), "test")
			return err
		},
		"ReapPartition": func() error { _, err := b.ReapPartition(ctx, cat, key, 0, ""); return err },
		"Trim":          func() error { _, err := b.Trim(ctx, l.Stream(cat, key), 10); return err },
		"PublishPartitioned": func() error {
			_, err := b.PublishPartitioned(ctx, cat, key, "", payload(key, 0))
			return err
		},
	}
	if ar, ok := b.(broker.AckReader); ok {
		calls["AckAndReadPartitionFenced"] = func() error {
			_, err := ar.AckAndReadPartitionFenced(ctx, f, l.Stream(cat, key), group, []string{"1-1"}, 10, broker.ReadPendingThenNew)
			return err
		}
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, broker.ErrPartitioningUnsupported) {
			t.Errorf("%s on a broker without StreamPartitioning: err = %v, want ErrPartitioningUnsupported", name, err)
			continue
		}
		var ue *broker.UnsupportedError
		if !errors.As(err, &ue) || ue.Op == "" {
			t.Errorf("%s: error %v does not name the operation", name, err)
		}
	}
	// The plain stream still works: sequential_by is a no-op, not an outage.
	if _, err := b.Append(ctx, cat, payload(key, 0)); err != nil {
		t.Errorf("Append on a broker without StreamPartitioning: %v", err)
	}
}
