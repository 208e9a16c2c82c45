package brokertest

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

func errorsAs(err error, target any) bool { return errors.As(err, target) }

var raceCases = []Case{
	{"ConcurrentAcquirersGetOneLease", func(t *testing.T, s *Suite) {
		var winners atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, ok, err := s.B.AcquirePartitionLease(s.Ctx, s.L.LeaseKey(group, key), s.L.GenerationKey(group, key), "node-"+itoa(i), long)
				if err != nil {
					t.Error(err)
				}
				if ok {
					winners.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := winners.Load(); n != 1 {
			t.Fatalf("%d concurrent acquirers won, want exactly 1", n)
		}
		if g, _, _ := s.faults.GetString(s.Ctx, s.L.GenerationKey(group, key)); g != "1" {
			t.Fatalf("generation = %s after one grant", g)
		}
	}},
	{"PublishersRacingReapsLoseNothing", func(t *testing.T, s *Suite) {
		testPublishersRacingMaintenance(t, s, func(k string) error {
			_, err := s.B.ReapPartition(s.Ctx, cat, k, 0, "")
			return err
		})
	}},
	{"PublishersRacingTrimsLoseNothing", func(t *testing.T, s *Suite) {
		testPublishersRacingMaintenance(t, s, func(k string) error {
			if _, err := s.B.Trim(s.Ctx, s.stream(k), 1); err != nil {
				return err
			}
			_, err := s.B.Trim(s.Ctx, s.backfill(k), 1)
			return err
		})
	}},
}

// testPublishersRacingMaintenance runs publishers on both lanes of a few
// keys, two consumer groups (one slow) draining them under leases, and a
// maintainer calling maintain on every key in a loop. Whatever the
// interleaving, every group must receive every published entry, in order
// per lane, and no non-empty stream may be left outside the index.
func testPublishersRacingMaintenance(t *testing.T, s *Suite, maintain func(k string) error) {
	const (
		publishers = 3
		perPub     = 60
	)
	keys := []string{"k0", "k1", "k2", "k3"}
	groups := []string{group, "slow.Group"}
	for _, g := range groups {
		if err := s.B.RegisterGroup(s.Ctx, cat, g); err != nil {
			t.Fatal(err)
		}
	}
	type lane struct{ key, stream string }
	var lanes []lane
	for _, k := range keys {
		lanes = append(lanes, lane{k, s.stream(k)}, lane{k, s.backfill(k)})
	}

	var maintained atomic.Int64
	var mu sync.Mutex
	published := map[string][]string{} // stream -> ids in publish order
	var pubWG sync.WaitGroup
	for p := 0; p < publishers; p++ {
		pubWG.Add(1)
		go func() {
			defer pubWG.Done()
			for i := 0; i < perPub; i++ {
				if i%10 == 0 {
					// Let the maintainer run between bursts: an in-memory
					// broker is fast enough to finish before it starts.
					waitForProgress(&maintained)
				}
				k := keys[(p+i)%len(keys)]
				ln, st := "", s.stream(k)
				if i%3 == 0 {
					ln, st = broker.DefaultBackfillSuffix, s.backfill(k)
				}
				// Hold the lock across the publish so the recorded order per
				// stream is the append order.
				mu.Lock()
				id, err := s.B.PublishPartitioned(s.Ctx, cat, k, ln, payload(k, i))
				if err == nil {
					published[st] = append(published[st], id)
				}
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}

	received := map[string]map[string][]string{} // group -> stream -> ids
	for _, g := range groups {
		received[g] = map[string][]string{}
	}
	fences := map[string]broker.Fence{}
	for _, g := range groups {
		for _, k := range keys {
			l, ok, err := s.B.AcquirePartitionLease(s.Ctx, s.L.LeaseKey(g, k), s.L.GenerationKey(g, k), owner, long)
			if err != nil || !ok {
				t.Fatalf("acquire: %v %v", ok, err)
			}
			fences[g+"/"+k] = l.Fence
		}
	}
	consume := func(g string, count int64) int {
		n := 0
		for _, ln := range lanes {
			f := fences[g+"/"+ln.key]
			msgs, err := s.B.ReadPartitionFenced(s.Ctx, f, ln.stream, g, count, broker.ReadPendingThenNew)
			if err != nil {
				t.Errorf("read: %v", err)
				return n
			}
			for _, m := range msgs {
				if m.Missing {
					t.Errorf("group %s: body of %s on %s deleted while pending", g, m.ID, ln.stream)
				}
			}
			if len(msgs) > 0 {
				if _, err := s.B.AckPartitionFenced(s.Ctx, f, ln.stream, g, ids(msgs)...); err != nil {
					t.Errorf("ack: %v", err)
					return n
				}
			}
			received[g][ln.stream] = append(received[g][ln.stream], ids(msgs)...)
			n += len(msgs)
		}
		return n
	}

	done := make(chan struct{})
	var bgWG sync.WaitGroup
	bgWG.Add(1)
	go func() { // maintainer
		defer bgWG.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			for _, k := range keys {
				if err := maintain(k); err != nil {
					t.Errorf("maintain %s: %v", k, err)
					return
				}
				maintained.Add(1)
			}
		}
	}()
	for _, g := range groups {
		bgWG.Add(1)
		go func() { // consumers; the slow group reads one entry at a time
			defer bgWG.Done()
			count := int64(20)
			if g != group {
				count = 1
			}
			for {
				select {
				case <-done:
					return
				default:
				}
				consume(g, count)
			}
		}()
	}
	pubWG.Wait()
	close(done)
	bgWG.Wait()
	if t.Failed() {
		return
	}
	// Quiescent: drain what is left, then one last maintenance pass.
	for _, g := range groups {
		for consume(g, 100) > 0 {
		}
	}
	for _, k := range keys {
		if err := maintain(k); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range groups {
		for st, want := range published {
			if got := received[g][st]; !slices.Equal(got, want) {
				t.Fatalf("group %s on %s received %d entries %v, published %d %v", g, st, len(got), got, len(want), want)
			}
		}
	}
	index := s.keys(t)
	for _, ln := range lanes {
		if s.streamLen(t, ln.stream) > 0 && !slices.Contains(index, ln.key) {
			t.Fatalf("non-empty %s is not in the index %v", ln.stream, index)
		}
	}
	if maintained.Load() == 0 {
		t.Fatal("maintenance never ran")
	}
}

// waitForProgress waits, for a bounded time, until counter moves.
func waitForProgress(counter *atomic.Int64) {
	start := counter.Load()
	deadline := time.Now().Add(2 * time.Second)
	for counter.Load() == start && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
}
