// Package enginetest holds the test helpers both engines' tests use
// (partitioned and topic): a lease event log that checks every lease
// ended exactly once, and a bounded wait on a channel.
package enginetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
)

// NewLeaseLog returns an empty log.
func NewLeaseLog() *LeaseLog { return &LeaseLog{events: map[string][]runtime.LeaseEvent{}} }

// LeaseLog records every lease event of every node.
type LeaseLog struct {
	mu     sync.Mutex
	events map[string][]runtime.LeaseEvent // node -> events in order
}

// Observer returns node's observer, which records its lease events.
func (l *LeaseLog) Observer(node string) *runtime.Observer {
	return &runtime.Observer{OnLease: func(e runtime.LeaseEvent) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.events[node] = append(l.events[node], e)
	}}
}

// Check fails unless each lease a node acquired (partition, generation)
// ended exactly once (released, lost or untrusted) after it was acquired,
// and no lease ended that was not acquired.
func (l *LeaseLog) Check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for node, evs := range l.events {
		open := map[string]bool{}
		ended := map[string]runtime.LeaseEventKind{}
		for _, e := range evs {
			id := fmt.Sprintf("partition %s generation %d", e.Partition, e.Generation)
			switch e.Kind {
			case runtime.LeaseAcquired:
				if open[id] || ended[id] != "" {
					t.Errorf("%s: %s acquired twice", node, id)
				}
				open[id] = true
			case runtime.LeaseReleased, runtime.LeaseLost, runtime.LeaseUntrusted:
				switch {
				case ended[id] != "":
					t.Errorf("%s: %s ended twice (%s, then %s)", node, id, ended[id], e.Kind)
				case !open[id]:
					t.Errorf("%s: %s %s without being acquired", node, id, e.Kind)
				}
				delete(open, id)
				ended[id] = e.Kind
			}
		}
		for id := range open {
			t.Errorf("%s: %s acquired and never ended", node, id)
		}
	}
}

// WaitClosed fails t unless c is closed within 10 seconds (what names
// it in the failure).
func WaitClosed(t testing.TB, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// SeqRange is [from, to]: the sequence numbers a test expects handled.
func SeqRange(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}
