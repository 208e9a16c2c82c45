package main

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// completion is what `protctl __complete ...` answered: the candidates
// (descriptions cut off) and the directive.
type completion struct {
	items     []string
	directive cobra.ShellCompDirective
	elapsed   time.Duration
}

func runComplete(t *testing.T, cl *cli, args ...string) completion {
	t.Helper()
	start := time.Now()
	r := cl.run(append([]string{cobra.ShellCompRequestCmd}, args...)...)
	elapsed := time.Since(start)
	r.wantCode(t, 0)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, ":") {
		t.Fatalf("no directive line in %q", r.stdout)
	}
	d, err := strconv.Atoi(last[1:])
	if err != nil {
		t.Fatalf("directive %q: %v", last, err)
	}
	var items []string
	for _, l := range lines[:len(lines)-1] {
		name, _, _ := strings.Cut(l, "\t")
		if strings.HasPrefix(name, "-") {
			continue // cobra offers required flags (streams trim --maxlen) on its own
		}
		items = append(items, name)
	}
	return completion{items: items, directive: cobra.ShellCompDirective(d), elapsed: elapsed}
}

// TestDynamicCompletionReadsRedis completes every kind of name from a real
// redis-server holding the Protean scenario, a registered group, a parked
// entry and two live nodes, each answer within completionTimeout.
func TestDynamicCompletionReadsRedis(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	testenv.Protean(t, e.c).Category(s.Orders).RegisterGroup("app.Registered")
	e.park()
	e.heartbeat()
	for _, g := range []redisstore.LeaseGroup{
		redisstore.TopicLeaseGroup("shop", "orders"), redisstore.TopicLeaseGroup("shop", "payments"),
		redisstore.TopicLeaseGroup("billing", "invoices"),
	} {
		e.c.Set(context.Background(), g.GenerationKey(0), 1, 0)
	}

	const nofile = cobra.ShellCompDirectiveNoFileComp
	cases := []struct {
		name string
		args []string
		want []string
		dir  cobra.ShellCompDirective
	}{
		{"categories", []string{"partitions", "ls", ""}, []string{s.Payments, s.Orders}, nofile},
		{"categories by prefix", []string{"partitions", "ls", "shop"}, []string{s.Orders}, nofile},
		{"categories repeat", []string{"partitions", "ls", s.Orders, ""}, []string{s.Payments, s.Orders}, nofile},
		{"keys of the category", []string{"partitions", "show", s.Orders, ""},
			[]string{s.Backfill, s.Cold, s.Halted, s.Healthy, s.Lagging, s.Never}, nofile},
		{"keys by prefix (SSCAN MATCH)", []string{"partitions", "show", s.Orders, "o-h"}, []string{s.Halted, s.Healthy}, nofile},
		{"a prefix with glob characters matches literally", []string{"partitions", "show", s.Orders, "o-*"}, nil, nofile},
		{"keys already given are left out", []string{"partitions", "reap", s.Orders, s.Cold, s.Never, "o-"},
			[]string{s.Backfill, s.Halted, s.Healthy, s.Lagging}, nofile},
		{"nothing after the last argument", []string{"partitions", "show", s.Orders, s.Halted, ""}, nil, nofile},
		{"groups of a partition and the registry", []string{"partitions", "release", s.Orders, s.Halted, "--group", ""},
			[]string{"app.OrderProjector", "app.Registered"}, nofile},
		{"groups sampled from --category", []string{"leases", "ls", "--category", s.Payments, "--group", ""},
			[]string{s.Audit, s.Ledger}, nofile},
		{"groups of every category", []string{"leases", "ls", "--group", "a"},
			[]string{"app.OrderProjector", "app.Registered", s.Audit}, nofile},
		{"category flag", []string{"check", "--category", "bil"}, []string{s.Payments}, nofile},
		{"streams: categories first, no space", []string{"streams", "trim", "bil"}, []string{s.Payments + ":"}, nofile | cobra.ShellCompDirectiveNoSpace},
		{"streams: then the category's partitions", []string{"streams", "trim", s.Payments + ":"},
			[]string{s.Payments + ":" + s.Pay1, s.Payments + ":" + s.Ghost}, nofile},
		{"subscriptions from the ledger", []string{"parked", "ls", "--subscription", ""}, []string{s.Projector}, nofile},
		{"subscription argument", []string{"parked", "show", ""}, []string{s.Projector}, nofile},
		{"parked aggregates of the subscription", []string{"parked", "retry", s.Projector, ""}, []string{s.Halted}, nofile},
		{"services of live nodes", []string{"nodes", "ls", "--service", ""}, []string{"shop"}, nofile},
		{"topics of every service", []string{"topics", "ls", ""}, []string{"invoices", "orders", "payments"}, nofile},
		{"topics of --service", []string{"topics", "show", "--service", "shop", ""}, []string{"orders", "payments"}, nofile},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := runComplete(t, e.cli(false), c.args...)
			if !slices.Equal(got.items, c.want) {
				t.Fatalf("completions %q, want %q", got.items, c.want)
			}
			if got.directive != c.dir {
				t.Fatalf("directive %d, want %d", got.directive, c.dir)
			}
			// The lookup is cut at completionTimeout; the slack is for
			// the in-process command tree on a busy machine.
			if limit := 2 * completionTimeout; got.elapsed > limit {
				t.Fatalf("took %s, more than %s", got.elapsed, limit)
			}
		})
	}
}

// TestDynamicCompletionNeverHangs points completion at a closed port and at
// a redis-server that is stopped (SIGSTOP: it accepts connections and
// never answers, like a host that went away mid-session): each answer is
// the error directive, no candidates, within the timeout and some slack.
func TestDynamicCompletionNeverHangs(t *testing.T) {
	paused := testenv.StartRedis(t)
	if err := paused.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = paused.Resume() })
	servers := map[string]string{"closed port": closedPort(t), "stopped server": paused.URL()}
	for name, url := range servers {
		for _, args := range [][]string{
			{"partitions", "ls", ""},
			{"partitions", "show", "shop::order", ""},
			{"partitions", "release", "shop::order", "o-1", "--group", ""},
			{"parked", "ls", "--subscription", ""},
			{"streams", "trim", ""},
		} {
			t.Run(name+"/"+strings.Join(args[:2], " "), func(t *testing.T) {
				cl := newCLI(t)
				cl.env["PROTCTL_REDIS"] = url
				got := runComplete(t, cl, args...)
				if len(got.items) != 0 {
					t.Fatalf("candidates %q from an unreachable server", got.items)
				}
				want := cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
				if got.directive != want {
					t.Fatalf("directive %d, want %d", got.directive, want)
				}
				if limit := 2 * completionTimeout; got.elapsed > limit {
					t.Fatalf("took %s, want at most %s", got.elapsed, limit)
				}
			})
		}
	}
}

// TestDynamicCompletionIsWiredByUseLine lists which commands complete
// which arguments and flags, read from the tree: a command that renames
// a placeholder or a flag fails here rather than silently losing its
// completion. New commands get completion by the same rules; they are
// logged, not failed.
func TestDynamicCompletionIsWiredByUseLine(t *testing.T) {
	want := map[string][]string{
		"protctl partitions ls":        {"args", "--group"},
		"protctl partitions show":      {"args"},
		"protctl partitions reap":      {"args"},
		"protctl partitions release":   {"args", "--group"},
		"protctl partitions skip-head": {"args", "--group"},
		"protctl partitions fsck":      {"args"},
		"protctl leases ls":            {"--category", "--group"},
		"protctl streams trim":         {"args"},
		"protctl parked ls":            {"--subscription"},
		"protctl parked show":          {"args"},
		"protctl parked retry":         {"args", "--subscription"},
		"protctl parked skip":          {"args", "--subscription"},
		"protctl nodes ls":             {"--service"},
		"protctl check":                {"--category", "--subscription", "--service"},
		"protctl publish":              {"args"},
		"protctl tui":                  {"--category", "--service"},
		"protctl topics ls":            {"args", "--subscription", "--service"},
		"protctl topics show":          {"args", "--subscription", "--service"},
	}
	root := testRoot()
	got := map[string][]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		var wired []string
		if c.ValidArgsFunction != nil {
			wired = append(wired, "args")
		}
		for _, name := range []string{"category", "group", "subscription", "service"} {
			if c.LocalFlags().Lookup(name) == nil {
				continue
			}
			if _, ok := c.GetFlagCompletionFunc(name); ok {
				wired = append(wired, "--"+name)
			}
		}
		if len(wired) > 0 && c.Name() != "use" { // context use completes context names itself
			got[c.CommandPath()] = wired
		}
	}
	walk(root)
	for path, w := range want {
		if !slices.Equal(got[path], w) {
			t.Errorf("%s completes %v, want %v", path, got[path], w)
		}
	}
	for path, g := range got {
		if _, ok := want[path]; !ok {
			t.Logf("%s completes %v (a command this list does not know yet)", path, g)
		}
	}
}

func TestUsePlaceholders(t *testing.T) {
	cases := map[string][]placeholder{
		"show CATEGORY KEY":                    {{argCategory, false}, {argKey, false}},
		"reap CATEGORY [KEY...]":               {{argCategory, false}, {argKey, true}},
		"ls [CATEGORY...]":                     {{argCategory, true}},
		"retry SUBSCRIPTION AGGREGATE | --all": {{argSubscription, false}, {argAggregate, false}},
		"trim STREAM --maxlen N":               {{argStream, false}},
		"apply -f PLAN":                        nil,
		"ls --service S [TOPIC...]":            {{argTopic, true}},
		"show TOPIC --service S":               {{argTopic, false}},
		"release CATEGORY KEY --group G":       {{argCategory, false}, {argKey, false}},
		"completion bash|zsh|fish|powershell":  nil,
		"version":                              nil,
	}
	for use, want := range cases {
		if got := usePlaceholders(use); !slices.Equal(got, want) {
			t.Errorf("usePlaceholders(%q) = %v, want %v", use, got, want)
		}
	}
}

// TestCompletionScriptsParse checks that each generated script is valid
// for its shell, where the shell is installed (bash always is).
func TestCompletionScriptsParse(t *testing.T) {
	shells := map[string][]string{
		"bash": {"bash", "-n"},
		"zsh":  {"zsh", "-n"},
		"fish": {"fish", "--no-execute"},
	}
	for shell, check := range shells {
		t.Run(shell, func(t *testing.T) {
			if _, err := exec.LookPath(check[0]); err != nil {
				t.Skipf("%s is not installed", check[0])
			}
			r := newCLI(t).run("completion", shell)
			r.wantCode(t, 0)
			path := t.TempDir() + "/protctl." + shell
			writeFile(t, path, r.stdout)
			if out, err := exec.Command(check[0], append(check[1:], path)...).CombinedOutput(); err != nil {
				t.Fatalf("%s rejects the script: %v\n%s", shell, err, out)
			}
		})
	}
}

// TestBashCompletesKeysEndToEnd runs the bash completion function the way
// bash does on <TAB>, with the release-built binary against redis-server:
// category names contain "::", which bash splits words on unless the
// script handles it.
func TestBashCompletesKeysEndToEnd(t *testing.T) {
	const bashCompletion = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(bashCompletion); err != nil {
		t.Skip("the bash-completion package is not installed (scripts/test installs it)")
	}
	bin := releaseBinary(t)
	e := newOpsEnv(t)
	script := t.TempDir() + "/protctl.bash"
	r := newCLI(t).run("completion", "bash")
	r.wantCode(t, 0)
	writeFile(t, script, r.stdout)

	cases := []struct {
		line string
		want []string
	}{
		{"protctl partitions show shop::order o-h", []string{"o-halted", "o-healthy"}},
		{"protctl partitions show sho", []string{"shop::order"}},
		{"protctl partitions release shop::order o-halted --group app.", []string{"app.OrderProjector"}},
		{"protctl streams trim billing::payment:p", []string{"billing::payment:p-1", "billing::payment:p-ghost"}},
	}
	for _, c := range cases {
		t.Run(c.line, func(t *testing.T) {
			prog := `source ` + bashCompletion + `
source "$SCRIPT"
COMP_LINE="$LINE"; COMP_POINT=${#COMP_LINE}
COMP_WORDBREAKS=${COMP_WORDBREAKS:-$' \t\n"\'><=;|&(:'}
# split as readline does: on blanks and on the word-break characters (':' too)
read -r -a words <<< "$(sed -E 's/(:+)/ \1 /g' <<< "$COMP_LINE")"
COMP_WORDS=("$BIN" "${words[@]:1}")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
__start_protctl
printf '%s\n' "${COMPREPLY[@]}"`
			cmd := exec.Command("bash", "-c", prog)
			cmd.Env = append(os.Environ(), "SCRIPT="+script, "BIN="+bin, "LINE="+c.line, "PROTCTL_REDIS="+e.srv.URL(), "NO_COLOR=1")
			var stderr strings.Builder
			cmd.Stderr = &stderr // compopt complains outside a real completion; harmless
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("bash: %v\n%s%s", err, out, stderr.String())
			}
			got := strings.Fields(string(out))
			slices.Sort(got)
			// bash-completion trims what precedes the last ':' (it is
			// already on the line), so compare the suffixes.
			var want []string
			for _, w := range c.want {
				if strings.Contains(c.line[strings.LastIndex(c.line, " ")+1:], ":") {
					w = w[strings.LastIndex(w, ":")+1:]
				}
				want = append(want, w)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("COMPREPLY %q, want %q", got, want)
			}
		})
	}
}
