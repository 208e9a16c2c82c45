package partitioned

import (
	"log/slog"
	"strings"

	"github.com/protctl/protctl/pkg/broker"
)

// capability is an optional broker capability the engine uses (found by
// type assertion, declared in pkg/broker) and what running without it
// costs.
type capability struct {
	name string
	has  bool
	cost string
}

// capabilities lists, for b, every optional capability the engine uses.
// A wrapper around a broker (metrics, tracing) that does not forward one
// silently downgrades the engine; the list is what Start warns about.
func capabilities(b broker.PartitionedBroker) []capability {
	is := func(ok bool) bool { return ok }
	_, waiter := b.(broker.EntryWaiter)
	_, tailer := b.(broker.StreamTailer)
	_, pwatch := b.(broker.PartitionWatcher)
	_, renewer := b.(broker.BatchRenewer)
	_, ackReader := b.(broker.AckReader)
	_, batchReader := b.(broker.BatchReader)
	_, batchAcquirer := b.(broker.BatchAcquirer)
	_, batchReleaser := b.(broker.BatchReleaser)
	_, counter := b.(broker.PartitionCounter)
	_, appends := b.(broker.AppendWatcher)
	_, checker := b.(broker.EntryChecker)
	_, pinner := b.(broker.ReaderPinner)
	_, seeker := b.(broker.PartitionSeeker)
	_, waitReader := b.(broker.WaitReader)
	return []capability{
		{"broker.EntryWaiter", is(waiter), "idle partitions are read again every SweepEvery instead of waited on (needs StreamTailer too)"},
		{"broker.StreamTailer", is(tailer), "idle partitions are read again every SweepEvery instead of waited on (needs EntryWaiter too)"},
		{"broker.PartitionWatcher", is(pwatch), "a publish does not wake its idle partition at once"},
		{"broker.BatchRenewer", is(renewer), "one round trip per held lease every RenewEvery instead of one for all"},
		{"broker.AckReader", is(ackReader), "each batch's ack is a round trip of its own"},
		{"broker.BatchReader", is(batchReader), "partitions woken together are read one by one, each on a worker slot (needs BatchAcquirer too)"},
		{"broker.BatchAcquirer", is(batchAcquirer), "partitions woken together are read one by one, each on a worker slot (needs BatchReader too)"},
		{"broker.BatchReleaser", is(batchReleaser), "partitions going idle together give their leases back one round trip each"},
		{"broker.PartitionCounter", is(counter), "keys other publishers add are found at the next DiscoverEvery scan"},
		{"broker.AppendWatcher", is(appends), "appends are not announced: new keys come from the index poll or scan"},
		{"broker.EntryChecker", is(checker), "idle partitions are waited on with blocking reads even while appends are announced, a re-issue per entry"},
		{"broker.ReaderPinner", is(pinner), "each read takes a connection from the client's pool"},
		{"broker.PartitionSeeker", is(seeker), "operators' seek requests for partitions this node holds are not carried out"},
		{"broker.WaitReader", is(waitReader), "a hot partition's entry costs a wake-up and then a read, two round trips, instead of one"},
	}
}

// warnMissingCapabilities logs, once per start, the optional capabilities
// b lacks and what each costs; nothing when it has them all.
func warnMissingCapabilities(log *slog.Logger, name string, b broker.PartitionedBroker) {
	var missing, costs []string
	for _, c := range capabilities(b) {
		if !c.has {
			missing = append(missing, c.name)
			costs = append(costs, c.name+": "+c.cost)
		}
	}
	if len(missing) == 0 {
		return
	}
	log.Warn("broker lacks optional capabilities", "subscription", name,
		"missing", strings.Join(missing, ","), "costs", strings.Join(costs, "; "))
}
