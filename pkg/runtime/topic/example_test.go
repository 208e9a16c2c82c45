package topic_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// A node reads a Kafka topic with one subscription. The stores are in
// memory here; in production the lease store is redisbroker.New(client)
// and the checkpoints, ledger and membership redisstore.New(client), on
// the same Redis.
func ExampleNew() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		r := &kgo.Record{Topic: "orders", Partition: 1, Key: []byte("order-7"),
			Value: []byte(fmt.Sprintf(`{"step":%d}`, i)), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(fmt.Sprint("e", i))}}}
		if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			panic(err)
		}
	}

	src, err := kafkasource.New(cluster.ListenAddrs())
	if err != nil {
		panic(err)
	}
	defer src.Close()
	leases := memorybroker.New()
	store := memstore.New(leases.Faults())
	handled := make(chan struct{}, 3)
	ts, err := topic.New(topic.Config{
		Topic: "orders",
		Subscriptions: []topic.Subscription{{
			Name: "ledger-sync",
			Handler: runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
				// One record at a time per aggregate, in offset order.
				fmt.Printf("%s/%d offset %s: %s %s\n", m.Topic, m.Partition, m.Position, m.Aggregate, m.Data)
				handled <- struct{}{}
				return nil
			}),
		}},
		Source:      topic.Kafka(src),
		Leases:      leases,
		Checkpoints: store,
		Ledger:      store,
	})
	if err != nil {
		panic(err)
	}
	node, err := runtime.NewNode(runtime.NodeConfig{Service: "shop", NodeID: "node-1", Membership: store}, ts)
	if err != nil {
		panic(err)
	}
	if err := node.Start(ctx); err != nil {
		panic(err)
	}
	if err := ts.AwaitStarted(ctx); err != nil {
		panic(err)
	}
	for range 3 {
		<-handled
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := node.Stop(stopCtx); err != nil {
		panic(err)
	}
	next, _, _ := store.Load(ctx, "shop|topic:orders", "ledger-sync", 1)
	fmt.Println("checkpoint of partition 1:", next, "- state:", ts.JoinState())
	// Output:
	// orders/1 offset 0: order-7 {"step":1}
	// orders/1 offset 1: order-7 {"step":2}
	// orders/1 offset 2: order-7 {"step":3}
	// checkpoint of partition 1: 3 - state: left
}

// A handler reads a Kafka record's headers through Message.Headers, a
// view over the record: nothing is copied unless asked for. A repeated
// key's last value wins, as the producer's final word.
func ExampleHeaders() {
	h := runtime.HeadersOf("id", "e-1", "type", "OrderPlaced", "id", "e-2")
	fmt.Println(h.Get("id"), h.Len())
	if _, ok := h.Lookup("version"); !ok {
		fmt.Println("no version header")
	}
	sep := ""
	for k, v := range h.All() {
		fmt.Printf("%s%s=%s", sep, k, v)
		sep = " "
	}
	fmt.Println()
	fmt.Println(h.Map())
	var none runtime.Headers // what a Redis message carries
	fmt.Println(none.Len(), none.Get("id") == "", none.Map() == nil)
	// Output:
	// e-2 3
	// no version header
	// id=e-1 type=OrderPlaced id=e-2
	// map[id:e-2 type:OrderPlaced]
	// 0 true true
}
