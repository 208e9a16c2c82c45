package runtime

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"
)

// An operator's pause (`protctl pause`) holds back the work of one key,
// of the keys a glob pattern matches, or of a whole subscription, until
// `protctl resume` lifts it. It is state in the store, not in a node: a
// partition's next owner reads it before its first read, so a pause
// survives failover. docs/decisions/0045-pause.md explains the design.
//
// It is not the back-off after a systemic failure (BackOffEvent,
// NodeStatus.BackingOff): that one is the runtime's own and ends by
// itself; a pause is an operator's and ends only on resume. "Paused"
// means this one only, in every report (NodeStatus.Paused, the
// protctl_partitions_paused metric, PAUSED in the CLI and dashboard).

// PauseSelector names what a pause entry holds back.
//
// The zero-value-free forms are:
//
//	"key:<K>"   one partition key (a Kafka aggregate)
//	"glob:<P>"  every key P matches (path.Match syntax), now and later
//	"all"       the whole subscription
type PauseSelector string

// PauseAll is the selector of a whole-subscription pause.
const PauseAll PauseSelector = "all"

// PauseKey returns the selector of one key.
func PauseKey(key string) PauseSelector { return PauseSelector("key:" + key) }

// PauseGlob returns the selector of the keys pattern matches.
func PauseGlob(pattern string) PauseSelector { return PauseSelector("glob:" + pattern) }

// ErrBadPauseSelector is returned by ParsePauseSelector and the stores'
// Pause for a selector of none of the forms above, or a glob that
// path.Match rejects.
var ErrBadPauseSelector = errors.New("runtime: bad pause selector")

// ParsePauseSelector validates s.
func ParsePauseSelector(s string) (PauseSelector, error) {
	switch {
	case s == string(PauseAll):
		return PauseAll, nil
	case strings.HasPrefix(s, "key:") && len(s) > len("key:"):
		return PauseSelector(s), nil
	case strings.HasPrefix(s, "glob:") && len(s) > len("glob:"):
		if _, err := path.Match(s[len("glob:"):], ""); err != nil {
			return "", fmt.Errorf("%w: %q: %v", ErrBadPauseSelector, s, err)
		}
		return PauseSelector(s), nil
	}
	return "", fmt.Errorf("%w: %q (want key:<K>, glob:<P> or all)", ErrBadPauseSelector, s)
}

// Matches reports whether the selector holds back key.
func (s PauseSelector) Matches(key string) bool {
	switch {
	case s == PauseAll:
		return true
	case strings.HasPrefix(string(s), "key:"):
		return string(s)[len("key:"):] == key
	case strings.HasPrefix(string(s), "glob:"):
		ok, _ := path.Match(string(s)[len("glob:"):], key)
		return ok
	}
	return false
}

// Pause is one pause entry: what it holds back and who asked, when, why
// (for display; the runtime reads only the selector).
type Pause struct {
	Selector PauseSelector `json:"selector"`
	By       string        `json:"by,omitempty"`
	At       time.Time     `json:"at"`
	Reason   string        `json:"reason,omitempty"`
}

// PauseSet is a subscription's pause entries, as read at once.
type PauseSet []Pause

// Paused returns the entry that holds back key (the whole-subscription
// one first, then the key's own, then the first matching glob in
// selector order), and whether one does.
func (ps PauseSet) Paused(key string) (Pause, bool) {
	var glob *Pause
	for i := range ps {
		p := &ps[i]
		switch {
		case p.Selector == PauseAll:
			return *p, true
		case p.Selector == PauseKey(key):
			return *p, true
		case glob == nil && strings.HasPrefix(string(p.Selector), "glob:") && p.Selector.Matches(key):
			glob = p
		}
	}
	if glob != nil {
		return *glob, true
	}
	return Pause{}, false
}

// All reports whether the whole subscription is paused.
func (ps PauseSet) All() bool {
	for _, p := range ps {
		if p.Selector == PauseAll {
			return true
		}
	}
	return false
}

// SortPauses orders entries by selector, the order stores return them in.
func SortPauses(ps PauseSet) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].Selector < ps[j].Selector })
}

// Pauses stores operators' pauses, per (scope, subscription). The scope
// is "" for a Redis partitioned subscription (its name, the consumer
// group, is global) and the lease group for a Kafka topic subscription.
// Implementations are safe for concurrent use.
type Pauses interface {
	// ReadPauses returns subscription's entries sorted by selector; none
	// is an empty set, not an error.
	ReadPauses(ctx context.Context, scope, subscription string) (PauseSet, error)
	// WatchPauses sends a signal on every change of subscription's
	// entries made after it returns, until ctx ends; then it closes the
	// channel. Signals are hints: a reader re-reads on its own period.
	WatchPauses(ctx context.Context, scope, subscription string) (<-chan struct{}, error)
}
