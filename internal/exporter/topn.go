package exporter

import (
	"container/heap"
	"slices"
)

// topN keeps the n largest KeySeries by lag seconds, then lag entries,
// then name, in O(log n) per offer: a collection of 100,000 partitions
// holds n, not 100,000.
type topN struct {
	n int
	h keyHeap
}

func newTopN(n int) *topN { return &topN{n: n} }

// less orders a before b when a lags less (the heap's root is the least).
func less(a, b KeySeries) bool {
	if a.LagSeconds != b.LagSeconds {
		return a.LagSeconds < b.LagSeconds
	}
	if a.LagEntries != b.LagEntries {
		return a.LagEntries < b.LagEntries
	}
	return a.Group+"\x00"+a.Key > b.Group+"\x00"+b.Key
}

func (t *topN) offer(k KeySeries) {
	if t.n <= 0 {
		return
	}
	if len(t.h) < t.n {
		heap.Push(&t.h, k)
		return
	}
	if less(t.h[0], k) {
		t.h[0] = k
		heap.Fix(&t.h, 0)
	}
}

// sorted returns the kept series, most lagging first.
func (t *topN) sorted() []KeySeries {
	out := slices.Clone([]KeySeries(t.h))
	slices.SortFunc(out, func(a, b KeySeries) int {
		switch {
		case less(b, a):
			return -1
		case less(a, b):
			return 1
		}
		return 0
	})
	return out
}

type keyHeap []KeySeries

func (h keyHeap) Len() int           { return len(h) }
func (h keyHeap) Less(i, j int) bool { return less(h[i], h[j]) }
func (h keyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *keyHeap) Push(x any)        { *h = append(*h, x.(KeySeries)) }
func (h *keyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
