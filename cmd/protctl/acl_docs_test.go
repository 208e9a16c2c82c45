package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

const securityDocPath = "../../docs/security.md"

// securityBlockRe matches a command in an HTML comment and the fenced
// block right after it, which holds the command's output.
var securityBlockRe = regexp.MustCompile("(?s)<!-- (protctl acl print [^>]*?) -->\n```text\n(.*?)```\n")

// TestSecurityDocMatchesACLPrint: every rules block of docs/security.md
// is exactly what the command named above it prints, so the documented
// rules cannot drift from the ones protctl derives. go test -update
// rewrites the blocks.
func TestSecurityDocMatchesACLPrint(t *testing.T) {
	b, err := os.ReadFile(securityDocPath)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		b = securityBlockRe.ReplaceAllFunc(b, func(block []byte) []byte {
			m := securityBlockRe.FindSubmatch(block)
			r := newCLI(t).run(strings.Fields(string(m[1]))[1:]...)
			r.wantCode(t, 0)
			return []byte("<!-- " + string(m[1]) + " -->\n```text\n" + r.stdout + "```\n")
		})
		if err := os.WriteFile(securityDocPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	blocks := securityBlockRe.FindAllStringSubmatch(string(b), -1)
	if len(blocks) < 6 {
		t.Fatalf("docs/security.md has %d rules blocks, want at least 6 (3 roles x 2 layouts)", len(blocks))
	}
	roles := map[string]bool{}
	for _, m := range blocks {
		args := strings.Fields(m[1])[1:]
		r := newCLI(t).run(args...)
		r.wantCode(t, 0)
		if r.stdout != m[2] {
			t.Errorf("docs/security.md: the block under %q is not what it prints (go test ./cmd/protctl -run TestSecurityDoc -update rewrites it):\n--- doc:\n%s--- printed:\n%s", m[1], m[2], r.stdout)
		}
		for i, a := range args {
			if a == "--role" && i+1 < len(args) {
				roles[args[i+1]] = true
			}
		}
	}
	for _, role := range []string{"readonly", "operator", "node"} {
		if !roles[role] {
			t.Errorf("docs/security.md shows no rules of the %s role", role)
		}
	}
}
