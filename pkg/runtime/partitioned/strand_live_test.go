package partitioned_test

import (
	"context"

	"github.com/protctl/protctl/pkg/broker"
)

// The batch capabilities behind the gate, so that the strand tests run the
// live path (without these the runtime finds no BatchReader/BatchAcquirer
// on gatedBroker and falls back to the slot path), and its releases
// (BatchReleaser). A lost reply fails
// the items from a random one on (they ran; their replies were not read),
// or every item when the gate cuts the call.

func (b gatedBroker) AckAndReadPartitionsFenced(ctx context.Context, reads []broker.FencedRead) []broker.ReadResult {
	return gatedBatch(ctx, b.g, len(reads), func() []broker.ReadResult {
		return b.strandBroker.(broker.BatchReader).AckAndReadPartitionsFenced(ctx, reads)
	}, func(err error) broker.ReadResult { return broker.ReadResult{Err: err} })
}

func (b gatedBroker) AcquirePartitionLeases(ctx context.Context, reqs []broker.LeaseRequest) []broker.LeaseGrant {
	return gatedBatch(ctx, b.g, len(reqs), func() []broker.LeaseGrant {
		return b.strandBroker.(broker.BatchAcquirer).AcquirePartitionLeases(ctx, reqs)
	}, func(err error) broker.LeaseGrant { return broker.LeaseGrant{Err: err} })
}

func (b gatedBroker) ReleasePartitionLeasesConsumers(ctx context.Context, rels []broker.LeaseRelease) []broker.ReleaseResult {
	return gatedBatch(ctx, b.g, len(rels), func() []broker.ReleaseResult {
		return b.strandBroker.(broker.BatchReleaser).ReleasePartitionLeasesConsumers(ctx, rels)
	}, func(err error) broker.ReleaseResult { return broker.ReleaseResult{Err: err} })
}

// gatedBatch runs call, a batch of n items, behind g: a gate that cuts
// the call before it fails every item with fail(err); one that cuts it
// after, or loses its reply, fails the items from a random one on with
// errLostReply (they ran; their replies were not read).
func gatedBatch[Res any](ctx context.Context, g *gate, n int, call func() []Res, fail func(error) Res) []Res {
	g.batches.Add(1)
	if err := g.pass(ctx); err != nil {
		res := make([]Res, n)
		for i := range res {
			res[i] = fail(err)
		}
		return res
	}
	res := call()
	from := len(res)
	if err := g.pass(ctx); err != nil {
		from = 0
	} else if g.lost() || g.lost() {
		from = strandCut(g, len(res))
	}
	for i := from; i < len(res); i++ {
		res[i] = fail(errLostReply)
	}
	return res
}

// strandCut is where a transport failure cut a batch's replies: the items
// from it on ran, their replies were not read.
func strandCut(g *gate, n int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rng.IntN(n)
}
