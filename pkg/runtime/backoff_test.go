package runtime

import (
	"slices"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
)

// noMembership satisfies Membership for a Node that is never started
// (NewNode does no I/O).
type noMembership struct{ Membership }

func waits(b *backoff.Backoff, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = b.Next()
	}
	return out
}

// seededNode returns the host a node with seed gives its subscriptions.
func seededNode(t *testing.T, id string, seed uint64) nodeHost {
	t.Helper()
	n, err := NewNode(NodeConfig{Service: "svc", NodeID: id, Membership: noMembership{}, JitterSeed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return nodeHost{n}
}

// Two nodes with different seeds draw different waits for the same
// backoff, every wait within [min, max] and under the doubling ceiling;
// the same seed draws the same waits (the source is the seed's alone, not
// process-wide state).
func TestBackoffJitterPerNodeSeed(t *testing.T) {
	a, b, a2 := seededNode(t, "node-a", 1), seededNode(t, "node-b", 2), seededNode(t, "node-a2", 1)
	for _, tc := range []struct {
		name     string
		min, max time.Duration
	}{
		{"handler retry defaults", 200 * time.Millisecond, 10 * time.Second},
		{"systemic defaults", time.Second, 30 * time.Second},
		{"join defaults", 500 * time.Millisecond, 30 * time.Second},
		{"short renew-bound", 100 * time.Millisecond, 300 * time.Millisecond},
		{"max below twice min", 100 * time.Millisecond, 150 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 40
			wa := waits(backoff.New(tc.min, tc.max, backoff.NewJitter(a, "sub")), n)
			wb := waits(backoff.New(tc.min, tc.max, backoff.NewJitter(b, "sub")), n)
			wa2 := waits(backoff.New(tc.min, tc.max, backoff.NewJitter(a2, "sub")), n)
			if slices.Equal(wa, wb) {
				t.Fatalf("nodes with seeds 1 and 2 drew the same waits %v", wa)
			}
			if !slices.Equal(wa, wa2) {
				t.Fatalf("the same seed drew different waits: %v and %v", wa, wa2)
			}
			same := 0
			for i := range wa {
				if wa[i] == wb[i] {
					same++
				}
			}
			if same > n/4 {
				t.Errorf("%d of %d waits equal between the nodes: still in lockstep", same, n)
			}
			for _, w := range [][]time.Duration{wa, wb} {
				ceil := tc.min
				for i, d := range w {
					ceil = min(2*ceil, tc.max)
					if d < tc.min || d > tc.max || d > ceil {
						t.Fatalf("wait %d = %v outside [%v, %v] (ceiling %v)", i, d, tc.min, tc.max, ceil)
					}
				}
			}
		})
	}
	// Subscriptions of one node draw apart too.
	if x, y := waits(backoff.New(time.Second, time.Minute, backoff.NewJitter(a, "s1")), 10), waits(backoff.New(time.Second, time.Minute, backoff.NewJitter(a, "s2")), 10); slices.Equal(x, y) {
		t.Errorf("two subscriptions of one node drew the same waits %v", x)
	}
	// reset starts over from the shortest ceiling.
	bo := backoff.New(time.Second, time.Minute, backoff.NewJitter(a, "sub"))
	waits(bo, 10)
	bo.Reset()
	if d := bo.Next(); d < time.Second || d > 2*time.Second {
		t.Errorf("first wait after reset = %v, want within [1s, 2s]", d)
	}
}

// The default seed (JitterSeed 0) differs from node to node.
func TestBackoffDefaultSeedsDiffer(t *testing.T) {
	a, b := seededNode(t, "node-a", 0), seededNode(t, "node-b", 0)
	if a.JitterSeed() == 0 || a.JitterSeed() == b.JitterSeed() {
		t.Fatalf("default seeds %d and %d: want non-zero and different", a.JitterSeed(), b.JitterSeed())
	}
}

// between, which the coordinators' acquire and contested retries use,
// stays within its bounds and varies between seeds from the first draw.
func TestJitterBetween(t *testing.T) {
	a, b := seededNode(t, "node-a", 1), seededNode(t, "node-b", 2)
	ja, jb := backoff.NewJitter(a, "sub"), backoff.NewJitter(b, "sub")
	lo, hi := 500*time.Millisecond, time.Second
	var da, db []time.Duration
	for range 20 {
		x, y := ja.Between(lo, hi), jb.Between(lo, hi)
		for _, d := range []time.Duration{x, y} {
			if d < lo || d > hi {
				t.Fatalf("between(%v, %v) = %v", lo, hi, d)
			}
		}
		da, db = append(da, x), append(db, y)
	}
	if slices.Equal(da, db) {
		t.Fatalf("seeds 1 and 2 drew the same waits %v", da)
	}
	if d := (*backoff.Jitter)(nil).Between(lo, hi); d != hi {
		t.Errorf("nil source: %v, want the ceiling %v", d, hi)
	}
}
