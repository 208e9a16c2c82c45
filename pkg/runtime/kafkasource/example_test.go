package kafkasource_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	producer, _ := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer producer.Close()
	for i, agg := range []string{"order-1", "order-2", "order-1"} {
		producer.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 1, Key: []byte(agg), Value: fmt.Appendf(nil, "event %d", i)})
	}

	src, err := kafkasource.New(cluster.ListenAddrs())
	if err != nil {
		panic(err)
	}
	defer src.Close()

	partitions, _ := src.Partitions(ctx, "orders")
	wm, _ := src.PartitionWatermarks(ctx, "orders", 1)
	fmt.Println("partitions", partitions, "partition 1 holds", wm.Earliest, "to", wm.Head)

	// Tail partition 1 from a checkpoint, as the node holding its lease would.
	reader, _ := src.NewReader("orders")
	defer reader.Close()
	reader.Assign(map[int32]int64{1: 1})
	batches, _ := reader.Poll(ctx)
	for _, b := range batches {
		for _, r := range b.Records {
			fmt.Printf("partition %d offset %d: %s %s\n", b.Partition, r.Offset, r.Key, r.Value)
		}
	}

	// Retry a parked aggregate: its records from the parked offset.
	again, _ := src.Rescan(ctx, "orders", 1, 0, "order-1")
	for _, r := range again {
		fmt.Printf("rescan offset %d: %s\n", r.Offset, r.Value)
	}
	// Output:
	// partitions [0 1] partition 1 holds 0 to 3
	// partition 1 offset 1: order-2 event 1
	// partition 1 offset 2: order-1 event 2
	// rescan offset 0: event 0
	// rescan offset 2: event 2
}
