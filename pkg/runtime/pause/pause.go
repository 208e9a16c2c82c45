// Package pause holds operators' pauses (`protctl pause`): the selectors
// of what a pause holds back, the stored entries, and the Store interface
// the engines read them through.
//
// An operator's pause holds back the work of one key,
// of the keys a glob pattern matches, or of a whole subscription, until
// `protctl resume` lifts it. It is state in the store, not in a node: a
// partition's next owner reads it before its first read, so a pause
// survives failover. docs/decisions/0045-pause.md explains the design.
//
// It is not the back-off after a systemic failure (runtime.BackOffEvent,
// runtime.NodeStatus.BackingOff): that one is the runtime's own and ends
// by itself; a pause is an operator's and ends only on resume. "Paused"
// means this one only, in every report (runtime.NodeStatus.Paused, the
// protctl_partitions_paused metric, PAUSED in the CLI and dashboard).
package pause

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"
)

// Selector names what a pause entry holds back.
//
// The zero-value-free forms are:
//
//	"key:<K>"   one partition key (a Kafka aggregate)
//	"glob:<P>"  every key P matches (path.Match syntax), now and later
//	"all"       the whole subscription
type Selector string

// All is the selector of a whole-subscription pause.
const All Selector = "all"

// Key returns the selector of one key.
func Key(key string) Selector { return Selector("key:" + key) }

// Glob returns the selector of the keys pattern matches.
func Glob(pattern string) Selector { return Selector("glob:" + pattern) }

// ErrBadSelector is returned by Parse and the stores'
// Pause for a selector of none of the forms above, or a glob that
// path.Match rejects.
var ErrBadSelector = errors.New("runtime: bad pause selector")

// Parse validates s.
func Parse(s string) (Selector, error) {
	switch {
	case s == string(All):
		return All, nil
	case strings.HasPrefix(s, "key:") && len(s) > len("key:"):
		return Selector(s), nil
	case strings.HasPrefix(s, "glob:") && len(s) > len("glob:"):
		if _, err := path.Match(s[len("glob:"):], ""); err != nil {
			return "", fmt.Errorf("%w: %q: %v", ErrBadSelector, s, err)
		}
		return Selector(s), nil
	}
	return "", fmt.Errorf("%w: %q (want key:<K>, glob:<P> or all)", ErrBadSelector, s)
}

// Matches reports whether the selector holds back key.
func (s Selector) Matches(key string) bool {
	switch {
	case s == All:
		return true
	case strings.HasPrefix(string(s), "key:"):
		return string(s)[len("key:"):] == key
	case strings.HasPrefix(string(s), "glob:"):
		ok, _ := path.Match(string(s)[len("glob:"):], key)
		return ok
	}
	return false
}

// Entry is one pause entry: what it holds back and who asked, when, why
// (for display; the runtime reads only the selector).
type Entry struct {
	Selector Selector  `json:"selector"`
	By       string    `json:"by,omitempty"`
	At       time.Time `json:"at"`
	Reason   string    `json:"reason,omitempty"`
}

// Set is a subscription's pause entries, as read at once.
type Set []Entry

// Paused returns the entry that holds back key (the whole-subscription
// one first, then the key's own, then the first matching glob in
// selector order), and whether one does.
func (ps Set) Paused(key string) (Entry, bool) {
	var glob *Entry
	for i := range ps {
		p := &ps[i]
		switch {
		case p.Selector == All:
			return *p, true
		case p.Selector == Key(key):
			return *p, true
		case glob == nil && strings.HasPrefix(string(p.Selector), "glob:") && p.Selector.Matches(key):
			glob = p
		}
	}
	if glob != nil {
		return *glob, true
	}
	return Entry{}, false
}

// All reports whether the whole subscription is paused.
func (ps Set) All() bool {
	for _, p := range ps {
		if p.Selector == All {
			return true
		}
	}
	return false
}

// SameSelectors reports whether ps and other hold back the same selectors
// in the same order (both as stores return them: Sort), whoever set them
// and why: a runtime re-reading its pauses acts only when this changes.
func (ps Set) SameSelectors(other Set) bool {
	if len(ps) != len(other) {
		return false
	}
	for i := range ps {
		if ps[i].Selector != other[i].Selector {
			return false
		}
	}
	return true
}

// Sort orders entries by selector, the order stores return them in.
func Sort(ps Set) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].Selector < ps[j].Selector })
}

// Store stores operators' pauses, per (scope, subscription). The scope
// is "" for a Redis partitioned subscription (its name, the consumer
// group, is global) and the lease group for a Kafka topic subscription.
// Implementations are safe for concurrent use.
type Store interface {
	// ReadPauses returns subscription's entries sorted by selector; none
	// is an empty set, not an error.
	ReadPauses(ctx context.Context, scope, subscription string) (Set, error)
	// WatchPauses sends a signal on every change of subscription's
	// entries made after it returns, until ctx ends or a signal may have
	// been lost (the subscription broke); then it closes the channel, and
	// the reader watches again and re-reads. Signals are hints: a reader
	// also re-reads on its own period.
	WatchPauses(ctx context.Context, scope, subscription string) (<-chan struct{}, error)
}
