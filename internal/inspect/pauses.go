package inspect

import (
	"context"
	"fmt"

	"github.com/protctl/protctl/pkg/runtime/pause"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Operators' pauses (`protctl pause`, docs/decisions/0045-pause.md) of
// Redis partitioned subscriptions: a listing reads them once and marks
// each (group, key) they hold back with Group.Paused.

// Pauses returns the pause entries of every Redis partitioned
// subscription that has any, by subscription (consumer group).
func (in *Inspector) Pauses(ctx context.Context) (map[string]pause.Set, error) {
	return redisstore.New(in.client).ReadAllPauses(ctx, "")
}

// pausedOf is the entry of pauses that holds group's key back, nil when
// none does.
func pausedOf(pauses map[string]pause.Set, group, key string) *pause.Entry {
	set, ok := pauses[group]
	if !ok {
		return nil
	}
	if p, ok := set.Paused(key); ok {
		return &p
	}
	return nil
}

// pausedText is a paused verdict's reason.
func pausedText(p pause.Entry, g Group) string {
	s := "paused by an operator (" + string(p.Selector)
	if p.By != "" {
		s += " by " + p.By
	}
	if !p.At.IsZero() {
		s += " at " + p.At.UTC().Format("2006-01-02T15:04:05Z")
	}
	s += ")"
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	if g.Lag != nil {
		s += fmt.Sprintf("; %d entries waiting", *g.Lag)
	}
	if g.Pending > 0 {
		s += fmt.Sprintf(", %d pending", g.Pending)
	}
	return s + "; " + leaseText(g) + "; protctl resume lifts it"
}
