package memorybroker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
)

// A partition's lease for one group: whoever acquires it gets a fence
// token "owner:generation"; nobody else gets it until it is released or
// its TTL runs out, and every new holder gets a greater generation.
func ExampleBroker_AcquirePartitionLease() {
	ctx := context.Background()
	clock := memorybroker.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	b := memorybroker.New(memorybroker.WithClock(clock))
	l := b.Layout()
	leaseKey := l.LeaseKey("app.Projector", "order-42")
	genKey := l.GenerationKey("app.Projector", "order-42")

	lease, ok, err := b.AcquirePartitionLease(ctx, leaseKey, genKey, "node-a", 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("node-a acquired:", ok, "token:", lease.Token)

	_, ok, _ = b.AcquirePartitionLease(ctx, leaseKey, genKey, "node-b", 10*time.Second)
	fmt.Println("node-b acquired while held:", ok)

	clock.Advance(10 * time.Second) // node-a stopped renewing: the lease expires
	lease, ok, _ = b.AcquirePartitionLease(ctx, leaseKey, genKey, "node-b", 10*time.Second)
	fmt.Println("node-b acquired after expiry:", ok, "token:", lease.Token)

	// Output:
	// node-a acquired: true token: node-a:1
	// node-b acquired while held: false
	// node-b acquired after expiry: true token: node-b:2
}

// A fenced read proves the lease in the same step as it reads: the
// holder's token reads the partition, a superseded token is refused.
func ExampleBroker_ReadPartitionFenced() {
	ctx := context.Background()
	clock := memorybroker.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	b := memorybroker.New(memorybroker.WithClock(clock))
	l := b.Layout()
	const category, key, group = "shop::order", "order-42", "app.Projector"
	stream := l.Stream(category, key) // "shop::order:order-42"

	for _, event := range []string{`{"data":{"step":"placed"}}`, `{"data":{"step":"paid"}}`} {
		if _, err := b.PublishPartitioned(ctx, category, key, "", []byte(event)); err != nil {
			panic(err)
		}
	}
	lease, _, _ := b.AcquirePartitionLease(ctx, l.LeaseKey(group, key), l.GenerationKey(group, key), "node-a", 10*time.Second)

	msgs, err := b.ReadPartitionFenced(ctx, lease.Fence, stream, group, 10, broker.ReadPendingThenNew)
	if err != nil {
		panic(err)
	}
	for _, m := range msgs {
		fmt.Println(m.ID, string(m.Data))
	}

	// node-a pauses past its TTL; node-b takes over with generation 2.
	clock.Advance(11 * time.Second)
	b.AcquirePartitionLease(ctx, l.LeaseKey(group, key), l.GenerationKey(group, key), "node-b", 10*time.Second)

	_, err = b.ReadPartitionFenced(ctx, lease.Fence, stream, group, 10, broker.ReadPendingThenNew)
	fmt.Println("stale read refused:", errors.Is(err, broker.ErrLeaseLost))

	// Output:
	// 1767323045000-0 {"data":{"step":"placed"}}
	// 1767323045000-1 {"data":{"step":"paid"}}
	// stale read refused: true
}

// What is read stays pending for the reading generation until it is
// acknowledged, so a crash before the ack redelivers it; an ack, fenced
// like the read, removes it for good.
func ExampleBroker_AckPartitionFenced() {
	ctx := context.Background()
	clock := memorybroker.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	b := memorybroker.New(memorybroker.WithClock(clock))
	l := b.Layout()
	const category, key, group = "shop::order", "order-42", "app.Projector"
	stream := l.Stream(category, key)

	b.PublishPartitioned(ctx, category, key, "", []byte(`{"data":{"step":"placed"}}`))
	lease, _, _ := b.AcquirePartitionLease(ctx, l.LeaseKey(group, key), l.GenerationKey(group, key), "node-a", 10*time.Second)

	msgs, _ := b.ReadPartitionFenced(ctx, lease.Fence, stream, group, 10, broker.ReadNew)
	pending, _ := b.ReadPartitionFenced(ctx, lease.Fence, stream, group, 10, broker.ReadPending)
	fmt.Println("pending before ack:", len(pending))

	n, err := b.AckPartitionFenced(ctx, lease.Fence, stream, group, msgs[0].ID)
	if err != nil {
		panic(err)
	}
	fmt.Println("acknowledged:", n)

	pending, _ = b.ReadPartitionFenced(ctx, lease.Fence, stream, group, 10, broker.ReadPending)
	fmt.Println("pending after ack:", len(pending))

	// Output:
	// pending before ack: 1
	// acknowledged: 1
	// pending after ack: 0
}
