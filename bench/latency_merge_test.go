package bench

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestLatMerge checks that runs in slices (latRunAlone) are reported as
// one run: percentiles over every slice's events, the slowest events
// numbered in the whole schedule, and what was not handled added up.
func TestLatMerge(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// Three slices of a 300-event schedule: the second has a stall.
	rec := func(name string, from int, lat func(i int) time.Duration, missing int) latResult {
		r := newLatRecorder(name, 100)
		for i := range 100 - missing {
			r.lat[i].Store(int64(lat(from + i)))
		}
		return latResultOf(r)
	}
	parts := []latResult{
		rec("runtime", 0, func(int) time.Duration { return ms(1) }, 0),
		rec("runtime", 100, func(i int) time.Duration {
			if i >= 150 && i < 153 {
				return ms(20 + i - 150) // 20, 21, 22 ms at 150-152
			}
			return ms(2)
		}, 0),
		rec("runtime", 200, func(int) time.Duration { return ms(3) }, 2),
	}
	got := latMerge(parts, []int{0, 100, 200})
	if got.missing != 2 || len(got.sorted) != 298 {
		t.Fatalf("merged %d latencies, %d missing: want 298 and 2", len(got.sorted), got.missing)
	}
	wantSlowest := []latSlow{{ms(22), 152}, {ms(21), 151}, {ms(20), 150}, {ms(3), 200}, {ms(3), 201}}
	if diff := cmp.Diff(wantSlowest, got.slowest, cmp.AllowUnexported(latSlow{})); diff != "" {
		t.Errorf("slowest (-want +got):\n%s", diff)
	}
	// 100 x 1 ms, 97 x 2 ms, 98 x 3 ms, then 20-22 ms: p50 is the 149th
	// of 298 (2 ms), p99 the 295th (3 ms), max 22 ms.
	if got.p50 != ms(2) || got.p99 != ms(3) || got.max != ms(22) {
		t.Errorf("p50 %v p99 %v max %v: want 2ms, 3ms, 22ms", got.p50, got.p99, got.max)
	}
}
