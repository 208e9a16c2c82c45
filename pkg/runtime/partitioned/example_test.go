package partitioned_test

import (
	"context"
	"fmt"

	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// A node runs a partitioned subscription: messages of one key are handled
// in order, one at a time, by whichever node of the service owns the key.
// The in-memory broker and store stand in for Redis (redisbroker.New and
// redisstore.New over a go-redis client).
func ExampleNew() {
	ctx := context.Background()
	b := memorybroker.New()
	store := memstore.New(b.Faults())

	pub, err := partitioned.NewPublisher(b)
	if err != nil {
		panic(err)
	}
	for _, event := range []string{"created", "paid", "shipped"} {
		envelope := fmt.Sprintf(`{"data":{"event":%q},"metadata":{"headers":{"type":"Order"}}}`, event)
		if _, err := pub.Publish(ctx, "shop::order", "order-42", []byte(envelope)); err != nil {
			panic(err)
		}
	}

	done := make(chan struct{})
	handled := 0
	sub, err := partitioned.New(partitioned.Config{
		Name:       "app.handlers.OrderProjector", // the consumer group
		Categories: []string{"shop::order"},
		Broker:     b,
		Ledger:     store,
		Handler: runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
			fmt.Printf("%s %s gen=%d %s\n", m.Category, m.Key, m.Generation, m.Data)
			if handled++; handled == 3 {
				close(done)
			}
			return nil
		}),
	})
	if err != nil {
		panic(err)
	}
	node, err := runtime.NewNode(runtime.NodeConfig{Service: "shop", NodeID: "node-1", Membership: store}, sub)
	if err != nil {
		panic(err)
	}
	if err := node.Start(ctx); err != nil {
		panic(err)
	}
	<-done
	if err := node.Stop(ctx); err != nil {
		panic(err)
	}
	fmt.Println(node.JoinState())
	// Output:
	// shop::order order-42 gen=1 {"data":{"event":"created"},"metadata":{"headers":{"type":"Order"}}}
	// shop::order order-42 gen=1 {"data":{"event":"paid"},"metadata":{"headers":{"type":"Order"}}}
	// shop::order order-42 gen=1 {"data":{"event":"shipped"},"metadata":{"headers":{"type":"Order"}}}
	// left
}
