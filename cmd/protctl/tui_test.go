package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/internal/output"
	tea "github.com/protctl/protctl/internal/third_party/bubbletea"
	"github.com/protctl/protctl/internal/tui"
	"github.com/protctl/protctl/internal/tui/tuitest"
)

// TestTUIWithoutTerminal: without a terminal on stdin and stdout, `tui`
// (and its alias) exits 2 with a clear message, before reading the
// config or dialling anything (the Redis URL points nowhere).
func TestTUIWithoutTerminal(t *testing.T) {
	cases := []struct {
		name      string
		args      []string
		configure func(*output.IOStreams)
	}{
		{"no terminal", []string{"tui"}, nil},
		{"the alias", []string{"dashboard"}, nil},
		{"stdout is not a terminal", []string{"tui"}, func(s *output.IOStreams) { s.SetStdinTTY(true) }},
		{"stdin is not a terminal", []string{"tui"}, func(s *output.IOStreams) { s.SetStdoutTTY(true) }},
		{"json errors", []string{"tui", "-o", "json"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := newCLI(t)
			cl.env["PROTCTL_REDIS"] = "redis://127.0.0.1:1/0"
			cl.configure = c.configure
			r := cl.run(c.args...)
			r.wantCode(t, 2)
			if !strings.Contains(r.stderr, "needs a terminal") {
				t.Fatalf("stderr %q does not say a terminal is needed", r.stderr)
			}
			if slices.Contains(c.args, "json") && !strings.Contains(r.stderr, `"code":"USAGE"`) {
				t.Fatalf("stderr %q", r.stderr)
			}
			if r.stdout != "" {
				t.Fatalf("stdout %q", r.stdout)
			}
		})
	}
}

func TestTUIFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"tui", "--refresh", "10ms"},
		{"tui", "--view", "bogus"},
		{"tui", "--reap-min-idle", "-1s"},
		{"tui", "extra"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cl := newCLI(t)
			cl.tty = true
			cl.run(args...).wantCode(t, 2)
		})
	}
}

// TestTUIOnATerminal runs the real program on (simulated) terminal
// streams against a Redis fixture: it draws the dashboard and quits on q.
func TestTUIOnATerminal(t *testing.T) {
	e := newOpsEnv(t)
	cl := e.cli(true)
	// q once the first reads are drawn: the frames drawn until then are on stdout.
	want := []string{"protctl", "partitions [9]", "o-healthy"}
	cl.configure = func(s *output.IOStreams) { typeWhenShown(s, "q", want...) }
	r := cl.run("tui", "--refresh", "1h")
	r.wantCode(t, 0)
	for _, want := range want {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("stdout has no %q:\n%q", want, r.stdout)
		}
	}
}

// typeWhenShown makes s a terminal whose user types keys once the screen
// (s.Out) shows every one of want, then closes the input (EOF). A
// dashboard draws its data after reads that take as long as the machine
// makes them (over a second on a loaded CI runner), so typing after a
// fixed delay raced the first read. After a minute without them the keys
// are typed anyway: the test then fails on its own assertions, with what
// was drawn, instead of hanging.
func typeWhenShown(s *output.IOStreams, keys string, want ...string) {
	scr := &screen{w: s.Out}
	s.Out = scr
	s.In = &typist{scr: scr, keys: []byte(keys), want: want}
}

// screen is a terminal's output that the test can read while the program
// writes to it (from its renderer's goroutine); writes go on to w.
type screen struct {
	mu   sync.Mutex
	w    io.Writer
	seen bytes.Buffer
	next chan struct{} // closed at the next write
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen.Write(p)
	if s.next != nil {
		close(s.next)
		s.next = nil
	}
	return s.w.Write(p)
}

// shows reports whether the screen shows every one of want and, when it
// does not, returns a channel closed at the next write.
func (s *screen) shows(want []string) (bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range want {
		if !bytes.Contains(s.seen.Bytes(), []byte(w)) {
			if s.next == nil {
				s.next = make(chan struct{})
			}
			return false, s.next
		}
	}
	return true, nil
}

// typist is a terminal's input: keys typed once scr shows want, then EOF.
type typist struct {
	scr   *screen
	keys  []byte
	want  []string
	typed bool
}

func (k *typist) Read(p []byte) (int, error) {
	if k.typed {
		return 0, io.EOF
	}
	// Read runs on the program's input goroutine, where a test cannot
	// fail: it waits for each write until the screen shows want.
	timeout := time.After(time.Minute)
wait:
	for {
		shown, written := k.scr.shows(k.want)
		if shown {
			break
		}
		select {
		case <-written:
		case <-timeout:
			break wait // type anyway: the test's assertions say what was drawn
		}
	}
	k.typed = true
	return copy(p, k.keys), nil
}

// dashboard drives a tui.Model built exactly as `protctl tui` builds it
// (dashboardOptions over the factory's Inspector and Repairer), running
// the commands its keys start until they finish.
type dashboard struct {
	t *testing.T
	m *tui.Model
}

func newDashboard(t *testing.T, e *opsEnv) *dashboard {
	t.Helper()
	return newDashboardEnv(t, map[string]string{"PROTCTL_REDIS": e.srv.URL()}, func(*tuiOptions) {})
}

// newDashboardEnv is newDashboard with env as the process environment
// (PROTCTL_REDIS, PROTCTL_KAFKA, ...) and the `protctl tui` flags set by
// flags.
func newDashboardEnv(t *testing.T, env map[string]string, flags func(*tuiOptions)) *dashboard {
	t.Helper()
	ios, _, _, _ := output.Test()
	ios.SetTTY(true)
	f := newFactory(ios)
	f.Getenv = func(k string) string { return env[k] }
	t.Cleanup(f.close)
	root := newRootCmd(f) // binds the global flags' defaults
	_ = root
	opts := &tuiOptions{IO: ios, Settings: f.Settings, Inspector: f.Inspector, Repairer: f.Repairer,
		Operator: "protctl:test", Refresh: time.Hour, View: "partitions", ReapMinIdle: tui.DefaultReapMinIdle}
	flags(opts)
	dash, err := dashboardOptions(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	dash.Refresh = -1 // no ticks: the test reads by hand
	d := &dashboard{t: t, m: tui.New(dash)}
	d.m.Update(tea.WindowSizeMsg{Width: 160, Height: 40})
	d.run(d.m.Init())
	return d
}

func (d *dashboard) run(cmd tea.Cmd) {
	d.t.Helper()
	tuitest.Run(d.t, d.m, cmd)
}

func (d *dashboard) keys(ks ...string) {
	d.t.Helper()
	tuitest.Keys(d.t, d.m, ks...)
}

func (d *dashboard) typeText(s string) {
	for _, r := range s {
		d.keys(string(r))
	}
}

func (d *dashboard) wantView(parts ...string) {
	d.t.Helper()
	v := d.m.View()
	for _, p := range parts {
		if !strings.Contains(v, p) {
			d.t.Fatalf("the dashboard does not show %q:\n%s", p, v)
		}
	}
}

// TestTUIActionsMatchCLI: an action taken in the dashboard changes Redis
// exactly as the equivalent CLI command does. Two identical Protean
// fixtures on two servers; the dashboard acts on one, the CLI on the
// other; the state of both servers, normalised for what differs between
// two fixtures (entry ids and bodies carry the time they were written),
// must be the same afterwards, and differ from before.
func TestTUIActionsMatchCLI(t *testing.T) {
	cases := []struct {
		name    string
		filter  string   // selects the partition row
		keys    []string // the action and its answers
		cmdline string   // what the dialog shows
		cli     func(e *opsEnv) []string
	}{
		{
			name: "release a held lease", filter: "o-halted", keys: []string{"L"},
			cmdline: "protctl partitions release shop::order o-halted --group app.OrderProjector --force",
			cli: func(e *opsEnv) []string {
				return []string{"partitions", "release", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--force", "--yes"}
			},
		},
		{
			name: "reap a cold partition", filter: "o-cold", keys: []string{"R"},
			cmdline: "protctl partitions reap shop::order o-cold --min-idle 1h0m0s",
			cli: func(e *opsEnv) []string {
				return []string{"partitions", "reap", e.s.Orders, e.s.Cold, "--min-idle", "1h", "--yes"}
			},
		},
		{
			name: "dead-letter a poison head", filter: "o-halted", keys: []string{"D", "p", "o", "i", "s", "o", "n", "enter"},
			cmdline: "protctl partitions skip-head shop::order o-halted --group app.OrderProjector --reason poison",
			cli: func(e *opsEnv) []string {
				return []string{"partitions", "skip-head", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--reason", "poison", "--yes"}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			viaTUI, viaCLI := newOpsEnv(t), newOpsEnv(t)
			before := redisState(t, viaTUI.c)
			if other := redisState(t, viaCLI.c); other != before {
				t.Fatalf("the two fixtures differ before the action:\n%s", diffLines(before, other))
			}

			d := newDashboard(t, viaTUI)
			d.keys("/")
			d.typeText(c.filter)
			d.keys("enter")
			d.wantView(c.filter)
			d.keys(c.keys...)
			d.wantView(c.cmdline, "Apply 1 change?")
			d.keys("y")
			d.wantView("Result: 1 applied")
			d.keys("esc")

			// Audited as the command it stands for, target included, as
			// the CLI's apply is (issue 18 item 10).
			entries, err := audit.List(context.Background(), viaTUI.c, audit.ListOptions{Limit: 10})
			if err != nil || len(entries) != 1 {
				t.Fatalf("audit entries %d: %v", len(entries), err)
			}
			if en := entries[0]; en.CommandLine != c.cmdline || en.Via == "" {
				t.Errorf("audited as %q via %q, want %q via the dashboard", en.CommandLine, en.Via, c.cmdline)
			}

			viaCLI.run(c.cli(viaCLI)...).wantCode(t, 0)

			tuiState, cliState := redisState(t, viaTUI.c), redisState(t, viaCLI.c)
			if tuiState != cliState {
				t.Fatalf("the dashboard and the CLI left different states:\n%s", diffLines(cliState, tuiState))
			}
			if tuiState == before {
				t.Fatal("the action changed nothing")
			}
		})
	}
}

// redisState dumps every key of the server, normalised so that two
// fixtures built the same way at different times compare equal: stream
// entry ids become their position in the stream ("#3"), entry bodies
// their field names, and TTLs whether one is set.
func redisState(t *testing.T, c redis.UniversalClient) string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		typ := c.Type(ctx, k).Val()
		ttl := ""
		if d := c.PTTL(ctx, k).Val(); d > 0 {
			ttl = " (ttl)"
		}
		fmt.Fprintf(&b, "%s %s%s\n", typ, k, ttl)
		switch typ {
		case "string":
			fmt.Fprintf(&b, "  = %s\n", c.Get(ctx, k).Val())
		case "set":
			m := c.SMembers(ctx, k).Val()
			sort.Strings(m)
			fmt.Fprintf(&b, "  = %v\n", m)
		case "hash":
			h := c.HGetAll(ctx, k).Val()
			names := make([]string, 0, len(h))
			for n := range h {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				fmt.Fprintf(&b, "  %s = %s\n", n, h[n])
			}
		case "stream":
			writeStream(t, &b, c, k)
		}
	}
	return b.String()
}

func writeStream(t *testing.T, b *strings.Builder, c redis.UniversalClient, k string) {
	ctx := context.Background()
	entries := c.XRange(ctx, k, "-", "+").Val()
	pos := map[string]string{"0-0": "#0"}
	for i, e := range entries {
		pos[e.ID] = fmt.Sprintf("#%d", i+1)
		fields := make([]string, 0, len(e.Values))
		for f := range e.Values {
			fields = append(fields, f)
		}
		sort.Strings(fields)
		fmt.Fprintf(b, "  entry #%d %v\n", i+1, fields)
	}
	at := func(id string) string {
		if p, ok := pos[id]; ok {
			return p
		}
		return "gone"
	}
	groups := c.XInfoGroups(ctx, k).Val()
	for _, g := range groups {
		fmt.Fprintf(b, "  group %s pending %d delivered-up-to %s\n", g.Name, g.Pending, at(g.LastDeliveredID))
		pend, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: k, Group: g.Name, Start: "-", End: "+", Count: 1000}).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pend {
			fmt.Fprintf(b, "    pending %s to %s delivered %d\n", at(p.ID), p.Consumer, p.RetryCount)
		}
	}
}

func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out []string
	for _, l := range w {
		if !slices.Contains(g, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// TestTUIOperatorFixes drives the dashboard over a real Redis (issue 18
// item 10): the bar shows no stale text of an earlier command, a plan
// with nothing to apply closes on enter, :nodes without a service says
// one is needed, and a plan's REASON is wrapped, not cut, at 120 columns.
func TestTUIOperatorFixes(t *testing.T) {
	e := newOpsEnv(t)
	d := newDashboard(t, e)
	lastLine := func() string {
		lines := strings.Split(d.m.View(), "\n")
		return lines[len(lines)-1]
	}

	d.keys(":")
	d.typeText("parked")
	d.keys("enter")
	d.wantView("parked [")
	d.keys("/")
	d.typeText("x")
	if bar := lastLine(); strings.Contains(bar, "arked") || !strings.Contains(bar, "/x") {
		t.Errorf("filter bar after :parked then /x reads %q", bar)
	}
	d.keys("esc", "esc")

	d.keys(":")
	d.typeText("nodes")
	d.keys("enter")
	d.wantView("No service given", "--service")

	d.keys(":")
	d.typeText("partitions")
	d.keys("enter")
	d.m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	d.keys("/")
	d.typeText("o-lagging")
	d.keys("enter")
	d.wantView("o-lagging")
	d.keys("R")
	d.wantView("Nothing to apply", "enter or esc closes")
	v := d.m.View()
	for _, l := range strings.Split(v, "\n") {
		if w := lipgloss.Width(l); w > 120 {
			t.Errorf("line wider than the frame (%d): %q", w, l)
		}
	}
	flat := strings.Join(strings.Fields(v), " ")
	if !strings.Contains(flat, "(lagging)") {
		t.Errorf("the plan's REASON is cut; the dialog:\n%s", v)
	}
	d.keys("enter")
	if strings.Contains(d.m.View(), "Nothing to apply") {
		t.Errorf("enter did not close the plan with nothing to apply:\n%s", d.m.View())
	}
}
