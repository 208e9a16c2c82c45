package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/cli.md from the command tree")

const cliDocPath = "../../docs/cli.md"

// TestCLIDocIsUpToDate fails when docs/cli.md does not match the command
// tree, so the reference can never drift from the binary.
func TestCLIDocIsUpToDate(t *testing.T) {
	r := newCLI(t).run("docs")
	r.wantCode(t, 0)
	if *update {
		if err := os.WriteFile(cliDocPath, []byte(r.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(cliDocPath)
	if err != nil {
		t.Fatalf("%v\nregenerate it with: make docs (or go test ./cmd/protctl -run TestCLIDocIsUpToDate -update)", err)
	}
	if string(have) != r.stdout {
		t.Fatalf("docs/cli.md is out of date with the command tree (first difference at line %d);\n"+
			"regenerate it with: make docs (or go test ./cmd/protctl -run TestCLIDocIsUpToDate -update)",
			firstDiffLine(string(have), r.stdout))
	}
}

func TestCLIDocCoversTheContract(t *testing.T) {
	r := newCLI(t).run("docs")
	r.wantCode(t, 0)
	for _, want := range []string{
		"| 130 | `INTERRUPTED` |", "| 6 | `REFUSED` |", "| 0 | | success",
		`{"apiVersion":"protctl.dev/v1","kind":"PartitionList","items":[...]}`,
		"integer milliseconds", "RFC 3339", "lowerCamelCase", "`null`",
		"### protctl version", "### protctl completion", "--redis string",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("docs/cli.md lacks %q", want)
		}
	}
	if strings.Contains(r.stdout, "protctl docs") && strings.Contains(r.stdout, "### protctl docs") {
		t.Error("the hidden docs command is not documented")
	}
}

func TestDocsWritesAFile(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cli.md")
	newCLI(t).run("docs", "--file", out).wantCode(t, 0)
	if b, err := os.ReadFile(out); err != nil || !strings.HasPrefix(string(b), "# protctl command line reference") {
		t.Fatalf("docs --file: %v", err)
	}
}

func firstDiffLine(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}
