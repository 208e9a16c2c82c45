package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/output"
)

// cli runs protctl in-process with test streams and an empty environment
// (plus env), so the host's PROTCTL_* and config file never leak in.
type cli struct {
	t     *testing.T
	tty   bool
	env   map[string]string
	stdin string
	// extra commands added to the tree before it is finished, to exercise
	// the error paths with commands that return chosen errors.
	extra func(f *Factory) []*cobra.Command
	ctx   context.Context
	// configure runs on the streams before execution.
	configure func(*output.IOStreams)
}

type result struct {
	code   int
	stdout string
	stderr string
	f      *Factory
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	return &cli{t: t, env: map[string]string{"HOME": t.TempDir(), "XDG_CONFIG_HOME": t.TempDir()}}
}

func (c *cli) run(args ...string) result {
	c.t.Helper()
	ios, in, out, errOut := output.Test()
	ios.SetTTY(c.tty)
	in.WriteString(c.stdin)
	if c.configure != nil {
		c.configure(ios)
	}
	f := newFactory(ios)
	f.Getenv = func(k string) string { return c.env[k] }
	root := newRootCmd(f)
	if c.extra != nil {
		root.AddCommand(c.extra(f)...)
		finishTree(root)
	}
	ctx := c.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	code := execute(ctx, f, root, args)
	return result{code: code, stdout: out.String(), stderr: errOut.String(), f: f}
}

func (r result) wantCode(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
}

func hasANSI(s string) bool { return strings.Contains(s, "\x1b[") }

// with returns an extra-commands function adding fixed commands.
func with(cmds ...*cobra.Command) func(*Factory) []*cobra.Command {
	return func(*Factory) []*cobra.Command { return cmds }
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// refusals returns the lines of a node's log that tell of a Redis
// refusal (NOPERM, "permission"), leaving out the one refusal a node
// expects under the ACL profiles: its probe for stream append events
// (CONFIG GET notify-keyspace-events), which the node role does not grant
// on purpose (docs/security.md); the node then finds new keys by polling
// the index.
func refusals(logs string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, "NOPERM") && !strings.Contains(line, "permission") {
			continue
		}
		if strings.Contains(line, `msg="no append events`) && strings.Contains(line, "'config|get'") {
			continue
		}
		out = append(out, line)
	}
	return out
}
