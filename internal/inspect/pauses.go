package inspect

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

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
	s := PauseText(p)
	if g.Lag != nil {
		s += fmt.Sprintf("; %d entries waiting", *g.Lag)
	}
	if g.Pending > 0 {
		s += fmt.Sprintf(", %d pending", g.Pending)
	}
	return s + "; " + leaseText(g) + "; protctl resume lifts it"
}

// TopicPauseEntry is an operator's pause entry of a Kafka topic
// subscription, with where it applies.
type TopicPauseEntry struct {
	Service string `json:"service"`
	Topic   string `json:"topic"`
	TopicPause
}

// TopicPauses returns the pause entries of the Kafka topic subscriptions
// of services (every service when none is given), sorted by service,
// topic, subscription and selector. It reads Redis only (no broker): the
// entries are the operators' and name aggregates, not partitions.
func (in *Inspector) TopicPauses(ctx context.Context, services []string) ([]TopicPauseEntry, error) {
	all, err := redisstore.New(in.client).ReadEveryPause(ctx)
	if err != nil {
		return nil, err
	}
	var out []TopicPauseEntry
	for scope, subs := range all {
		g, err := redisstore.ParseLeaseGroup(scope)
		if err != nil || !strings.HasPrefix(g.Name, "topic:") {
			continue // a Redis subscription's ("") or not a topic's
		}
		if len(services) > 0 && !slices.Contains(services, g.Service) {
			continue
		}
		for sub, set := range subs {
			for _, p := range set {
				out = append(out, TopicPauseEntry{Service: g.Service, Topic: strings.TrimPrefix(g.Name, "topic:"),
					TopicPause: TopicPause{Subscription: sub, Entry: p}})
			}
		}
	}
	slices.SortFunc(out, func(a, b TopicPauseEntry) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(a.Topic, b.Topic),
			strings.Compare(a.Subscription, b.Subscription), strings.Compare(string(a.Selector), string(b.Selector)))
	})
	return out, nil
}

// PauseText says who paused, when and why, for offenders and tables.
func PauseText(p pause.Entry) string {
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
	return s
}
