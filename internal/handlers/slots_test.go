package handlers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/handlers"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// More aggregates in flight than the node's exec bound, through the
// runtime (the memory broker, a real node): at most the bound of commands
// run at once, the rest wait for a slot, and the wait is not counted
// against the handler's timeout: every event is handled on its first
// attempt, none times out, nothing is parked. The queued calls wait up to
// about (events x run time / bound) = 24 x 0.5s / 2 = 6s, twice the 3s
// timeout, so a timeout that counted the wait would fail them.
func TestNodeHandlerExecBoundQueuesAggregatesWithoutTimeouts(t *testing.T) {
	const (
		keys   = 12
		perKey = 2
		bound  = 2
	)
	dir := t.TempDir()
	log := filepath.Join(dir, "runs.log")
	sh := script(t, `echo "start $PROTCTL_PARTITION" >> "$LOG"
sleep 0.5
echo "end $PROTCTL_PARTITION" >> "$LOG"
`)
	var waited atomic.Int64
	slots := handlers.NewSlots(bound, func(d time.Duration) {
		if d > 0 {
			waited.Add(1)
		}
	})
	h := newExec(t, handlers.ExecConfig{Command: []string{sh}, Env: map[string]string{"LOG": log}, Timeout: 3 * time.Second, Slots: slots})

	var mu sync.Mutex
	var failures []string
	var handled, parked atomic.Int64
	obs := &runtime.Observer{
		OnHandled: func(e runtime.HandledEvent) {
			if e.Err != nil {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%s %s attempt %d: %s: %v", e.Partition, e.Position, e.Attempt, e.Class, e.Err))
				mu.Unlock()
				return
			}
			handled.Add(1)
		},
		OnParked: func(ledger.Parked) { parked.Add(1) },
	}
	b := memorybroker.New()
	store := memstore.New(b.Faults())
	pub, err := partitioned.NewPublisher(b)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < keys; i++ {
		for j := 0; j < perKey; j++ {
			if _, err := pub.Publish(ctx, "shop::order", fmt.Sprintf("k%02d", i), []byte(`{"data":{}}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	sub, err := partitioned.New(partitioned.Config{
		Name: "projector", Categories: []string{"shop::order"}, Handler: h, Broker: b, Ledger: store,
		LeaseTTL: 30 * time.Second, RenewEvery: time.Second, BatchSize: 10, Workers: keys,
		Retry: runtime.RetryPolicy{Attempts: 1, Backoff: 10 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	n, err := runtime.NewNode(runtime.NodeConfig{Service: "shop", NodeID: "n1", Membership: store, Observer: obs}, sub)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = n.Stop(sctx)
	}()
	testenv.Eventually(t, 90*time.Second, "every event handled", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return handled.Load() == keys*perKey || len(failures) > 0 || parked.Load() > 0,
			fmt.Sprintf("%d of %d handled, %d failures, %d parked", handled.Load(), keys*perKey, len(failures), parked.Load())
	})
	mu.Lock()
	defer mu.Unlock()
	if len(failures) > 0 || parked.Load() > 0 {
		t.Fatalf("%d parked, failures:\n%s", parked.Load(), strings.Join(failures, "\n"))
	}
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	running, most := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if strings.HasPrefix(line, "start ") {
			running++
		} else {
			running--
		}
		most = max(most, running)
	}
	if most > bound {
		t.Errorf("%d commands ran at once, the bound is %d:\n%s", most, bound, raw)
	}
	if waited.Load() == 0 {
		t.Error("no call waited for a slot: the test did not put more aggregates in flight than the bound")
	}
	if st := slots.Stats(); st.Running != 0 || st.Waiting != 0 || st.Size != bound {
		t.Errorf("slots after the run: %+v", st)
	}
}

// A run that times out while calls wait for a slot ran on an overloaded
// node: systemic (pause and retry), never an aggregate failure that would
// park its aggregate. The same timeout with no call waiting stays an
// aggregate failure (TestNodeHandlerExecTimeoutKillsProcessGroup).
func TestNodeHandlerExecOverloadTimeoutIsSystemic(t *testing.T) {
	sh := script(t, `[ "$PROTCTL_POSITION" = hang ] && exec sleep 60
exit 0
`)
	slots := handlers.NewSlots(1, nil)
	h := newExec(t, handlers.ExecConfig{Command: []string{sh}, Timeout: 3 * time.Second, Slots: slots})
	hang, quick := msg, msg
	hang.Position, quick.Position = "hang", "quick"
	first := make(chan error, 1)
	go func() { first <- h.Handle(context.Background(), hang) }()
	testenv.Eventually(t, 30*time.Second, "the first run to take the slot", func() (bool, string) {
		s := slots.Stats()
		return s.Running == 1, fmt.Sprintf("%+v", s)
	})
	second := make(chan error, 1)
	go func() { second <- h.Handle(context.Background(), quick) }()
	testenv.Eventually(t, 30*time.Second, "the second call to wait", func() (bool, string) {
		s := slots.Stats()
		return s.Waiting == 1, fmt.Sprintf("%+v", s)
	})
	err := <-first
	if err == nil || runtime.Classify(err) != runtime.FailSystemic || !strings.Contains(err.Error(), "overloaded") {
		t.Fatalf("timeout on a full node: %v (%s), want a systemic overload", err, runtime.Classify(err))
	}
	if err := <-second; err != nil {
		t.Fatalf("the queued call: %v", err)
	}
	// Alone on the node, the same timeout is the message's.
	err = h.Handle(context.Background(), hang)
	if err == nil || runtime.Classify(err) != runtime.FailAggregate || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("timeout alone: %v (%s), want an aggregate failure", err, runtime.Classify(err))
	}
}

// queuedExec is an exec handler with one slot, held by a run that hangs
// until stopHang, and the call that queues behind it: ctx is its context;
// done gets its result. ran says whether its command ran.
type queuedExec struct {
	slots    *handlers.Slots
	stopHang func()
	hangDone chan error
	done     chan error
	ran      func() bool
}

func queueBehindAHang(t *testing.T, ctx context.Context) queuedExec {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "ran")
	sh := script(t, `[ "$PROTCTL_POSITION" = hang ] && exec sleep 60
touch "$MARK"
`)
	q := queuedExec{slots: handlers.NewSlots(1, nil), hangDone: make(chan error, 1), done: make(chan error, 1)}
	h := newExec(t, handlers.ExecConfig{Command: []string{sh}, Env: map[string]string{"MARK": marker}, Timeout: time.Minute, Slots: q.slots})
	hang := msg
	hang.Position = "hang"
	hctx, stopHang := context.WithCancel(context.Background())
	t.Cleanup(stopHang)
	q.stopHang = stopHang
	go func() { q.hangDone <- h.Handle(hctx, hang) }()
	testenv.Eventually(t, 30*time.Second, "the first run to take the slot", func() (bool, string) {
		s := q.slots.Stats()
		return s.Running == 1, fmt.Sprintf("%+v", s)
	})
	go func() { q.done <- h.Handle(ctx, msg) }()
	testenv.Eventually(t, 30*time.Second, "the second call to wait", func() (bool, string) {
		s := q.slots.Stats()
		return s.Waiting == 1, fmt.Sprintf("%+v", s)
	})
	q.ran = func() bool {
		_, err := os.Stat(marker)
		return err == nil
	}
	return q
}

// A call stopped while it waits for a slot starts nothing and is not the
// message's fault.
func TestNodeHandlerExecStoppedWhileQueued(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	q := queueBehindAHang(t, ctx)
	cancel()
	err := <-q.done
	if err == nil || runtime.Classify(err) != runtime.FailSystemic {
		t.Fatalf("stopped while queued: %v (%s)", err, runtime.Classify(err))
	}
	if q.ran() {
		t.Fatal("the stopped call ran its command")
	}
	if st := q.slots.Stats(); st.Waiting != 0 {
		t.Fatalf("still waiting: %+v", st)
	}
}

// A call whose lease stops being trusted while it waits for a slot (the
// node stopped in the wait, say) starts nothing once it gets the slot:
// the runtime checked the lease before the call, and another node may be
// handling the message by then. It is a systemic failure, not the
// message's.
func TestNodeHandlerExecLeaseLostWhileQueued(t *testing.T) {
	var trusted atomic.Bool
	trusted.Store(true)
	q := queueBehindAHang(t, runtime.WithLeaseCheck(context.Background(), trusted.Load))
	trusted.Store(false)
	q.stopHang() // the slot frees; the waiting call takes it
	<-q.hangDone
	err := <-q.done
	if err == nil || runtime.Classify(err) != runtime.FailSystemic || !strings.Contains(err.Error(), "no longer trusted") {
		t.Fatalf("lease lost while queued: %v (%s)", err, runtime.Classify(err))
	}
	if q.ran() {
		t.Fatal("the call ran its command under a lease no longer trusted")
	}
}
