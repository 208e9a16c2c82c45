package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// TestMain removes the protctl binary the process tests share (builtBinary)
// once every test of the package has run.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtBinary.dir != "" {
		_ = os.RemoveAll(builtBinary.dir)
	}
	os.Exit(code)
}

// builtBinary is the protctl binary, built once per run of the package's
// tests (go test -count=N runs a test N times; the build is the slow part
// of a short process test).
var builtBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildProtctl returns the protctl binary (built without -race, whatever
// the test run uses), building it at the first call. PROTCTL_TEST_BIN
// names a binary to use instead: the process tests then run against
// another build, e.g. an older commit's, to show that a test fails there.
func buildProtctl(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds protctl and runs node processes")
	}
	if bin := os.Getenv("PROTCTL_TEST_BIN"); bin != "" {
		return bin
	}
	b := &builtBinary
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "protctl-test-bin-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "protctl")
		if out, err := exec.Command("go", "build", "-o", b.path, ".").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
