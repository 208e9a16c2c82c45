package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime/memstore"
)

// A checkpoint is fenced by the partition's lease: once another node
// holds the lease, the old owner's save is refused.
func Example() {
	ctx := context.Background()
	b := memorybroker.New()
	s := memstore.New(b.Faults())

	const lease, gen = "protctl:{shop|topic:orders}:lease:0", "protctl:{shop|topic:orders}:generation:0"
	l, _, _ := b.AcquirePartitionLease(ctx, lease, gen, "node-a", time.Minute)
	fmt.Println(s.Save(ctx, l.Fence, "shop|topic:orders", "ledger-sync", 0, 42))

	b.ReleasePartitionLease(ctx, l.Fence)
	b.AcquirePartitionLease(ctx, lease, gen, "node-b", time.Minute)
	err := s.Save(ctx, l.Fence, "shop|topic:orders", "ledger-sync", 0, 50)
	fmt.Println(errors.Is(err, broker.ErrLeaseLost))

	next, _, _ := s.Load(ctx, "shop|topic:orders", "ledger-sync", 0)
	fmt.Println(next)
	// Output:
	// <nil>
	// true
	// 42
}
