package redisbroker_test

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// New does no I/O, so a broker can be built (and its layout and
// capabilities inspected) before the server is reachable. The fenced
// consume loop needs a server, so it is shown in the package's tests
// rather than as an example.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	b := redisbroker.New(client, redisbroker.WithLayout(broker.ProteanLayout))

	fmt.Println(b.Capabilities().Has(broker.StreamPartitioning))
	l := b.Layout()
	fmt.Println(l.Stream("shop::order", "o-1"))
	fmt.Println(l.LeaseKey("app.Projector", "o-1"))
	// Output:
	// true
	// shop::order:o-1
	// app.Projector:o-1:__lease__
}
