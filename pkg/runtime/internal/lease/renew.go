package lease

import (
	"context"
	"errors"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// Renewer renews one lease; broker.LeaseManager is one.
type Renewer interface {
	RenewPartitionLease(ctx context.Context, f broker.Fence, ttl time.Duration) (bool, error)
}

// ErrBatchMismatch is returned by RenewAll when a batch renewal answers
// for another number of leases than it was asked for: nothing is known.
var ErrBatchMismatch = errors.New("runtime: batch renewal answered for the wrong number of leases")

// RenewAll renews the leases of fences for ttl: in one call when batch is
// not nil (a broker.BatchRenewer), else one call per lease through r. The
// results are per fence; a lease whose own call failed is Unknown, and
// the first such error is returned with the others' results. A failed
// batch call leaves every result Unknown.
func RenewAll(ctx context.Context, r Renewer, batch broker.BatchRenewer, fences []broker.Fence, ttl time.Duration) ([]Result, error) {
	res := make([]Result, len(fences))
	if batch != nil {
		oks, err := batch.RenewPartitionLeases(ctx, fences, ttl)
		if err != nil {
			return res, err
		}
		if len(oks) != len(fences) {
			return res, ErrBatchMismatch
		}
		for i, ok := range oks {
			res[i] = outcome(ok)
		}
		return res, nil
	}
	var firstErr error
	for i, f := range fences {
		ok, err := r.RenewPartitionLease(ctx, f, ttl)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		res[i] = outcome(ok)
	}
	return res, firstErr
}

func outcome(held bool) Result {
	if held {
		return Renewed
	}
	return Refused
}
