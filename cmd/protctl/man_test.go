package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/output"
)

// availableCommands is every command a user can run (no hidden ones),
// root included, by path.
func availableCommands(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	for _, sub := range root.Commands() {
		if sub.IsAvailableCommand() {
			out = append(out, availableCommands(sub)...)
		}
	}
	return out
}

// TestManPageForEveryCommand generates the pages and checks that each
// available command has one with its name, synopsis, flags and examples,
// that the root page lists every exit code, and that groff reads every
// page without a warning.
func TestManPageForEveryCommand(t *testing.T) {
	dir := t.TempDir()
	r := newCLI(t).run("man", "--dir", dir, "--date", "2026-03-01", "--version", "v1.2.3")
	r.wantCode(t, 0)

	root := testRoot()
	cmds := availableCommands(root)
	files, _ := filepath.Glob(filepath.Join(dir, "*.1"))
	if len(files) != len(cmds) {
		t.Fatalf("%d pages for %d commands", len(files), len(cmds))
	}
	for _, c := range cmds {
		page, err := os.ReadFile(filepath.Join(dir, manName(c)+".1"))
		if err != nil {
			t.Fatalf("%s: %v", c.CommandPath(), err)
		}
		p := string(page)
		for _, want := range []string{
			`.TH "` + roffEscape(strings.ToUpper(manName(c))) + `" 1 "2026-03-01" "protctl v1.2.3"`,
			".SH NAME\n" + roffEscape(manName(c)) + ` \- ` + roffEscape(c.Short) + "\n",
			".SH SYNOPSIS\n.B " + roffEscape(c.CommandPath()) + "\n",
		} {
			if !strings.Contains(p, want) {
				t.Errorf("%s page lacks %q", c.CommandPath(), want)
			}
		}
		for _, name := range localFlagNames(c) {
			if !strings.Contains(p, `\fB\-\-`+roffEscape(name)+`\fR`) {
				t.Errorf("%s page lacks --%s", c.CommandPath(), name)
			}
		}
		if c.Example != "" && !strings.Contains(p, ".SH EXAMPLES\n") {
			t.Errorf("%s page lacks its examples", c.CommandPath())
		}
		if c.HasParent() && !strings.Contains(p, ".BR "+roffEscape(manName(c.Parent()))+" (1)") {
			t.Errorf("%s page does not point to its parent", c.CommandPath())
		}
	}
	rootPage, _ := os.ReadFile(filepath.Join(dir, "protctl.1"))
	for _, k := range clierr.Kinds() {
		if !strings.Contains(string(rootPage), ".TP\n.B "+strconv.Itoa(k.Code)+"\n") {
			t.Errorf("root page lacks exit status %d", k.Code)
		}
	}
	if !strings.Contains(string(rootPage), ".B PROTCTL_REDIS\n") {
		t.Error("root page lacks the environment")
	}

	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("groff is not installed: pages not rendered")
	}
	for _, f := range files {
		cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z", f)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("groff on %s: %v\n%s", filepath.Base(f), err, stderr.String())
		}
	}
}

// TestManPageRendersAsWritten renders a page with groff and checks that
// what an operator copies from it is what protctl takes: options with
// ASCII hyphens, an example verbatim, an indented block kept as written.
func TestManPageRendersAsWritten(t *testing.T) {
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("groff is not installed")
	}
	dir := t.TempDir()
	newCLI(t).run("man", "--dir", dir, "--date", "2026-03-01").wantCode(t, 0)
	cmd := exec.Command(groff, "-man", "-Tascii", "-rLL=200n", filepath.Join(dir, "protctl-leases-ls.1"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	text := stripOverstrike(string(out))
	for _, want := range []string{
		"protctl leases ls --category shop::order --state expired -o json", // an example
		"held      the lease key exists; its TTL is shown",                 // an indented table, aligned
		"--category stringArray",                                           // a flag and its type
		"-o, --output string",                                              // a global flag with shorthand
	} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered page lacks %q:\n%s", want, text)
		}
	}
}

// stripOverstrike removes groff's -Tascii bold and underline (x\bx, _\bx).
func stripOverstrike(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i := 0; i < len(r); i++ {
		if i+1 < len(r) && r[i+1] == '\b' {
			continue
		}
		if r[i] == '\b' {
			continue
		}
		b.WriteRune(r[i])
	}
	return b.String()
}

func TestRoffEscape(t *testing.T) {
	cases := map[string]string{
		"--group G":          `\-\-group G`,
		`C:\path`:            `C:\epath`,
		".dot starts a line": `\&.dot starts a line`,
		"'quote too":         `\&'quote too`,
		"plain text":         "plain text",
	}
	for in, want := range cases {
		if got := roffEscape(in); got != want {
			t.Errorf("roffEscape(%q) = %q, want %q", in, got, want)
		}
	}
	if got := roffInlineCode("no `--yes` without a TTY"); got != `no \fB\-\-yes\fR without a TTY` {
		t.Errorf("roffInlineCode = %q", got)
	}
}

func TestManDate(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 5, 6, 23, 0, 0, 0, time.FixedZone("x", -3*3600)) }
	cases := []struct {
		flag, epoch, want string
		bad               bool
	}{
		{"2026-03-01", "", "2026-03-01", false},
		{"2026-03-01T23:30:00-02:00", "", "2026-03-02", false},
		{"", "1772366400", "2026-03-01", false},
		{"", "", "2026-05-07", false},
		{"March", "", "", true},
		{"", "soon", "", true},
	}
	for _, c := range cases {
		got, err := manDate(c.flag, c.epoch, now)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("manDate(%q, %q) = %q, %v; want %q (error %v)", c.flag, c.epoch, got, err, c.want, c.bad)
		}
	}
}

func TestManNeedsADirAndExits2(t *testing.T) {
	newCLI(t).run("man").wantCode(t, clierr.ExitUsage)
	newCLI(t).run("man", "--dir", t.TempDir(), "--date", "soon").wantCode(t, clierr.ExitUsage)
}

func TestManIsHidden(t *testing.T) {
	r := newCLI(t).run("--help")
	r.wantCode(t, 0)
	if strings.Contains(r.stdout, "\n  man ") {
		t.Fatalf("man is listed in help:\n%s", r.stdout)
	}
	names := []string{}
	for _, c := range availableCommands(testRoot()) {
		names = append(names, c.Name())
	}
	if slices.Contains(names, "man") || slices.Contains(names, "docs") {
		t.Fatalf("hidden commands get pages: %v", names)
	}
}

func localFlagNames(c *cobra.Command) []string {
	var names []string
	c.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" {
			names = append(names, f.Name)
		}
	})
	return names
}

// testRoot is the command tree on test streams, for tests that walk it.
func testRoot() *cobra.Command {
	ios, _, _, _ := output.Test()
	return newRootCmd(newFactory(ios))
}
