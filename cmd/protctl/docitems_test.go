package main

import (
	"os"
	"strings"
	"testing"
)

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

// docs/operations.md agrees with the binary (issue 18 item 9): a retried
// aggregate that fails again is parked with its attempts added (the
// runtime's TestRedisRetryKeepsCountingAttempts and
// TestTopicRetryKeepsCountingAttempts), and the reap runbook gives exit 7
// for a partly refused reap (outcomeErr, dryRunErr).
func TestOperationsDocMatchesBinary(t *testing.T) {
	ops := readDoc(t, "../../docs/operations.md")
	for _, want := range []string{
		"attempts go on counting from those it was parked with",
		"ATTEMPTS 6", "`PROTCTL_ATTEMPT` 4, 5, 6",
		"exits 7 (partly refused)",
	} {
		if !strings.Contains(ops, want) {
			t.Errorf("docs/operations.md lacks %q", want)
		}
	}
}

// The README warns that the first go run compiles the whole module and
// offers go install for repeated use (issue 18 item 14).
func TestREADMEQuickStartSaysTheFirstRunCompiles(t *testing.T) {
	readme := readDoc(t, "../../README.md")
	for _, want := range []string{"The first `go run` compiles the whole module", "go install ./cmd/protctl"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}
