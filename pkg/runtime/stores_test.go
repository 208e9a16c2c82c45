package runtime

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestNodeStatusReadsBothWords: a status record reads "backingOff" as the
// runtime's back-off and "paused" as an operator's pause, and one
// heartbeated by a node of an older release (no "backingOff"; "paused"
// was the back-off, "operatorPaused" the operator's) reads in the same
// words, so a rolling upgrade never shows a back-off as PAUSED.
func TestNodeStatusReadsBothWords(t *testing.T) {
	for _, tc := range []struct {
		name, record       string
		backingOff, paused []string
	}{
		{"current", `{"node":"n","backingOff":["s/1"],"paused":["s/o-1"]}`, []string{"s/1"}, []string{"s/o-1"}},
		{"current, none", `{"node":"n","backingOff":[],"paused":[]}`, []string{}, []string{}},
		{"current, null lists", `{"node":"n","backingOff":null,"paused":["s/o-1"]}`, nil, []string{"s/o-1"}},
		{"older release", `{"node":"n","paused":["s/1"],"operatorPaused":["s/o-1"]}`, []string{"s/1"}, []string{"s/o-1"}},
		{"older release, no operator pause", `{"node":"n","paused":["s/1"]}`, []string{"s/1"}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st NodeStatus
			if err := json.Unmarshal([]byte(tc.record), &st); err != nil {
				t.Fatal(err)
			}
			if st.Node != "n" || !slices.Equal(st.BackingOff, tc.backingOff) || !slices.Equal(st.Paused, tc.paused) {
				t.Fatalf("read %+v: backingOff %v paused %v, want %v and %v", st, st.BackingOff, st.Paused, tc.backingOff, tc.paused)
			}
			out, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			var again NodeStatus
			if err := json.Unmarshal(out, &again); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(again.BackingOff, tc.backingOff) || !slices.Equal(again.Paused, tc.paused) {
				t.Fatalf("round trip %s: backingOff %v paused %v", out, again.BackingOff, again.Paused)
			}
		})
	}
}
