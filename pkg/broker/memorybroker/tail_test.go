package memorybroker_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
)

func TestLastEntryIDs(t *testing.T) {
	ctx := context.Background()
	b := memorybroker.New()
	a := cat + ":a"
	if _, err := b.Append(ctx, a, []byte("1")); err != nil {
		t.Fatal(err)
	}
	last, err := b.Append(ctx, a, []byte("2"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.LastEntryIDs(ctx, []string{a, cat + ":missing"})
	if err != nil {
		t.Fatal(err)
	}
	if got[a] != last || got[cat+":missing"] != "0-0" || len(got) != 2 {
		t.Errorf("LastEntryIDs = %v, want %s and 0-0", got, last)
	}
	// It agrees with WaitForEntries: nothing after the tail.
	ready, err := b.WaitForEntries(ctx, got, time.Millisecond)
	if err != nil || ready != nil {
		t.Errorf("WaitForEntries from the tails = %v, %v; want nil", ready, err)
	}
	if err := b.Faults().PutString(ctx, "str", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.LastEntryIDs(ctx, []string{"str"}); !errors.Is(err, broker.ErrWrongType) {
		t.Errorf("string key: %v, want ErrWrongType", err)
	}
	if _, err := b.LastEntryIDs(ctx, []string{""}); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Errorf("empty stream: %v, want ErrInvalidArgument", err)
	}
}

func TestRenewPartitionLeases(t *testing.T) {
	ctx := context.Background()
	clock := memorybroker.NewManualClock(epoch)
	b := memorybroker.New(memorybroker.WithClock(clock))
	l := broker.ProteanLayout
	var fences []broker.Fence
	for _, k := range []string{"a", "b", "c"} {
		lease, ok, err := b.AcquirePartitionLease(ctx, l.LeaseKey(group, k), l.GenerationKey(group, k), owner, time.Second)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		fences = append(fences, lease.Fence)
	}
	if _, err := b.ReleasePartitionLease(ctx, fences[1]); err != nil {
		t.Fatal(err)
	}
	fences[2].Token = owner + ":99"
	oks, err := b.RenewPartitionLeases(ctx, fences, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(oks, []bool{true, false, false}) {
		t.Errorf("renewed %v, want [true false false]", oks)
	}
	clock.Advance(30 * time.Second)
	if _, ok, _ := b.Faults().GetString(ctx, l.LeaseKey(group, "a")); !ok {
		t.Error("a expired although renewed for a minute")
	}
	if _, ok, _ := b.Faults().GetString(ctx, l.LeaseKey(group, "c")); ok {
		t.Error("c renewed with a stale token")
	}
	if _, err := b.RenewPartitionLeases(ctx, []broker.Fence{{LeaseKey: "x"}}, time.Second); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Errorf("empty token: %v", err)
	}
	if _, err := memorybroker.NewInline().RenewPartitionLeases(ctx, nil, time.Second); !errors.Is(err, broker.ErrPartitioningUnsupported) {
		t.Errorf("inline broker: %v", err)
	}
}
