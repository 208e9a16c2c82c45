package kafkasource

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A scan's retry waits are drawn per Source: two Sources (two nodes)
// seeded differently wait differently after the same stalls, and every
// wait lies in [d/2, d] for d = n x 50ms.
func TestScanRetryWaitsJittered(t *testing.T) {
	a, err := New([]string{"127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New([]string{"127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a.jit, b.jit = rand.New(rand.NewPCG(1, 0)), rand.New(rand.NewPCG(2, 0))
	var wa, wb []time.Duration
	for round := 0; round < 10; round++ {
		for n := 1; n <= 3; n++ {
			x, y := a.retryWait(n), b.retryWait(n)
			d := time.Duration(n) * 50 * time.Millisecond
			for _, w := range []time.Duration{x, y} {
				if w < d/2 || w > d {
					t.Fatalf("retry %d wait %v outside [%v, %v]", n, w, d/2, d)
				}
			}
			wa, wb = append(wa, x), append(wb, y)
		}
	}
	if slices.Equal(wa, wb) {
		t.Fatalf("two sources drew the same waits %v", wa)
	}
}
