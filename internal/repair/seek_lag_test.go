package repair_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/broker"
)

// TestSeekLagAfterSeek pins what decision 0043 says of a group's lag after
// a seek without ENTRIESREAD: to the lane's end or before its first entry
// (earliest) Redis derives it (exact, or entries-added minus length), so
// XINFO GROUPS reports it; in the middle of the lane it is unknown (nil)
// until the group reaches the end again, since the count would take an
// O(n) range.
func TestSeekLagAfterSeek(t *testing.T) {
	for _, tc := range []struct {
		to  string
		lag any // XINFO GROUPS's lag: an int64, or nil for unknown
	}{
		{to: "earliest", lag: int64(10)},
		{to: "latest", lag: int64(0)},
		{to: "5-0", lag: nil},
	} {
		t.Run(tc.to, func(t *testing.T) {
			ctx, c, r := seekEnv(t, 7, 7) // at 7-0, nothing pending
			if tc.to == "latest" {
				// Start in the middle, where the lag is unknown.
				c.XGroupSetID(ctx, broker.ProteanLayout.Stream(seekCat, "k1"), seekGroup, "5-0")
			}
			to, err := repair.ParseSeekTo(tc.to, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: to})
			one(t, p, err)
			if out, err := r.Apply(ctx, p, repair.ApplyOptions{}); err != nil || out != repair.OutcomeApplied {
				t.Fatalf("apply: %s, %v", out, err)
			}
			v, err := c.Do(ctx, "XINFO", "GROUPS", broker.ProteanLayout.Stream(seekCat, "k1")).Slice()
			if err != nil || len(v) != 1 {
				t.Fatalf("XINFO GROUPS: %v, %v", v, err)
			}
			f := map[string]any{}
			switch g := v[0].(type) {
			case []any:
				for i := 0; i+1 < len(g); i += 2 {
					f[fmt.Sprint(g[i])] = g[i+1]
				}
			case map[any]any:
				for k, x := range g {
					f[fmt.Sprint(k)] = x
				}
			}
			if f["lag"] != tc.lag {
				t.Fatalf("after the seek to %s the group is at %v with lag %#v, want %#v", tc.to, f["last-delivered-id"], f["lag"], tc.lag)
			}
		})
	}
}
