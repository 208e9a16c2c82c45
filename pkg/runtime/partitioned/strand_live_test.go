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
	b.g.batches.Add(1)
	res := make([]broker.ReadResult, len(reads))
	if err := b.g.pass(ctx); err != nil {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	res = b.strandBroker.(broker.BatchReader).AckAndReadPartitionsFenced(ctx, reads)
	from := len(res)
	if err := b.g.pass(ctx); err != nil {
		from = 0
	} else if b.g.lost() || b.g.lost() {
		from = strandCut(b.g, len(res))
	}
	for i := from; i < len(res); i++ {
		res[i] = broker.ReadResult{Err: errLostReply}
	}
	return res
}

func (b gatedBroker) AcquirePartitionLeases(ctx context.Context, reqs []broker.LeaseRequest) []broker.LeaseGrant {
	b.g.batches.Add(1)
	res := make([]broker.LeaseGrant, len(reqs))
	if err := b.g.pass(ctx); err != nil {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	res = b.strandBroker.(broker.BatchAcquirer).AcquirePartitionLeases(ctx, reqs)
	from := len(res)
	if err := b.g.pass(ctx); err != nil {
		from = 0
	} else if b.g.lost() || b.g.lost() {
		from = strandCut(b.g, len(res))
	}
	for i := from; i < len(res); i++ {
		res[i] = broker.LeaseGrant{Err: errLostReply}
	}
	return res
}

func (b gatedBroker) ReleasePartitionLeasesConsumers(ctx context.Context, rels []broker.LeaseRelease) []broker.ReleaseResult {
	b.g.batches.Add(1)
	res := make([]broker.ReleaseResult, len(rels))
	if err := b.g.pass(ctx); err != nil {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	res = b.strandBroker.(broker.BatchReleaser).ReleasePartitionLeasesConsumers(ctx, rels)
	from := len(res)
	if err := b.g.pass(ctx); err != nil {
		from = 0
	} else if b.g.lost() || b.g.lost() {
		from = strandCut(b.g, len(res))
	}
	for i := from; i < len(res); i++ {
		res[i] = broker.ReleaseResult{Err: errLostReply}
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
