package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The binary links bubbletea only through internal/third_party/bubbletea:
// upstream v1's package init queries the terminal before main runs
// (internal/third_party/README.md), so linking it again, directly or
// through a bubbles component, would bring the query back for every
// command.
func TestBinaryLinksNoUpstreamBubbleTea(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	var copied bool
	for _, d := range deps {
		switch {
		case d == "github.com/charmbracelet/bubbletea" || strings.HasPrefix(d, "github.com/charmbracelet/bubbletea/"):
			t.Errorf("protctl links %s, whose init queries the terminal: use internal/third_party/bubbletea", d)
		case d == "github.com/protctl/protctl/internal/third_party/bubbletea":
			copied = true
		}
	}
	// The check can fail: the dashboard does link bubbletea, the copy.
	if !copied {
		t.Errorf("protctl does not link internal/third_party/bubbletea: the check above would pass vacuously\n%s", out)
	}
}
