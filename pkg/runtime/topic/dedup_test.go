package topic

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// dedupRun feeds batches of one aggregate through a dedupMemory as a
// worker does (check the batch, handle what is not a duplicate, record
// it) and returns the offsets dropped as duplicates.
func dedupRun(t *testing.T, d *dedupMemory, agg string, batches ...[]dedupRec) []int64 {
	t.Helper()
	var dropped []int64
	for _, recs := range batches {
		batch := make([]laneItem, len(recs))
		for i, r := range recs {
			batch[i] = laneItem{rec: &kgo.Record{Offset: r.off}, off: r.off, id: r.id}
			if r.id != 0 {
				batch[i].idState = idKnown
			}
		}
		dup := d.seenAll(agg, batch, nil)
		var handled []int
		for i := range batch {
			if dup[i] {
				dropped = append(dropped, recs[i].off)
				continue
			}
			handled = append(handled, i)
		}
		d.addAll(agg, batch, handled)
	}
	return dropped
}

type dedupRec struct {
	off int64
	id  uint64 // 0: no identity
}

func recs(offs ...int64) []dedupRec {
	out := make([]dedupRec, len(offs))
	for i, o := range offs {
		out[i] = dedupRec{off: o}
	}
	return out
}

// TestTopicDedupMemory: what the per-aggregate dedup memory drops.
func TestTopicDedupMemory(t *testing.T) {
	for _, c := range []struct {
		name    string
		batches [][]dedupRec
		want    []int64
	}{
		{"replay from the checkpoint drops what was handled, without identities",
			[][]dedupRec{recs(10, 20, 30), recs(20, 30, 40)}, []int64{20, 30}},
		{"nothing handled twice, nothing dropped",
			[][]dedupRec{recs(1, 2), recs(3, 4)}, nil},
		{"a producer's duplicate at a new offset, in a later batch",
			[][]dedupRec{{{1, 101}, {2, 102}}, {{3, 101}, {4, 103}}}, []int64{3}},
		{"a producer's duplicate within one batch",
			[][]dedupRec{{{1, 101}, {2, 102}, {3, 101}}}, []int64{3}},
		{"identities older than the last dedupIDs are forgotten",
			[][]dedupRec{{{1, 101}, {2, 102}, {3, 103}, {4, 104}, {5, 105}, {6, 106}, {7, 107}, {8, 108}, {9, 109}}, {{10, 101}, {11, 109}}},
			[]int64{11}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDedupMemory(100)
			if got := dedupRun(t, d, "a", c.batches...); !slices.Equal(got, c.want) {
				t.Fatalf("dropped %v, want %v", got, c.want)
			}
		})
	}
}

// TestTopicDedupMemoryPerAggregate: aggregates do not share offsets or
// identities.
func TestTopicDedupMemoryPerAggregate(t *testing.T) {
	d := newDedupMemory(100)
	dedupRun(t, d, "a", []dedupRec{{50, 101}})
	if got := dedupRun(t, d, "b", []dedupRec{{10, 101}, {20, 0}}); len(got) != 0 {
		t.Fatalf("b dropped %v: a's offset or identity applied to b", got)
	}
}

// TestTopicDedupMemoryBounded: at most two generations of size/dedupIDs
// aggregates are kept; the oldest aggregates are forgotten (dedup is best
// effort), recently used ones kept.
func TestTopicDedupMemoryBounded(t *testing.T) {
	d := newDedupMemory(4 * dedupIDs) // 4 aggregates per generation
	for _, agg := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"} {
		dedupRun(t, d, agg, recs(10))
	}
	if n := len(d.cur) + len(d.old); n > 8 {
		t.Fatalf("%d aggregates remembered, want at most 8", n)
	}
	if got := dedupRun(t, d, "a", recs(10)); len(got) != 0 {
		t.Fatalf("a, the oldest, still remembered: dropped %v", got)
	}
	if got := dedupRun(t, d, "i", recs(10)); !slices.Equal(got, []int64{10}) {
		t.Fatalf("i, the newest, dropped %v, want [10]", got)
	}
}

// TestTopicDedupMemoryForgetOffsets: after the partition's offsets went
// back (a topic created again), records are not dropped for their
// offsets, only for their identities.
func TestTopicDedupMemoryForgetOffsets(t *testing.T) {
	d := newDedupMemory(100)
	dedupRun(t, d, "a", []dedupRec{{100, 101}, {101, 0}})
	d.forgetOffsets()
	if got := dedupRun(t, d, "a", []dedupRec{{0, 0}, {1, 101}}); !slices.Equal(got, []int64{1}) {
		t.Fatalf("dropped %v, want [1] (its identity was handled; offset 0 is new)", got)
	}
}
