package partitioned_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

const (
	service = "shop"
	group   = "app.handlers.OrderProjector"
	cat     = "shop::order"
)

// envelope is a minimal Protean envelope carrying a per-key sequence
// number, so that handlers can check order.
func envelope(key string, seq int) []byte {
	b, _ := json.Marshal(map[string]any{
		"data":     map[string]any{"seq": seq, "key": key},
		"metadata": map[string]any{"headers": map[string]any{"id": key + "-" + strconv.Itoa(seq), "type": "Test"}},
	})
	return b
}

func seqOf(t testing.TB, data []byte) int {
	var env struct {
		Data struct {
			Seq int `json:"seq"`
		} `json:"data"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		t.Errorf("bad envelope %q: %v", data, err)
	}
	return env.Data.Seq
}

// recorder is a test handler: it records, per key, the sequence numbers it
// handled successfully and by which node, and detects two nodes (or two
// goroutines) inside the handler for the same key at once.
type recorder struct {
	t testing.TB

	mu      sync.Mutex
	seqs    map[string][]int
	nodes   map[string][]string
	inside  map[string]*atomic.Int32
	overlap atomic.Int32
	calls   atomic.Int64

	// fail, when set, decides a message's fate (nil: success).
	fail atomic.Pointer[func(m runtime.Message) error]
	// hold, when set, is called inside the handler (e.g. to block).
	hold atomic.Pointer[func(ctx context.Context, m runtime.Message)]
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{t: t, seqs: map[string][]int{}, nodes: map[string][]string{}, inside: map[string]*atomic.Int32{}}
}

func (r *recorder) counter(key string) *atomic.Int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.inside[key]
	if c == nil {
		c = new(atomic.Int32)
		r.inside[key] = c
	}
	return c
}

// handler returns the handler for node.
func (r *recorder) handler(node string) runtime.Handler {
	return runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
		r.calls.Add(1)
		in := r.counter(m.Key)
		if in.Add(1) > 1 {
			r.overlap.Add(1)
			r.t.Errorf("two handlers inside key %s at once (node %s, entry %s)", m.Key, node, m.Position)
		}
		defer in.Add(-1)
		if h := r.hold.Load(); h != nil {
			(*h)(ctx, m)
		}
		if f := r.fail.Load(); f != nil {
			if err := (*f)(m); err != nil {
				return err
			}
		}
		seq := seqOf(r.t, m.Data)
		r.mu.Lock()
		r.seqs[m.Key] = append(r.seqs[m.Key], seq)
		r.nodes[m.Key] = append(r.nodes[m.Key], node)
		r.mu.Unlock()
		return nil
	})
}

func (r *recorder) setFail(f func(m runtime.Message) error) {
	if f == nil {
		r.fail.Store(nil)
		return
	}
	r.fail.Store(&f)
}

func (r *recorder) setHold(f func(ctx context.Context, m runtime.Message)) {
	if f == nil {
		r.hold.Store(nil)
		return
	}
	r.hold.Store(&f)
}

func (r *recorder) handled(key string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs[key])
}

// complete reports whether every key has handled 1..n[key].
func (r *recorder) complete(want map[string]int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, n := range want {
		s := r.seqs[k]
		if len(s) == 0 || slices.Max(s) < n {
			return false
		}
		seen := map[int]bool{}
		for _, v := range s {
			seen[v] = true
		}
		if len(seen) < n {
			return false
		}
	}
	return true
}

// checkOrder fails t unless every key's handled sequence is 1..n in order,
// allowing only redelivery (a step back to an earlier entry, followed by
// consecutive entries), never a gap.
func (r *recorder) checkOrder(t testing.TB, want map[string]int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := orderErr(r.seqs[k], want[k]); err != nil {
			t.Errorf("key %s: %v (handled %v by %v)", k, err, r.seqs[k], r.nodes[k])
		}
	}
	if n := r.overlap.Load(); n > 0 {
		t.Errorf("%d overlapping handler calls", n)
	}
}

func orderErr(seqs []int, n int) error {
	if len(seqs) == 0 {
		if n == 0 {
			return nil
		}
		return fmt.Errorf("nothing handled, want 1..%d", n)
	}
	if seqs[0] != 1 {
		return fmt.Errorf("first handled is %d, want 1", seqs[0])
	}
	maxSeen := seqs[0]
	for i := 1; i < len(seqs); i++ {
		prev, cur := seqs[i-1], seqs[i]
		if cur > prev+1 {
			return fmt.Errorf("gap: %d after %d", cur, prev)
		}
		maxSeen = max(maxSeen, cur)
	}
	if maxSeen != n {
		return fmt.Errorf("handled up to %d, want %d", maxSeen, n)
	}
	return nil
}

// subsOf returns the partitioned subscription of a node.
func subOf(n *runtime.Node) *partitioned.Subscription {
	return n.Subscriptions()[0].(*partitioned.Subscription)
}

// eventually polls cond every step until it holds or d passes. In a
// synctest bubble both are fake time, so this costs no wall time.
func eventually(t testing.TB, d, step time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(step)
	}
}

func publishAll(t testing.TB, pub *partitioned.Publisher, keys []string, from, to int) {
	t.Helper()
	ctx := context.Background()
	for seq := from; seq <= to; seq++ {
		for _, k := range keys {
			if _, err := pub.Publish(ctx, cat, k, envelope(k, seq)); err != nil {
				t.Fatalf("publish %s/%d: %v", k, seq, err)
			}
		}
	}
}

func keyNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("k%03d", i)
	}
	return out
}

func wantAll(keys []string, n int) map[string]int {
	m := make(map[string]int, len(keys))
	for _, k := range keys {
		m[k] = n
	}
	return m
}

var _ = broker.DefaultBackfillSuffix
