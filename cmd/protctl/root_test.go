package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/pkg/broker"
)

// listener accepts on a loopback port and reports whether anything
// connected, to prove that a command did not dial.
func listener(t *testing.T) (url string, dialled func() bool) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return "redis://" + l.Addr().String() + "/0", func() bool {
		// A dial made by the finished command is already in the backlog,
		// so a short deadline is enough.
		_ = l.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
		c, err := l.Accept()
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
}

func TestHelpWorksAndNeverDials(t *testing.T) {
	url, dialled := listener(t)
	for _, args := range [][]string{
		{"--help"},
		{},
		{"version", "--help"},
		{"completion", "--help"},
		{"help", "version"},
	} {
		c := newCLI(t)
		c.env["PROTCTL_REDIS"] = url
		r := c.run(append(args, "--redis", url)...)
		r.wantCode(t, 0)
		if !strings.Contains(r.stdout, "Usage:") {
			t.Fatalf("%v: no usage in help:\n%s", args, r.stdout)
		}
		if r.f.redisClient != nil {
			t.Fatalf("%v: help created a Redis client", args)
		}
	}
	if dialled() {
		t.Fatal("help dialled Redis")
	}
}

func TestRootHelpListsCommandsAndGlobalFlags(t *testing.T) {
	r := newCLI(t).run("--help")
	r.wantCode(t, 0)
	for _, want := range []string{"version", "completion", "--redis", "--kafka", "--layout", "--context", "--config",
		"--output", "--no-headers", "--color", "--timeout", "--read-only", "--yes", "--dry-run", "--verbose", "Examples:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("root help lacks %q", want)
		}
	}
	if strings.Contains(r.stdout, "  docs ") {
		t.Error("the docs command is hidden")
	}
}

func TestEveryCommandHasExamples(t *testing.T) {
	f := newFactory(nil)
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%q has no Example", c.CommandPath())
		}
		if c.Short == "" {
			t.Errorf("%q has no Short", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	f.IOStreams, _, _, _ = output.Test()
	walk(newRootCmd(f))
}

// errCmd returns a command "fail" that returns err.
func errCmd(err error) *cobra.Command {
	return &cobra.Command{
		Use: "fail", Short: "fail", Example: "fail",
		RunE: func(cmd *cobra.Command, args []string) error { return err },
	}
}

func TestErrorsMapToExitCodes(t *testing.T) {
	// msg is what the operator reads: the error's text without the
	// library's package prefixes ("broker: ").
	cases := []struct {
		name string
		err  error
		code int
		kind string
		msg  string
	}{
		{"internal", errors.New("boom"), 1, "INTERNAL", ""},
		{"unavailable", fmt.Errorf("ping: %w", broker.ErrUnavailable), 3, "UNAVAILABLE", "ping: unavailable"},
		{"invalid argument", &broker.InvalidArgumentError{Op: "trim", Arg: "maxLen", Value: "0", Reason: "must be positive"}, 2, "USAGE", "trim: invalid maxLen 0: must be positive"},
		{"wrong type", fmt.Errorf("inspect: list: %w", &broker.WrongTypeError{Op: "read lane", Key: "c:k", Want: "stream", Got: "string"}), 9, "WRONG_TYPE", `list: read lane: key "c:k" holds a string, want a stream`},
		{"not found", clierr.NotFound.Errorf("no partition %q", "k"), 4, "NOT_FOUND", ""},
		{"conflict", clierr.Conflict.Errorf("lease moved"), 5, "CONFLICT", ""},
		{"refused", clierr.Refused.Errorf("live owner"), 6, "REFUSED", ""},
		{"partial", clierr.Partial.Errorf("2 of 3 applied"), 7, "PARTIAL", ""},
		{"check failed", clierr.CheckFailed.Errorf("3 parked"), 8, "CHECK_FAILED", ""},
		{"timeout", fmt.Errorf("read: %w", context.DeadlineExceeded), 3, "UNAVAILABLE", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := newCLI(t)
			cl.extra = with(errCmd(c.err))
			if c.msg == "" {
				c.msg = c.err.Error()
			}
			r := cl.run("fail")
			r.wantCode(t, c.code)
			if r.stderr != "protctl: "+c.msg+"\n" {
				t.Fatalf("stderr %q", r.stderr)
			}
			r = cl.run("fail", "-o", "json")
			r.wantCode(t, c.code)
			var doc struct {
				Error struct {
					Code     string `json:"code"`
					Message  string `json:"message"`
					ExitCode int    `json:"exitCode"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(r.stderr), &doc); err != nil {
				t.Fatalf("stderr is not one JSON object: %v\n%s", err, r.stderr)
			}
			if doc.Error.Code != c.kind || doc.Error.Message != c.msg || doc.Error.ExitCode != c.code {
				t.Fatalf("JSON error %+v", doc.Error)
			}
			if r.stdout != "" || strings.Count(r.stderr, "\n") != 1 {
				t.Fatalf("stdout %q, stderr %q: want nothing on stdout, one line on stderr", r.stdout, r.stderr)
			}
		})
	}
}

func TestInterruptedExits130(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cl := newCLI(t)
	cl.ctx = ctx
	cl.extra = with(&cobra.Command{
		Use: "wait", Short: "wait", Example: "wait",
		RunE: func(cmd *cobra.Command, args []string) error {
			cancel(clierr.ErrInterrupted) // as the first SIGINT does
			<-cmd.Context().Done()
			return cmd.Context().Err()
		},
	})
	cl.run("wait").wantCode(t, 130)
}

func TestUsageErrorsExit2(t *testing.T) {
	required := &cobra.Command{Use: "needs", Short: "needs", Example: "needs", RunE: func(*cobra.Command, []string) error { return nil }}
	required.Flags().String("group", "", "")
	_ = required.MarkFlagRequired("group")
	exclusive := &cobra.Command{Use: "either", Short: "either", Example: "either", RunE: func(*cobra.Command, []string) error { return nil }}
	exclusive.Flags().Bool("all", false, "")
	exclusive.Flags().String("key", "", "")
	exclusive.MarkFlagsMutuallyExclusive("all", "key")
	group := &cobra.Command{Use: "things", Short: "things", Example: "things ls"}
	group.AddCommand(&cobra.Command{Use: "ls", Short: "ls", Example: "ls", RunE: func(*cobra.Command, []string) error { return nil }})

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown command", []string{"verison"}, `unknown command "verison" for "protctl"; did you mean version?`},
		{"unknown flag", []string{"version", "--bogus"}, "unknown flag: --bogus"},
		{"bad flag value", []string{"version", "--timeout", "soon"}, "invalid argument"},
		{"extra argument", []string{"version", "extra"}, `unknown command "extra" for "protctl version"`},
		{"bad output format", []string{"version", "-o", "xml"}, "invalid output format"},
		{"bad colour", []string{"version", "--color", "rainbow"}, "invalid --color"},
		{"bad layout", []string{"version", "--layout", "sharded"}, "invalid --layout"},
		{"negative timeout", []string{"version", "--timeout", "-1s"}, "invalid --timeout"},
		{"completion needs a shell", []string{"completion"}, "accepts 1 arg(s)"},
		{"completion of an unknown shell", []string{"completion", "tcsh"}, `invalid argument "tcsh"`},
		{"missing required flag", []string{"needs"}, `required flag(s) "group" not set`},
		{"mutually exclusive flags", []string{"either", "--all", "--key", "k"}, "none of the others can be"},
		{"unknown subcommand of a group", []string{"things", "rm"}, `unknown command "rm" for "protctl things"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := newCLI(t)
			cl.extra = with(required, exclusive, group)
			r := cl.run(c.args...)
			r.wantCode(t, 2)
			if !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "--help' for usage.") {
				t.Fatalf("stderr %q, want it to contain %q and a pointer to --help", r.stderr, c.want)
			}
		})
	}
}

func TestGroupAloneShowsHelp(t *testing.T) {
	group := &cobra.Command{Use: "things", Short: "things", Example: "things ls"}
	group.AddCommand(&cobra.Command{Use: "ls", Short: "list things", Example: "ls", RunE: func(*cobra.Command, []string) error { return nil }})
	cl := newCLI(t)
	cl.extra = with(group)
	r := cl.run("things")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "protctl things [command]") || strings.Contains(r.stdout, "protctl things [flags]") {
		t.Fatalf("group help:\n%s", r.stdout)
	}
}

func TestUsageErrorIsJSONEvenBeforeFlagsParse(t *testing.T) {
	for _, args := range [][]string{
		{"--bogus", "-o", "json"},
		{"-ojson", "--bogus"},
		{"--output=jsonl", "nope"},
	} {
		r := newCLI(t).run(args...)
		r.wantCode(t, 2)
		var doc map[string]map[string]any
		if err := json.Unmarshal([]byte(r.stderr), &doc); err != nil || doc["error"]["code"] != "USAGE" {
			t.Fatalf("%v: stderr %q is not a JSON usage error (%v)", args, r.stderr, err)
		}
	}
}

// needsRedis is a command that asks the factory for the Redis client and
// pings it.
func needsRedis(f *Factory) []*cobra.Command {
	return []*cobra.Command{{
		Use: "needredis", Short: "n", Example: "n",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.RedisClient()
			if err != nil {
				return err
			}
			return c.Ping(cmd.Context()).Err()
		},
	}}
}

func TestConfigErrorsExit2(t *testing.T) {
	cl := newCLI(t)
	cl.extra = needsRedis
	r := cl.run("needredis", "--context", "prod")
	r.wantCode(t, 2)
	if !strings.Contains(r.stderr, `no such context "prod"`) {
		t.Fatalf("stderr %q", r.stderr)
	}
	r = cl.run("needredis", "--redis", "http://example.invalid/")
	r.wantCode(t, 2)
	if !strings.Contains(r.stderr, "invalid Redis URL") {
		t.Fatalf("stderr %q", r.stderr)
	}
}

func TestUnreachableRedisExits3(t *testing.T) {
	// A loopback port nobody listens on: the dial is refused at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cl := newCLI(t)
	cl.extra = needsRedis
	r := cl.run("needredis", "--redis", "redis://"+addr+"/0", "--timeout", "2s", "-o", "json")
	r.wantCode(t, 3)
	if !strings.Contains(r.stderr, `"code":"UNAVAILABLE"`) {
		t.Fatalf("stderr %q", r.stderr)
	}
}
