package hrw

import (
	"slices"
	"strings"
)

// FNV-1a 64 parameters.
const (
	fnvOffset64 uint64 = 14695981039346656037
	fnvPrime64  uint64 = 1099511628211
)

// Weight is the score of node for partition: FNV-1a 64 over node, a zero
// byte and partition, then the splitmix64 finalizer. It is the same in
// every process and every build (see the package doc); the owner of a
// partition is the node with the highest weight.
func Weight(node, partition string) uint64 {
	return finish(fnvString(nodeState(node), partition))
}

// nodeState is the FNV state after node and the separator; every weight of
// one node continues from it, so Assign hashes each node name only once.
func nodeState(node string) uint64 {
	h := fnvString(fnvOffset64, node)
	// The zero byte keeps ("ab","c") and ("a","bc") apart: FNV-1a of 0x00 is
	// a multiply alone.
	return h * fnvPrime64
}

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// finish is splitmix64's finalizer: FNV's last bytes barely reach the high
// bits, and partition names often differ only in their last byte.
func finish(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// beats reports whether node a with weight wa outranks node b with weight
// wb for one partition. Equal weights (a 2^-64 event) fall back to the
// smaller name, so the order is total and every node agrees on it.
func beats(wa uint64, a string, wb uint64, b string) bool {
	if wa != wb {
		return wa > wb
	}
	return a < b
}

// Owner returns the node that should own partition: the one with the
// highest Weight. It returns "" when nodes is empty. The answer does not
// depend on the order of nodes or on duplicates in it.
func Owner(partition string, nodes []string) string {
	var (
		best  string
		bestW uint64
	)
	for i, n := range nodes {
		w := Weight(n, partition)
		if i == 0 || beats(w, n, bestW, best) {
			best, bestW = n, w
		}
	}
	return best
}

// Rank returns the distinct nodes ordered from the partition's first choice
// (its Owner) to its last: the order in which a partition falls back when
// its owners leave. nodes is not modified; the result is a new slice,
// empty (not nil) when nodes is empty.
func Rank(partition string, nodes []string) []string {
	type scored struct {
		node string
		w    uint64
	}
	s := make([]scored, 0, len(nodes))
	for _, n := range dedupe(nodes) {
		s = append(s, scored{n, Weight(n, partition)})
	}
	slices.SortFunc(s, func(a, b scored) int {
		if beats(a.w, a.node, b.w, b.node) {
			return -1
		}
		return 1 // distinct nodes never compare equal
	})
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i].node
	}
	return out
}

// FairShare is the smallest cap that still lets n nodes hold p partitions:
// ceil(p/n). It returns 0 when n <= 0. Assign with this cap balances
// exactly (every node within one of the others) at the cost of more moves
// when nodes come and go; a cap a little above it keeps most of HRW's
// stability while bounding the worst node.
func FairShare(p, n int) int {
	if n <= 0 || p <= 0 {
		return 0
	}
	return (p + n - 1) / n
}

// Assign maps each partition to the node that should own it.
//
// With capPerNode <= 0 every partition goes to its Owner. With a cap, a
// node never gets more than capPerNode partitions: a node over its cap
// keeps the partitions on which it scores highest and passes the others to
// their next-highest node with room. When the nodes' total room is smaller
// than the number of partitions, the partitions that score lowest are left
// out of the map (nobody should hold them yet).
//
// The result depends only on the sets of partitions and nodes, not on
// their order or duplicates. It is empty (not nil) when nodes or
// partitions are empty. Assign is pure and safe for concurrent use.
func Assign(partitions, nodes []string, capPerNode int) map[string]string {
	return AssignUsed(partitions, nodes, capPerNode, nil)
}

// AssignUsed is Assign where some of each node's room is already taken:
// node n gets at most capPerNode - used[n] of partitions (none when that
// is not positive). Operator placement uses it so that the partitions a
// pin or a cordon gives a node count against that node's cap
// (docs/decisions/0046-drain-cordon-move.md). used is not changed.
func AssignUsed(partitions, nodes []string, capPerNode int, used map[string]int) map[string]string {
	nodes = dedupe(nodes)
	out := make(map[string]string, len(partitions))
	if len(nodes) == 0 || len(partitions) == 0 {
		return out
	}
	states := make([]uint64, len(nodes))
	for i, n := range nodes {
		states[i] = nodeState(n)
	}
	weight := func(p, n int) uint64 { return finish(fnvString(states[n], partitions[p])) }

	full := false
	for _, n := range nodes {
		full = full || used[n] > 0
	}
	if capPerNode <= 0 || (capPerNode >= len(partitions) && !full) {
		for p, name := range partitions {
			best, bestW := 0, weight(p, 0)
			for n := 1; n < len(nodes); n++ {
				// nodes are sorted, so on a tie the lower index has the
				// smaller name: strict > keeps it, as beats would.
				if w := weight(p, n); w > bestW {
					best, bestW = n, w
				}
			}
			out[name] = nodes[best]
		}
		return out
	}
	// Deferred acceptance breaks weight ties by index, so it needs the
	// partitions sorted and distinct (the loop above does not: a duplicate
	// just writes the same answer twice).
	partitions = dedupe(partitions)
	caps := make([]int, len(nodes))
	for i, n := range nodes {
		caps[i] = max(0, capPerNode-used[n])
	}
	a := newAssigner(len(partitions), len(nodes), caps, weight)
	a.run()
	for p, n := range a.holder {
		if n >= 0 {
			out[partitions[p]] = nodes[n]
		}
	}
	return out
}

// assigner runs deferred acceptance: partitions propose to nodes in their
// rank order; a full node keeps its best partitions and rejects the worst.
// Because both sides rank a pair by the same weight, the outcome is the
// unique stable assignment, and equals taking pairs greedily from the
// highest weight down.
type assigner struct {
	np, nn int
	caps   []int    // per node: how many it may hold
	w      []uint64 // w[p*nn+n]
	last   []int    // last node p proposed to, -1 before the first
	holder []int    // node holding p, -1 if none
	held   [][]int  // per node: a min-heap of partitions, worst on top
}

func newAssigner(np, nn int, caps []int, weight func(p, n int) uint64) *assigner {
	a := &assigner{
		np: np, nn: nn, caps: caps,
		w:      make([]uint64, np*nn),
		last:   make([]int, np),
		holder: make([]int, np),
		held:   make([][]int, nn),
	}
	for p := 0; p < np; p++ {
		for n := 0; n < nn; n++ {
			a.w[p*nn+n] = weight(p, n)
		}
		a.last[p] = -1
		a.holder[p] = -1
	}
	for n := range a.held {
		a.held[n] = make([]int, 0, min(caps[n], np))
	}
	return a
}

// nodeBeats reports whether node x outranks node y for partition p. Nodes
// are sorted by name, so the index breaks ties like beats does.
func (a *assigner) nodeBeats(p, x, y int) bool {
	wx, wy := a.w[p*a.nn+x], a.w[p*a.nn+y]
	if wx != wy {
		return wx > wy
	}
	return x < y
}

// partBeats reports whether node n prefers partition p to q. Partitions
// are sorted by name, so the index breaks ties.
func (a *assigner) partBeats(n, p, q int) bool {
	wp, wq := a.w[p*a.nn+n], a.w[q*a.nn+n]
	if wp != wq {
		return wp > wq
	}
	return p < q
}

// next is p's best node ranked below the last one it proposed to, or -1.
// A linear scan: N is small and most partitions propose once.
func (a *assigner) next(p int) int {
	prev, best := a.last[p], -1
	for n := 0; n < a.nn; n++ {
		if prev >= 0 && (n == prev || a.nodeBeats(p, n, prev)) {
			continue // already proposed to n
		}
		if best < 0 || a.nodeBeats(p, n, best) {
			best = n
		}
	}
	return best
}

func (a *assigner) run() {
	free := make([]int, 0, a.np)
	for p := a.np - 1; p >= 0; p-- {
		free = append(free, p)
	}
	for len(free) > 0 {
		p := free[len(free)-1]
		free = free[:len(free)-1]
		for {
			n := a.next(p)
			if n < 0 {
				break // no room anywhere it ranks: left unassigned
			}
			a.last[p] = n
			h := a.held[n]
			if len(h) < a.caps[n] {
				a.push(n, p)
				break
			}
			if len(h) == 0 {
				continue // no room at all: try the next node
			}
			if worst := h[0]; a.partBeats(n, p, worst) {
				a.holder[worst] = -1
				a.replaceTop(n, p)
				free = append(free, worst)
				break
			}
		}
	}
}

func (a *assigner) push(n, p int) {
	a.holder[p] = n
	h := append(a.held[n], p)
	// sift up: the worst partition (by partBeats) stays at the root.
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !a.partBeats(n, h[parent], h[i]) {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
	a.held[n] = h
}

func (a *assigner) replaceTop(n, p int) {
	a.holder[p] = n
	h := a.held[n]
	h[0] = p
	for i := 0; ; {
		l, r, worst := 2*i+1, 2*i+2, i
		if l < len(h) && a.partBeats(n, h[worst], h[l]) {
			worst = l
		}
		if r < len(h) && a.partBeats(n, h[worst], h[r]) {
			worst = r
		}
		if worst == i {
			return
		}
		h[i], h[worst] = h[worst], h[i]
		i = worst
	}
}

// dedupe returns the distinct values sorted, in a new slice.
func dedupe(in []string) []string {
	out := slices.Clone(in)
	slices.SortFunc(out, strings.Compare)
	return slices.Compact(out)
}
