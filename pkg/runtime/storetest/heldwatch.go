package storetest

import (
	"context"

	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// HeldWatch is a ledger whose WatchRequests waits until Release is closed
// before it calls the real one (or fails when ctx ends first): a node
// whose request watch is slow to be confirmed (a loaded machine, a slow
// network), for the runtimes' tests. Every other call goes straight
// through.
type HeldWatch struct {
	ledger.Ledger
	Release <-chan struct{}
}

// WatchRequests implements ledger.Ledger.
func (l HeldWatch) WatchRequests(ctx context.Context, subscription string) (<-chan string, error) {
	select {
	case <-l.Release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return l.Ledger.WatchRequests(ctx, subscription)
}
