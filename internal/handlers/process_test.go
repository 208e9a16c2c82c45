package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// syncBuffer is a log destination safe for the handler's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newProcess(t *testing.T, mode string, mutate func(*handlers.ProcessConfig)) (*handlers.Process, *syncBuffer, string) {
	t.Helper()
	cmd, env := childCommand(t, mode)
	rec := filepath.Join(t.TempDir(), "requests.jsonl")
	env["CHILD_RECORD"] = rec
	logs := &syncBuffer{}
	cfg := handlers.ProcessConfig{
		Command: cmd, Env: env, Timeout: 20 * time.Second, RestartBackoff: 50 * time.Millisecond, MaxRestartBackoff: 200 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := handlers.NewProcess(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.Close(ctx)
		if t.Failed() {
			t.Logf("handler logs:\n%s", logs.String())
		}
	})
	return p, logs, rec
}

func withData(data []byte) runtime.Message {
	m := msg
	m.Data = data
	return m
}

// One child serves every call: the envelope and the metadata arrive as
// documented, calls in flight at once are answered out of order, and
// ok, error and retry map to success, an aggregate failure and a
// systemic one.
func TestNodeHandlerProcessProtocol(t *testing.T) {
	p, _, rec := newProcess(t, "serve", nil)
	ctx := context.Background()
	cases := []struct {
		o     childOrder
		ok    bool
		class runtime.FailureClass
	}{
		{childOrder{}, true, 0},
		{childOrder{Do: "error"}, false, runtime.FailAggregate},
		{childOrder{Do: "retry"}, false, runtime.FailSystemic},
	}
	for _, tc := range cases {
		err := p.Handle(ctx, withData(order(tc.o)))
		if tc.ok != (err == nil) || (err != nil && runtime.Classify(err) != tc.class) {
			t.Errorf("%q: %v (%s), want ok=%v class %s", tc.o.Do, err, runtime.Classify(err), tc.ok, tc.class)
		}
		if err != nil && !strings.Contains(err.Error(), "told to "+tc.o.Do) {
			t.Errorf("%q: error %q lacks the child's message", tc.o.Do, err)
		}
	}
	// 20 calls at once, the first answered last.
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.Handle(ctx, withData(order(childOrder{SleepMS: 10 * (20 - i)})))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	// An envelope that is not JSON travels in base64.
	if err := p.Handle(ctx, withData([]byte("not json\n"))); err != nil {
		t.Fatal(err)
	}
	if n := p.Starts(); n != 1 {
		t.Errorf("%d children started, want 1", n)
	}
	reqs := recorded(t, rec)
	if len(reqs) != 3+20+1 {
		t.Fatalf("the child read %d requests, want 24", len(reqs))
	}
	first := reqs[0]
	want := map[string]any{
		"subscription": "projector", "partition": "k1", "position": "1700000000000-3", "generation": float64(42),
		"attempt": float64(2), "source": "redis", "category": "shop::order", "stream": "shop::order:k1", "key": "k1", "aggregate": "k1",
	}
	for k, v := range want {
		if first.Metadata[k] != v {
			t.Errorf("metadata %s = %#v, want %#v", k, first.Metadata[k], v)
		}
	}
	var sent, got any
	_ = json.Unmarshal(order(childOrder{}), &sent)
	_ = json.Unmarshal(first.Envelope, &got)
	if fmt.Sprint(sent) != fmt.Sprint(got) {
		t.Errorf("envelope %s, want %s", first.Envelope, order(childOrder{}))
	}
	ids := map[uint64]bool{}
	for _, r := range reqs {
		if ids[r.ID] {
			t.Errorf("id %d sent twice", r.ID)
		}
		ids[r.ID] = true
	}
	if last := reqs[len(reqs)-1]; string(last.EnvelopeBase64) != "not json\n" || last.Envelope != nil {
		t.Errorf("a non-JSON envelope arrived as %s / %q", last.Envelope, last.EnvelopeBase64)
	}
}

// A child that dies fails the calls it had in flight as systemic, never
// as the messages' fault; its stderr is logged at warn; the next call
// after the backoff runs on a new child.
func TestNodeHandlerProcessDeathIsSystemicAndRestarts(t *testing.T) {
	p, logs, rec := newProcess(t, "serve", nil)
	ctx := context.Background()
	if err := p.Handle(ctx, withData(order(childOrder{}))); err != nil {
		t.Fatal(err)
	}
	// Three calls in flight (slow), then one that kills the child.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.Handle(ctx, withData(order(childOrder{SleepMS: 10_000})))
		}()
	}
	testenv.Eventually(t, 30*time.Second, "the child to read the slow calls", func() (bool, string) {
		n := len(recorded(t, rec))
		return n == 4, fmt.Sprintf("%d of 4 read", n)
	})
	err := p.Handle(ctx, withData(order(childOrder{Do: "crash", Stderr: "panic: the printer is on fire"})))
	wg.Wait()
	for i, e := range append(errs, err) {
		if e == nil || runtime.Classify(e) != runtime.FailSystemic || !strings.Contains(e.Error(), "exit status 3") {
			t.Errorf("call %d in flight at the death: %v (%s), want systemic naming the exit", i, e, runtime.Classify(e))
		}
	}
	// Restarted after the backoff (calls meanwhile fail as systemic).
	testenv.Eventually(t, 30*time.Second, "a restart", func() (bool, string) {
		err := p.Handle(ctx, withData(order(childOrder{})))
		if err != nil && runtime.Classify(err) != runtime.FailSystemic {
			t.Fatalf("a call while the child restarts: %v (%s)", err, runtime.Classify(err))
		}
		return err == nil, fmt.Sprint(err)
	})
	if n := p.Starts(); n != 2 {
		t.Errorf("%d starts, want 2", n)
	}
	l := logs.String()
	for _, want := range []string{`"msg":"process handler stderr"`, `"line":"panic: the printer is on fire"`, `"msg":"process handler exited"`, `"level":"WARN"`} {
		if !strings.Contains(l, want) {
			t.Errorf("logs lack %s:\n%s", want, l)
		}
	}
}

// A child that breaks the protocol is killed and restarted; its calls
// fail as systemic.
func TestNodeHandlerProcessGarbageIsSystemic(t *testing.T) {
	p, _, _ := newProcess(t, "serve", nil)
	err := p.Handle(context.Background(), withData(order(childOrder{Do: "garbage"})))
	if err == nil || runtime.Classify(err) != runtime.FailSystemic || !strings.Contains(err.Error(), "not a result") {
		t.Fatalf("garbage: %v (%s)", err, runtime.Classify(err))
	}
}

// A child that answered before and then answers nothing for a whole
// timeout is stuck: systemic, killed and restarted. A child still
// starting is given time: systemic, not killed. A call left unanswered
// while the child answers others is the message's: an aggregate failure.
func TestNodeHandlerProcessTimeouts(t *testing.T) {
	p, _, _ := newProcess(t, "serve", func(c *handlers.ProcessConfig) { c.Timeout = 5 * time.Second })
	ctx := context.Background()
	// The child reads requests only after its start; under load that can
	// take longer than a timeout, so wait for its first answer.
	testenv.Eventually(t, 60*time.Second, "the child's first answer", func() (bool, string) {
		err := p.Handle(ctx, withData(order(childOrder{})))
		return err == nil, fmt.Sprint(err)
	})
	err := p.Handle(ctx, withData(order(childOrder{Do: "hang"})))
	if err == nil || runtime.Classify(err) != runtime.FailSystemic || !strings.Contains(err.Error(), "answered no call") {
		t.Fatalf("stuck child: %v (%s)", err, runtime.Classify(err))
	}
	starts := p.Starts()
	testenv.Eventually(t, 60*time.Second, "a new child", func() (bool, string) {
		err := p.Handle(ctx, withData(order(childOrder{})))
		return err == nil, fmt.Sprint(err)
	})
	if n := p.Starts(); n != starts+1 {
		t.Errorf("%d starts after the kill, want %d (the stuck child killed, one restart)", n, starts+1)
	}
	stop := make(chan struct{})
	var others sync.WaitGroup
	others.Add(1)
	go func() {
		defer others.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = p.Handle(ctx, withData(order(childOrder{SleepMS: 20})))
		}
	}()
	err = p.Handle(ctx, withData(order(childOrder{Do: "hang"})))
	close(stop)
	others.Wait()
	if err == nil || runtime.Classify(err) != runtime.FailAggregate || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("one slow message: %v (%s), want an aggregate failure", err, runtime.Classify(err))
	}
}

// A command that exits at once is retried with a growing backoff, each
// failure systemic.
func TestNodeHandlerProcessStartFailureBacksOff(t *testing.T) {
	p, logs, _ := newProcess(t, "exit-at-start", nil)
	ctx := context.Background()
	testenv.Eventually(t, 30*time.Second, "3 starts", func() (bool, string) {
		if p.Starts() >= 3 {
			return true, ""
		}
		err := p.Handle(ctx, withData(order(childOrder{})))
		if err == nil || runtime.Classify(err) != runtime.FailSystemic {
			t.Fatalf("call to a dying child: %v (%s)", err, runtime.Classify(err))
		}
		return false, fmt.Sprintf("%d starts", p.Starts())
	})
	if !strings.Contains(logs.String(), "cannot connect to the database") {
		t.Errorf("the child's stderr is not logged:\n%s", logs.String())
	}
}

// The restart backoff doubles per exit up to its cap, with jitter in the
// upper half; two nodes' sources give different waits.
func TestNodeHandlerProcessRestartDelay(t *testing.T) {
	a, b := rand.New(rand.NewPCG(1, 1)), rand.New(rand.NewPCG(2, 2))
	differ := false
	for exits := 1; exits <= 12; exits++ {
		base := min(100*time.Millisecond<<(exits-1), 2*time.Second)
		da := handlers.RestartDelay(exits, 100*time.Millisecond, 2*time.Second, a)
		db := handlers.RestartDelay(exits, 100*time.Millisecond, 2*time.Second, b)
		for _, d := range []time.Duration{da, db} {
			if d < base/2 || d > base {
				t.Errorf("exit %d: wait %s outside [%s, %s]", exits, d, base/2, base)
			}
		}
		differ = differ || da != db
	}
	if !differ {
		t.Error("two sources gave the same waits: no jitter")
	}
}

// Close closes the child's stdin and waits for it to exit; a child that
// ignores the end of its input is killed after StopTimeout.
func TestNodeHandlerProcessClose(t *testing.T) {
	ctx := context.Background()
	p, _, _ := newProcess(t, "serve", nil)
	if err := p.Handle(ctx, withData(order(childOrder{}))); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := p.Handle(ctx, withData(order(childOrder{}))); err == nil || runtime.Classify(err) != runtime.FailSystemic {
		t.Fatalf("a call after Close: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}

	stubborn, logs, _ := newProcess(t, "ignore-eof", func(c *handlers.ProcessConfig) { c.StopTimeout = 300 * time.Millisecond })
	if err := stubborn.Handle(ctx, withData(order(childOrder{}))); err != nil {
		t.Fatal(err)
	}
	pid := childPID(t, logs.String())
	if err := stubborn.Close(ctx); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("close of a child that ignores EOF: %v", err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("child %d still runs after Close", pid)
	}
}

func childPID(t *testing.T, logs string) int {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		var rec struct {
			Msg string `json:"msg"`
			PID int    `json:"pid"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "process handler started" {
			return rec.PID
		}
	}
	t.Fatalf("no start logged:\n%s", logs)
	return 0
}

// Through the runtime (memory broker, a real node): a child that dies
// mid-run with calls in flight parks nothing: every event of every
// aggregate is handled, in order, and every failure was systemic.
func TestNodeHandlerProcessDeathParksNoAggregate(t *testing.T) {
	const keys, perKey = 8, 15
	p, _, _ := newProcess(t, "serve", nil)
	var mu sync.Mutex
	seen := map[string][]int{}
	var parked, aggregate, systemic atomic.Int64
	h := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
		err := p.Handle(ctx, m)
		if err == nil {
			var env struct {
				Data struct {
					Seq int `json:"seq"`
				} `json:"data"`
			}
			_ = json.Unmarshal(m.Data, &env)
			mu.Lock()
			seen[m.Key] = append(seen[m.Key], env.Data.Seq)
			mu.Unlock()
		}
		return err
	})
	obs := &runtime.Observer{
		OnHandled: func(e runtime.HandledEvent) {
			if e.Err != nil && e.Class == runtime.FailSystemic {
				systemic.Add(1)
			} else if e.Err != nil {
				aggregate.Add(1)
			}
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
	for seq := 1; seq <= perKey; seq++ {
		for k := 0; k < keys; k++ {
			o := map[string]any{"seq": seq, "sleepMs": 5}
			if k == 3 && seq == 7 {
				// Kills the child on its first delivery, with the other
				// keys' calls in flight.
				o["do"], o["attempt"], o["sleepMs"] = "crash", 1, 50
			}
			env, _ := json.Marshal(map[string]any{"data": o})
			if _, err := pub.Publish(ctx, "shop::order", fmt.Sprintf("k%d", k), env); err != nil {
				t.Fatal(err)
			}
		}
	}
	sub, err := partitioned.New(partitioned.Config{
		Name: "projector", Categories: []string{"shop::order"}, Handler: h, Broker: b, Ledger: store,
		LeaseTTL: 30 * time.Second, RenewEvery: time.Second, BatchSize: 5, Workers: keys,
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
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		c := 0
		for _, s := range seen {
			c += len(s)
		}
		return c
	}
	testenv.Eventually(t, 120*time.Second, "every event handled", func() (bool, string) {
		n := total()
		return n >= keys*perKey || parked.Load() > 0, fmt.Sprintf("%d of %d handled, %d parked", n, keys*perKey, parked.Load())
	})
	if parked.Load() > 0 || aggregate.Load() > 0 {
		t.Fatalf("%d parked, %d aggregate failures", parked.Load(), aggregate.Load())
	}
	if systemic.Load() == 0 || p.Starts() < 2 {
		t.Fatalf("the child never died (systemic failures %d, starts %d)", systemic.Load(), p.Starts())
	}
	mu.Lock()
	defer mu.Unlock()
	for k, s := range seen {
		for i, seq := range s {
			if seq != i+1 {
				t.Fatalf("%s handled %v, want 1..%d in order, once each", k, s, perKey)
			}
		}
	}
}

// A call whose lease stops being trusted while it waits for an in-flight
// slot sends nothing to the child once it gets the slot (as the exec
// handler's: TestNodeHandlerExecLeaseLostWhileQueued).
func TestNodeHandlerProcessLeaseLostWhileQueued(t *testing.T) {
	p, _, rec := newProcess(t, "serve", func(c *handlers.ProcessConfig) { c.MaxInFlight = 1 })
	first := make(chan error, 1)
	fctx, stopFirst := context.WithCancel(context.Background())
	defer stopFirst()
	go func() { first <- p.Handle(fctx, withData(order(childOrder{Do: "hang"}))) }()
	testenv.Eventually(t, 30*time.Second, "the first call to take the slot", func() (bool, string) {
		s := p.InFlight().Stats()
		return s.Running == 1, fmt.Sprintf("%+v", s)
	})
	var trusted atomic.Bool
	trusted.Store(true)
	ctx := runtime.WithLeaseCheck(context.Background(), trusted.Load)
	done := make(chan error, 1)
	go func() {
		m := withData(order(childOrder{}))
		m.Position = "queued"
		done <- p.Handle(ctx, m)
	}()
	testenv.Eventually(t, 30*time.Second, "the second call to wait", func() (bool, string) {
		s := p.InFlight().Stats()
		return s.Waiting == 1, fmt.Sprintf("%+v", s)
	})
	trusted.Store(false)
	stopFirst() // the slot frees; the waiting call takes it
	<-first
	err := <-done
	if err == nil || runtime.Classify(err) != runtime.FailSystemic || !strings.Contains(err.Error(), "no longer trusted") {
		t.Fatalf("lease lost while queued: %v (%s)", err, runtime.Classify(err))
	}
	b, _ := os.ReadFile(rec)
	if strings.Contains(string(b), "queued") {
		t.Fatalf("the child got the call made under a lease no longer trusted:\n%s", b)
	}
}
