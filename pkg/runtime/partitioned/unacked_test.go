package partitioned_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// A key with entries on two main lanes (two categories), one worker slot.
// Lane A's entry is handled (its ack left to ride on lane A's next read),
// then lane B's read waits for the slot, which another key's handler
// holds; a graceful Stop arrives meanwhile. take() releases the lease
// without flushing lane A's acks: the entry handled successfully stays
// pending and the next owner handles it again.
func TestMemStopWhileWaitingForSlotAcksWhatWasHandled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cat2 = "shop::payment"
		e := newMemEnv(t)
		ctx := context.Background()
		var (
			mu      sync.Mutex
			handled = map[string]int{} // "cat/key/seq" -> calls
		)
		releaseA := make(chan struct{})
		releaseX := make(chan struct{})
		h := func(node string) runtime.Handler {
			return runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
				mu.Lock()
				handled[m.Category+"/"+m.Key+"/"+m.Position]++
				mu.Unlock()
				if node == "node-1" {
					switch {
					case m.Key == "k" && m.Category == cat:
						<-releaseA
					case m.Key == "x":
						<-releaseX
					}
				}
				return nil
			})
		}
		mutate := func(c *partitioned.Config) {
			c.Categories = []string{cat, cat2}
			c.Workers = 1
		}
		if _, err := e.pub.Publish(ctx, cat, "k", envelope("k", 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pub.Publish(ctx, cat2, "k", envelope("k", 2)); err != nil {
			t.Fatal(err)
		}
		n1 := e.start("node-1", h("node-1"), mutate, nil)
		synctest.Wait() // k's lane A handler is blocked, holding the slot
		if _, err := e.pub.Publish(ctx, cat, "x", envelope("x", 1)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait() // x read its entry and waits for the slot
		close(releaseA) // k finishes lane A, gives the slot to x, waits for it for lane B
		synctest.Wait()
		stopped := make(chan error, 1)
		go func() { stopped <- n1.Stop(ctx) }()
		synctest.Wait()
		close(releaseX)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		streamA := broker.ProteanLayout.Stream(cat, "k")
		pend, err := e.b.PendingEntries(ctx, streamA, group, 10)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("after a graceful stop, pending on %s: %+v; handled %v", streamA, pend, handled)

		e.nodes = nil
		e.start("node-2", h("node-2"), mutate, nil)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		e.stopAll()
		mu.Lock()
		defer mu.Unlock()
		for k, n := range handled {
			if n > 1 {
				t.Errorf("%s handled %d times (successfully, graceful stop in between)", k, n)
			}
		}
	})
}

// The same hole through yieldSlot (a backlog's worker gives its slot to a
// waiting worker between two rounds, its last batch's acks left to ride
// on the next read): a Stop while it queues for the slot again releases
// the lease with that batch unacked.
func TestMemStopDuringYieldAcksWhatWasHandled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEnv(t)
		ctx := context.Background()
		var (
			mu      sync.Mutex
			handled = map[string]int{}
		)
		releaseX := make(chan struct{})
		xIn := make(chan struct{}, 1)
		h := func(node string) runtime.Handler {
			return runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
				mu.Lock()
				handled[m.Key+"/"+m.Position]++
				mu.Unlock()
				if node == "node-1" {
					switch m.Key {
					case "k":
						time.Sleep(20 * time.Millisecond)
					case "x":
						select {
						case xIn <- struct{}{}:
						default:
						}
						<-releaseX
					}
				}
				return nil
			})
		}
		mutate := func(c *partitioned.Config) { c.Workers = 1; c.BatchSize = 16 }
		for i := 1; i <= 60; i++ {
			if _, err := e.pub.Publish(ctx, cat, "k", envelope("k", i)); err != nil {
				t.Fatal(err)
			}
		}
		n1 := e.start("node-1", h("node-1"), mutate, nil)
		time.Sleep(30 * time.Millisecond) // k holds the slot on its backlog
		if _, err := e.pub.Publish(ctx, cat, "x", envelope("x", 1)); err != nil {
			t.Fatal(err)
		}
		<-xIn // k yielded its slot to x
		synctest.Wait()
		stopped := make(chan error, 1)
		go func() { stopped <- n1.Stop(ctx) }()
		synctest.Wait()
		close(releaseX)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		e.nodes = nil
		e.start("node-2", h("node-2"), mutate, nil)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		e.stopAll()
		mu.Lock()
		defer mu.Unlock()
		dup := 0
		for _, n := range handled {
			if n > 1 {
				dup++
			}
		}
		if dup > 0 {
			t.Errorf("%d entries handled twice across a graceful stop", dup)
		}
	})
}
