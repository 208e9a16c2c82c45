package partitioned_test

import (
	"errors"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// A Publisher over a broker that waits for replicas reports a publish the
// replicas did not acknowledge as broker.ErrNotReplicated, with the id
// of the entry it left on the primary (the package's server has no
// replica).
func TestPublisherReportsUnreplicatedPublish(t *testing.T) {
	server.FlushAll(t)
	b := redisbroker.New(server.Client(t), redisbroker.WithPublishReplicas(redisbroker.Replicas{N: 1, Timeout: 20 * time.Millisecond}))
	pub, err := partitioned.NewPublisher(b)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pub.Publish(t.Context(), cat, "k", []byte(`{"data":{}}`))
	var nre *broker.NotReplicatedError
	if !errors.Is(err, broker.ErrNotReplicated) || !errors.As(err, &nre) || nre.ID == "" {
		t.Fatalf("publish: %v, want a NotReplicatedError with the entry id", err)
	}
	if n, _ := server.Client(t).XLen(t.Context(), broker.ProteanLayout.Stream(cat, "k")).Result(); n != 1 {
		t.Fatalf("stream holds %d entries, want the unacknowledged one", n)
	}
}
