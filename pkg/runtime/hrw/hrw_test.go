package hrw

import (
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// referenceWeight is the documented formula written independently of
// Weight, with the standard library's FNV: if the two ever disagree, the
// implementation drifted from the wire format.
func referenceWeight(node, partition string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	h.Write([]byte{0})
	h.Write([]byte(partition))
	x := h.Sum64()
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func TestWeightIsPinned(t *testing.T) {
	// These values are part of the wire contract: nodes of different builds
	// must agree on owners. Never update them to make the test pass.
	golden := []struct {
		node, partition string
		want            uint64
	}{
		{"node-1", "0", 0x161e9dd448115b60},
		{"node-2", "0", 0x328abec8692f749a},
		{"node-1", "orders:11", 0xb6e830736be5e3fe},
		{"", "", 0x71b8262bb6e2e086},
		{"a", "bc", 0x517145d6a15c41f2},
		{"ab", "c", 0x5de7ed57f54996df},
	}
	for _, g := range golden {
		if got := Weight(g.node, g.partition); got != g.want {
			t.Errorf("Weight(%q, %q) = %#x, want %#x", g.node, g.partition, got, g.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 1000; i++ {
		node, part := randName(r), randName(r)
		if got, want := Weight(node, part), referenceWeight(node, part); got != want {
			t.Fatalf("Weight(%q, %q) = %#x, reference formula gives %#x", node, part, got, want)
		}
	}
}

func TestSeparatorKeepsConcatenationsApart(t *testing.T) {
	if Weight("a", "bc") == Weight("ab", "c") {
		t.Fatal(`("a","bc") and ("ab","c") score the same: the separator is missing`)
	}
}

func TestOwnerIgnoresOrderAndDuplicates(t *testing.T) {
	nodes := names("node", 7)
	r := rand.New(rand.NewPCG(3, 4))
	for _, p := range names("p", 500) {
		want := Owner(p, nodes)
		shuffled := slices.Clone(nodes)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		shuffled = append(shuffled, shuffled[:3]...)
		if got := Owner(p, shuffled); got != want {
			t.Fatalf("Owner(%q) = %q with shuffled nodes, %q in order", p, got, want)
		}
		if rank := Rank(p, shuffled); rank[0] != want || len(rank) != len(nodes) {
			t.Fatalf("Rank(%q) = %v; want %d distinct nodes starting with the owner %q", p, rank, len(nodes), want)
		}
	}
}

func TestOwnerAndRankOfNoNodes(t *testing.T) {
	if got := Owner("p", nil); got != "" {
		t.Errorf("Owner with no nodes = %q, want empty", got)
	}
	if got := Rank("p", nil); got == nil || len(got) != 0 {
		t.Errorf("Rank with no nodes = %#v, want empty non-nil", got)
	}
	if got := Assign([]string{"p"}, nil, 0); got == nil || len(got) != 0 {
		t.Errorf("Assign with no nodes = %#v, want empty non-nil", got)
	}
	if got := Assign(nil, []string{"n"}, 3); got == nil || len(got) != 0 {
		t.Errorf("Assign with no partitions = %#v, want empty non-nil", got)
	}
}

func TestRankIsDescendingWeight(t *testing.T) {
	nodes := names("node", 9)
	for _, p := range names("p", 100) {
		rank := Rank(p, nodes)
		for i := 1; i < len(rank); i++ {
			if Weight(rank[i-1], p) < Weight(rank[i], p) {
				t.Fatalf("Rank(%q) = %v: %q scores below %q", p, rank, rank[i-1], rank[i])
			}
		}
	}
}

func TestAssignWithoutCapIsOwner(t *testing.T) {
	parts, nodes := names("orders:", 2000), names("node-", 6)
	for _, capPerNode := range []int{0, -1, 2000, 5000} {
		got := Assign(parts, nodes, capPerNode)
		for _, p := range parts {
			if want := Owner(p, nodes); got[p] != want {
				t.Fatalf("cap %d: Assign gave %q to %q, Owner says %q", capPerNode, p, got[p], want)
			}
		}
	}
}

func TestRemovingANodeMovesOnlyItsPartitions(t *testing.T) {
	parts := names("p", 10000)
	for _, n := range []int{2, 3, 5, 10} {
		nodes := names("node-", n)
		before := Assign(parts, nodes, 0)
		for i, gone := range nodes {
			rest := slices.Delete(slices.Clone(nodes), i, i+1)
			after := Assign(parts, rest, 0)
			for _, p := range parts {
				switch {
				case before[p] == gone && after[p] == gone:
					t.Fatalf("%d nodes, %q removed: %q still assigned to it", n, gone, p)
				case before[p] != gone && after[p] != before[p]:
					t.Fatalf("%d nodes, %q removed: %q moved from %q to %q", n, gone, p, before[p], after[p])
				case before[p] == gone && after[p] != Rank(p, nodes)[1]:
					t.Fatalf("%d nodes, %q removed: %q went to %q, not its second choice", n, gone, p, after[p])
				}
			}
		}
	}
}

func TestAddingANodeMovesAboutOneNthOnlyToIt(t *testing.T) {
	const numParts = 10000
	parts := names("orders:", numParts)
	for n := 1; n <= 9; n++ {
		t.Run(fmt.Sprintf("%d_to_%d", n, n+1), func(t *testing.T) {
			nodes := names("node-", n)
			newcomer := fmt.Sprintf("node-%d", n+1000)
			before := Assign(parts, nodes, 0)
			after := Assign(parts, append(slices.Clone(nodes), newcomer), 0)
			moved := 0
			for _, p := range parts {
				if after[p] == before[p] {
					continue
				}
				moved++
				if after[p] != newcomer {
					t.Fatalf("%q moved from %q to %q, not to the newcomer", p, before[p], after[p])
				}
			}
			q := 1 / float64(n+1)
			want := numParts * q
			// 5 binomial standard deviations: fails for a biased hash, not
			// for bad luck.
			tol := 5 * math.Sqrt(numParts*q*(1-q))
			if math.Abs(float64(moved)-want) > tol {
				t.Fatalf("moved %d of %d partitions, want %.0f ± %.0f", moved, numParts, want, tol)
			}
		})
	}
}

func TestAddingAFourthNodeTo12PartitionsMovesAboutAQuarter(t *testing.T) {
	// The runtime's case: a 12-partition topic. One membership moves a
	// handful of partitions; over many different memberships the mean must
	// be 12/4 = 3, and always to the newcomer.
	parts := names("", 12) // partition numbers "0".."11"
	const trials = 2000
	total := 0
	for trial := 0; trial < trials; trial++ {
		nodes := []string{
			fmt.Sprintf("host-a-%d", trial), fmt.Sprintf("host-b-%d", trial), fmt.Sprintf("host-c-%d", trial),
		}
		newcomer := fmt.Sprintf("host-d-%d", trial)
		before := Assign(parts, nodes, 0)
		after := Assign(parts, append(nodes, newcomer), 0)
		for _, p := range parts {
			if after[p] != before[p] {
				if after[p] != newcomer {
					t.Fatalf("trial %d: %q moved to %q, not the newcomer", trial, p, after[p])
				}
				total++
			}
		}
	}
	mean := float64(total) / trials
	// Per trial the count is Binomial(12, 1/4): sd 1.5, so the mean of
	// 2000 trials has sd 0.034.
	if math.Abs(mean-3) > 0.2 {
		t.Fatalf("mean moved per trial = %.3f, want 3 ± 0.2", mean)
	}
}

func TestDistributionOf300KeysOver3Nodes(t *testing.T) {
	keys := names("order-", 300)
	nodes := []string{"node-1", "node-2", "node-3"}

	t.Run("plain_hrw_is_binomial", func(t *testing.T) {
		// Plain HRW gives each node Binomial(300, 1/3): sd 8.2, so a node
		// lands outside 100 ± 20 about 1.4% of the time. Over 300 node sets,
		// the chi-square statistic (2 degrees of freedom) must average 2 and
		// the misses stay rare: a biased or correlated hash fails here.
		const trials = 300
		var chi2 float64
		misses := 0
		for tr := 0; tr < trials; tr++ {
			set := []string{fmt.Sprintf("n-%d-a", tr), fmt.Sprintf("n-%d-b", tr), fmt.Sprintf("n-%d-c", tr)}
			c := counts(Assign(keys, set, 0))
			for _, n := range set {
				d := float64(c[n] - 100)
				chi2 += d * d / 100
				if math.Abs(d) > 20 {
					misses++
				}
			}
		}
		if mean := chi2 / trials; mean < 1.6 || mean > 2.4 {
			t.Errorf("mean chi-square = %.2f over %d node sets, want 2 ± 0.4", mean, trials)
		}
		if rate := float64(misses) / (3 * trials); rate > 0.04 {
			t.Errorf("%.1f%% of node counts outside 100 ± 20, want about 1.4%%", 100*rate)
		}
	})
	t.Run("this_key_set_needs_the_cap", func(t *testing.T) {
		// order-0..order-299 on node-1..3 is one of those unlucky sets:
		// plain HRW gives 129/88/83. So plain HRW cannot promise ±20; a cap
		// can. With cap c every node holds at most c and at least
		// 300-2c, so any c in [100, 110] guarantees 100 ± 20.
		plain := counts(Assign(keys, nodes, 0))
		t.Logf("plain HRW: %v", plain)
		if within(plain, nodes, 80, 120) {
			t.Logf("plain HRW happens to be within ±20 for this set")
		}
		for _, c := range []int{100, 105, 110} {
			capped := counts(Assign(keys, nodes, c))
			if !within(capped, nodes, 80, 120) {
				t.Errorf("cap %d gives %v, want every node within 100 ± 20", c, capped)
			}
		}
	})
	t.Run("fair_share_cap_is_exact", func(t *testing.T) {
		got := counts(Assign(keys, nodes, FairShare(300, 3)))
		for _, node := range nodes {
			if got[node] != 100 {
				t.Errorf("%s holds %d keys with cap 100, want exactly 100", node, got[node])
			}
		}
	})
	t.Run("cap_110_bounds_every_skewed_set", func(t *testing.T) {
		skewed := 0
		for seed := uint64(0); seed < 500; seed++ {
			r := rand.New(rand.NewPCG(seed, 99))
			set := make([]string, 300)
			for i := range set {
				set[i] = fmt.Sprintf("%s-%d", randName(r), i)
			}
			if !within(counts(Assign(set, nodes, 0)), nodes, 80, 120) {
				skewed++
			}
			if capped := counts(Assign(set, nodes, 110)); !within(capped, nodes, 80, 120) {
				t.Fatalf("seed %d: cap 110 gives %v, want every node within 100 ± 20", seed, capped)
			}
		}
		if skewed == 0 {
			t.Fatal("no key set among 500 breaks ±20 with plain HRW; the cap was never exercised")
		}
		t.Logf("%d of 500 random key sets break ±20 with plain HRW; cap 110 fixed all", skewed)
	})
}

func TestAssignCap(t *testing.T) {
	tests := []struct {
		name         string
		parts, nodes int
		capPerNode   int
	}{
		{"fair_share_exact", 300, 3, 100},
		{"fair_share_uneven", 301, 3, 101},
		{"loose", 1000, 7, 160},
		{"tight_many_nodes", 1000, 10, 100},
		{"not_enough_room", 100, 4, 20},
		{"cap_one", 10, 10, 1},
		{"cap_one_short", 12, 5, 1},
		{"single_node", 50, 1, 30},
		{"more_nodes_than_partitions", 5, 20, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts, nodes := names("p-", tt.parts), names("n-", tt.nodes)
			got := Assign(parts, nodes, tt.capPerNode)

			for node, n := range counts(got) {
				if n > tt.capPerNode {
					t.Errorf("%s holds %d partitions, cap is %d", node, n, tt.capPerNode)
				}
			}
			if want := min(tt.parts, tt.capPerNode*tt.nodes); len(got) != want {
				t.Errorf("assigned %d partitions, want min(partitions, cap*nodes) = %d", len(got), want)
			}
			checkStable(t, got, parts, nodes, tt.capPerNode)

			if want := greedyReference(parts, nodes, tt.capPerNode); !mapsEqual(got, want) {
				t.Errorf("Assign differs from the greedy highest-weight-first reference")
			}

			r := rand.New(rand.NewPCG(uint64(tt.parts), uint64(tt.nodes)))
			sp, sn := slices.Clone(parts), slices.Clone(nodes)
			r.Shuffle(len(sp), func(i, j int) { sp[i], sp[j] = sp[j], sp[i] })
			r.Shuffle(len(sn), func(i, j int) { sn[i], sn[j] = sn[j], sn[i] })
			sp = append(sp, sp[0])
			if again := Assign(sp, append(sn, sn[0]), tt.capPerNode); !mapsEqual(got, again) {
				t.Errorf("Assign depends on the order of its inputs")
			}
		})
	}
}

func TestCapThatBindsNowhereChangesNothing(t *testing.T) {
	// The cap only ever acts on surplus: with a cap equal to the fullest
	// node's plain-HRW load, Assign is exactly plain HRW; one below it,
	// the fullest node sheds exactly one partition and nothing else
	// changes except where that partition lands.
	parts, nodes := names("orders:", 3000), names("node-", 5)
	plain := Assign(parts, nodes, 0)
	fullest, most := "", 0
	for n, c := range counts(plain) {
		if c > most || (c == most && n < fullest) {
			fullest, most = n, c
		}
	}
	if got := Assign(parts, nodes, most); !mapsEqual(got, plain) {
		t.Fatalf("cap %d (the fullest load) changed the assignment", most)
	}
	got := Assign(parts, nodes, most-1)
	var moved []string
	for _, p := range parts {
		if got[p] != plain[p] {
			moved = append(moved, p)
		}
	}
	if len(moved) == 0 || plain[moved[0]] != fullest {
		t.Fatalf("cap %d: moved %v, want partitions shed by the fullest node %q first", most-1, moved, fullest)
	}
	t.Logf("cap %d below the fullest load %d moved %d partition(s)", most-1, most, len(moved))
}

func TestFairShare(t *testing.T) {
	tests := []struct{ p, n, want int }{
		{300, 3, 100}, {301, 3, 101}, {12, 5, 3}, {0, 3, 0}, {3, 0, 0}, {1, 10, 1},
	}
	for _, tt := range tests {
		if got := FairShare(tt.p, tt.n); got != tt.want {
			t.Errorf("FairShare(%d, %d) = %d, want %d", tt.p, tt.n, got, tt.want)
		}
	}
}

// checkStable proves the defining property of the capped assignment: no
// partition p and node m prefer each other over what they have, i.e. if m
// outranks p's holder (or p has none), m is full of partitions it prefers
// to p.
func checkStable(t *testing.T, got map[string]string, parts, nodes []string, capPerNode int) {
	t.Helper()
	held := map[string][]string{}
	for p, n := range got {
		held[n] = append(held[n], p)
	}
	for _, p := range parts {
		holder, ok := got[p]
		for _, m := range Rank(p, nodes) {
			if ok && m == holder {
				break
			}
			if len(held[m]) < capPerNode {
				t.Fatalf("%q (held by %q) ranks %q higher, which has room (%d < %d)", p, holder, m, len(held[m]), capPerNode)
			}
			for _, q := range held[m] {
				if Weight(m, q) < Weight(m, p) {
					t.Fatalf("%q holds %q but prefers %q, which it outranks its holder %q for", m, q, p, holder)
				}
			}
		}
	}
}

// greedyReference takes (partition, node) pairs from the highest weight
// down, assigning whenever the partition is free and the node has room.
func greedyReference(parts, nodes []string, capPerNode int) map[string]string {
	type pair struct {
		p, n string
		w    uint64
	}
	var pairs []pair
	for _, p := range parts {
		for _, n := range nodes {
			pairs = append(pairs, pair{p, n, Weight(n, p)})
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].w != pairs[j].w {
			return pairs[i].w > pairs[j].w
		}
		if pairs[i].n != pairs[j].n {
			return pairs[i].n < pairs[j].n
		}
		return pairs[i].p < pairs[j].p
	})
	out := map[string]string{}
	load := map[string]int{}
	for _, pr := range pairs {
		if _, taken := out[pr.p]; taken || load[pr.n] >= capPerNode {
			continue
		}
		out[pr.p] = pr.n
		load[pr.n]++
	}
	return out
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func randName(r *rand.Rand) string {
	b := make([]byte, 1+r.IntN(16))
	for i := range b {
		b[i] = byte('a' + r.IntN(26))
	}
	return string(b)
}

func counts(m map[string]string) map[string]int {
	c := map[string]int{}
	for _, n := range m {
		c[n]++
	}
	return c
}

func within(c map[string]int, nodes []string, lo, hi int) bool {
	for _, n := range nodes {
		if c[n] < lo || c[n] > hi {
			return false
		}
	}
	return true
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func BenchmarkAssign(b *testing.B) {
	parts, nodes := names("orders:", 10000), names("node-", 10)
	for _, bc := range []struct {
		name       string
		capPerNode int
	}{
		{"10k_x_10/no_cap", 0},
		{"10k_x_10/cap_fair", FairShare(10000, 10)},
		{"10k_x_10/cap_fair+10%", FairShare(10000, 10) * 11 / 10},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Assign(parts, nodes, bc.capPerNode)
			}
		})
	}
}

func BenchmarkOwner(b *testing.B) {
	nodes := names("node-", 10)
	b.ReportAllocs()
	for b.Loop() {
		Owner("orders:1234", nodes)
	}
}

// AssignUsed leaves a node only the room its used count did not take,
// gives none to a node already full, and is Assign when nothing is used.
func TestAssignUsedCountsTakenRoom(t *testing.T) {
	parts := make([]string, 30)
	for i := range parts {
		parts[i] = fmt.Sprintf("p%d", i)
	}
	nodes := []string{"a", "b", "c"}
	if got, want := AssignUsed(parts, nodes, 12, nil), Assign(parts, nodes, 12); !maps.Equal(got, want) {
		t.Fatalf("AssignUsed with nothing used differs from Assign")
	}
	got := AssignUsed(parts, nodes, 12, map[string]int{"a": 12, "b": 5})
	count := map[string]int{}
	for _, n := range got {
		count[n]++
	}
	if count["a"] != 0 || count["b"] != 7 || count["c"] != 12 {
		t.Fatalf("per-node counts %v, want a:0 b:7 c:12", count)
	}
	// Without a cap, used does not matter.
	if got := AssignUsed(parts, nodes, 0, map[string]int{"a": 100}); !maps.Equal(got, Assign(parts, nodes, 0)) {
		t.Fatalf("uncapped AssignUsed differs from Assign")
	}
}
