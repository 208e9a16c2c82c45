package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// Target is one fresh, empty broker under test and the hooks the suite
// needs to inject faults an adapter's own API cannot produce.
type Target struct {
	// Broker is the adapter under test, empty.
	Broker broker.PartitionedBroker

	// Advance lets at least d pass on the broker's clock: a real sleep for
	// a server, a fake clock step for an in-memory broker. Lease TTLs and
	// reap's minIdle are measured on that clock.
	Advance func(d time.Duration)

	// Faults injects the states a misbehaving tool or a crash leaves.
	Faults Faults

	// Unreplicated, when set, is a second broker on the same store as
	// Broker that asks for replica acknowledgements of its lease and
	// publish writes (the Redis adapter's WithLeaseReplicas and
	// WithPublishReplicas) that cannot come: the store has fewer
	// replicas than it asks for. The replicaCases then hold it to
	// broker.ErrNotReplicated's contract. Leave it nil for a broker
	// without replicas (the in-memory one).
	Unreplicated broker.PartitionedBroker
}

// Faults corrupt a broker's state the way outside tools do.
type Faults interface {
	// DeleteEntry removes entry id from stream without touching any
	// pending list (XDEL), leaving pending entries without bodies.
	DeleteEntry(ctx context.Context, stream, id string) error
	// PutString stores a plain string value at key, replacing nothing:
	// key must not exist. It is how the suite puts a key of the wrong type
	// where a stream, set or lease is expected.
	PutString(ctx context.Context, key, value string) error
	// Exists reports whether key holds any value.
	Exists(ctx context.Context, key string) (bool, error)
	// GetString returns key's string value, ("", false) when missing.
	GetString(ctx context.Context, key string) (string, bool, error)
	// CreateGroup creates group on stream at id ("0", "$", or an entry
	// id) with MKSTREAM, the way a consumer outside protctl would.
	CreateGroup(ctx context.Context, stream, group, id string) error
	// StreamLen returns the number of entries of stream (0 when missing).
	StreamLen(ctx context.Context, stream string) (int64, error)
	// StreamIDs returns every entry id of stream, oldest first.
	StreamIDs(ctx context.Context, stream string) ([]string, error)
	// EntryFields returns the fields of entry id of stream (the data field
	// included), and false when there is no such entry.
	EntryFields(ctx context.Context, stream, id string) (map[string]string, bool, error)
	// Consumers returns group's consumers on stream with their pending
	// counts (XINFO CONSUMERS); empty when the stream or group is missing.
	Consumers(ctx context.Context, stream, group string) (map[string]int64, error)
}

// Factory returns a fresh, empty Target for one test and registers its
// cleanup on t.
type Factory func(t *testing.T) Target
