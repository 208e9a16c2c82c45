package repair

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzParsePlan feeds arbitrary documents to the loader of `apply -f`: a
// plan file comes from disk, possibly edited by hand, and must never
// crash the tool or slip an invalid item through. A refused document
// wraps ErrInvalidPlan; an accepted one validates and survives a round
// trip through its own JSON unchanged in meaning. Its seed corpus is
// testdata/fuzz/FuzzParsePlan, replayed by every go test.
func FuzzParsePlan(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePlan(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidPlan) {
				t.Fatalf("refused without ErrInvalidPlan: %v", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("ParsePlan accepted a plan Validate refuses: %v", err)
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("an accepted plan does not encode: %v", err)
		}
		again, err := ParsePlan(out)
		if err != nil {
			t.Fatalf("an accepted plan's own JSON is refused: %v\n%s", err, out)
		}
		if len(again.Items) != len(p.Items) {
			t.Fatalf("round trip changed the items: %d, then %d", len(p.Items), len(again.Items))
		}
	})
}
