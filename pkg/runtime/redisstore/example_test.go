package redisstore_test

import (
	"fmt"

	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// A Kafka topic's partitions are a lease group: its leases and
// checkpoints share one hash tag, so a checkpoint is fenced by the lease
// in one script, on Redis Cluster too.
func ExampleLeaseGroup() {
	g := redisstore.TopicLeaseGroup("shop", "orders")
	fmt.Println(g) // the leaseGroup argument of Checkpoints
	fmt.Println(g.LeaseKey(3))
	fmt.Println(g.GenerationKey(3))
	fmt.Println(g.CheckpointsKey("ledger-sync"))
	fmt.Println(redisstore.RecordKey(g.LeaseKey(3), "ledger-sync", "order-42"))
	// Output:
	// shop|topic:orders
	// protctl:{shop|topic:orders}:lease:3
	// protctl:{shop|topic:orders}:generation:3
	// protctl:{shop|topic:orders}:checkpoints:ledger-sync
	// protctl:{shop|topic:orders}:lease:3:parked:11:ledger-sync:order-42
}
