package nodeconfig

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse throws arbitrary bytes at the node config loader: it must
// never panic, and what it refuses it refuses with an *Error that lists
// at least one problem and names the file (an operator reads it at 3 a.m.).
// Its seed corpus is testdata/fuzz/FuzzParse, replayed by every go test.
func FuzzParse(f *testing.F) {
	dir := f.TempDir()
	noEnv := func(string) string { return "" }
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "node.yaml", dir, noEnv)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) == 0 {
				t.Fatalf("refused with %T %v, want an *Error with problems", err, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "node.yaml") {
				t.Fatalf("error does not name the file: %s", msg)
			}
			return
		}
		if c == nil || c.Service == "" || c.Redis.URL == "" {
			t.Fatalf("accepted a config without its required fields: %+v", c)
		}
	})
}
