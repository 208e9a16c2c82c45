package inspect_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
)

// TestStateListsAreTheEnums: LeaseStates and VerdictStates, from which
// docs/cli.md's "Lease and partition states" tables are generated (and
// TestCLIDocIsUpToDate keeps the file equal to them), list exactly the
// LeaseState and VerdictState constants this package declares, in their
// order: a state added to the code without a meaning in the table, or a
// row left for a state removed, fails here. LeaseUnknown ("") is the one
// constant without a row: it has no word (null in JSON, "?" in tables),
// and the docs say so below the table.
func TestStateListsAreTheEnums(t *testing.T) {
	enums := testenv.StringConsts(t, ".", "LeaseState", "VerdictState")
	enums["LeaseState"] = slices.DeleteFunc(enums["LeaseState"], func(s string) bool { return s == string(inspect.LeaseUnknown) })
	for _, c := range []struct {
		typ  string
		list []inspect.StateInfo
	}{
		{"LeaseState", inspect.LeaseStates()},
		{"VerdictState", inspect.VerdictStates()},
	} {
		var listed []string
		for _, s := range c.list {
			listed = append(listed, s.State)
			if strings.TrimSpace(s.Meaning) == "" {
				t.Errorf("%s %q has no meaning", c.typ, s.State)
			}
		}
		if !slices.Equal(listed, enums[c.typ]) {
			t.Errorf("the %s list is %q, the constants are %q", c.typ, listed, enums[c.typ])
		}
	}
}
