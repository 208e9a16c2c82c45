package pause_test

import (
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/runtime/pause"
)

// Two reads of the pauses are the same when they hold back the same
// selectors, whoever set them and why.
func TestSetSameSelectors(t *testing.T) {
	a := pause.Set{{Selector: pause.All, By: "ops", At: time.Unix(1, 0)}, {Selector: pause.Key("o-1")}}
	for _, tc := range []struct {
		b    pause.Set
		want bool
	}{
		{pause.Set{{Selector: pause.All, By: "other", Reason: "again"}, {Selector: pause.Key("o-1")}}, true},
		{pause.Set{{Selector: pause.All}}, false},
		{pause.Set{{Selector: pause.All}, {Selector: pause.Key("o-2")}}, false},
		{nil, false},
	} {
		if got := a.SameSelectors(tc.b); got != tc.want {
			t.Errorf("SameSelectors(%v) = %v, want %v", tc.b, got, tc.want)
		}
	}
	if !pause.Set(nil).SameSelectors(pause.Set{}) {
		t.Error("no pauses and an empty set differ")
	}
}
