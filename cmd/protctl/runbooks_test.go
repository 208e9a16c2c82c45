package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"gopkg.in/yaml.v3"

	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// The runbooks of docs/operations.md are run here, command by command,
// from the file itself: each ```sh runbook=NAME block holds protctl
// command lines, and this test runs them in order against a fixture in
// the state the runbook describes, checking each exit code and the output
// the runbook's text explains. A runbook in the doc without a definition
// here fails, and so does a definition whose commands differ from the
// doc's, so the two cannot drift.

const operationsDoc = "../../docs/operations.md"

// runbookNames are the incidents docs/operations.md must cover.
var runbookNames = []string{
	"stuck-parked", "stuck-protean", "dlq-replay", "retry-class", "node-died", "node-fenced", "redis-restarted",
	"stream-growth", "reap-cold", "consumers-pile-up", "kafka-partitions", "redis-to-cluster",
	"replay-deploy",
}

// rbCommand is one command line of a runbook block.
type rbCommand struct {
	line     int      // in docs/operations.md
	text     string   // as written
	args     []string // after "protctl"
	redirect string   // "> FILE": stdout goes to FILE
}

// docRunbooks are the runbook blocks of docs/operations.md: the commands
// of each sh block and the text of other blocks (yaml), by name, in order.
type docRunbooks struct {
	order    []string
	commands map[string][]rbCommand
	files    map[string][]string // name -> yaml blocks
}

var fenceRE = regexp.MustCompile("^\\s*```(\\w+)(?:\\s+(.*))?$")

func parseRunbooks(path string) (*docRunbooks, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &docRunbooks{commands: map[string][]rbCommand{}, files: map[string][]string{}}
	sc := bufio.NewScanner(f)
	n := 0
	var (
		in       bool
		name     string
		lang     string
		body     []string
		start    int
		indent   string
		pending  string
		pendLine int
	)
	for sc.Scan() {
		n++
		line := sc.Text()
		if !in {
			m := fenceRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			in, lang, name, body, start = true, m[1], "", nil, n
			indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
			for _, attr := range strings.Fields(m[2]) {
				if v, ok := strings.CutPrefix(attr, "runbook="); ok {
					name = v
				}
			}
			continue
		}
		if strings.TrimSpace(line) == "```" {
			in = false
			if name == "" {
				continue
			}
			if !slices.Contains(d.order, name) {
				d.order = append(d.order, name)
			}
			switch lang {
			case "sh":
				if pending != "" {
					return nil, fmt.Errorf("%s:%d: a command ends with a continuation", path, pendLine)
				}
				if len(body) == 0 {
					return nil, fmt.Errorf("%s:%d: empty runbook block %q", path, start, name)
				}
			default:
				d.files[name] = append(d.files[name], strings.Join(body, "\n")+"\n")
			}
			continue
		}
		line = strings.TrimPrefix(line, indent)
		if lang != "sh" || name == "" {
			body = append(body, line)
			continue
		}
		if pending == "" {
			pendLine = n
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			pending += cont + " "
			continue
		}
		text := strings.TrimSpace(pending + line)
		pending = ""
		words, redirect, err := shellSplit(text)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, pendLine, err)
		}
		if len(words) == 0 {
			continue // a comment or a blank line
		}
		if words[0] != "protctl" {
			return nil, fmt.Errorf("%s:%d: runbook %q: %q is not a protctl command; put other commands in a plain sh block", path, pendLine, name, text)
		}
		body = append(body, text)
		d.commands[name] = append(d.commands[name], rbCommand{line: pendLine, text: text, args: words[1:], redirect: redirect})
	}
	if in {
		return nil, fmt.Errorf("%s:%d: unterminated block", path, start)
	}
	return d, sc.Err()
}

// shellSplit splits a command line as sh would for the subset runbooks
// use: blanks separate words, '...' and "..." quote (with \" and \\ in
// double quotes), a backslash escapes the next character, # at the start
// of a word begins a comment, and "> FILE" at the end redirects stdout.
func shellSplit(s string) (words []string, redirect string, err error) {
	var (
		cur    strings.Builder
		inWord bool
		toFile bool
		flush  = func() {
			if !inWord {
				return
			}
			if toFile {
				redirect = cur.String()
			} else {
				words = append(words, cur.String())
			}
			cur.Reset()
			inWord = false
		}
	)
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == ' ' || r == '\t':
			flush()
		case r == '#' && !inWord:
			i = len(rs)
		case r == '>' && !inWord:
			if toFile {
				return nil, "", errors.New("more than one redirection")
			}
			toFile = true
		case r == '\'':
			inWord = true
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				cur.WriteRune(rs[j])
				j++
			}
			if j == len(rs) {
				return nil, "", errors.New("unterminated '")
			}
			i = j
		case r == '"':
			inWord = true
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) && (rs[j+1] == '"' || rs[j+1] == '\\' || rs[j+1] == '$' || rs[j+1] == '`') {
					j++
				} else if rs[j] == '$' || rs[j] == '`' {
					return nil, "", errors.New("no expansions in runbook commands")
				}
				cur.WriteRune(rs[j])
			}
			if j == len(rs) {
				return nil, "", errors.New(`unterminated "`)
			}
			i = j
		case r == '\\':
			if i+1 == len(rs) {
				return nil, "", errors.New("trailing backslash")
			}
			inWord = true
			i++
			cur.WriteRune(rs[i])
		case strings.ContainsRune("|&;<()$`*?[", r):
			return nil, "", fmt.Errorf("%q: runbook commands are single protctl invocations", r)
		default:
			inWord = true
			cur.WriteRune(r)
		}
	}
	flush()
	if toFile && redirect == "" {
		return nil, "", errors.New("> without a file")
	}
	if toFile && len(words) == 0 {
		return nil, "", errors.New("a redirection without a command")
	}
	return words, redirect, nil
}

// rbEnv is the fixture a runbook runs on.
type rbEnv struct {
	*opsEnv
	t   *testing.T
	dir string            // the working directory (files of > and -f)
	env map[string]string // for every command

	partitionsBefore []string              // redis-restarted
	cluster          redis.UniversalClient // redis-to-cluster
	kafka            *kafkaRig             // kafka-partitions
}

func (rb *rbEnv) ctx() context.Context { return context.Background() }

// rbStep is one command of a runbook: what happens before it in the
// incident, its exit code, text its stdout must hold, and any check of
// the outcome.
type rbStep struct {
	cmd    string
	before func(rb *rbEnv)
	code   int
	out    []string // in stdout
	errOut []string // in stderr
	check  func(rb *rbEnv, r result)
}

type runbookDef struct {
	setup func(t *testing.T) *rbEnv
	steps []rbStep
}

// TestRunbooks runs every runbook of docs/operations.md.
func TestRunbooks(t *testing.T) {
	doc, err := parseRunbooks(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	defs := runbookDefs()
	maps.Copy(defs, dlqRunbookDefs())
	maps.Copy(defs, seekRunbookDefs())
	if !slices.Equal(doc.order, runbookNames) {
		t.Errorf("docs/operations.md runbooks %v, want %v", doc.order, runbookNames)
	}
	for _, name := range doc.order {
		t.Run(name, func(t *testing.T) {
			def, ok := defs[name]
			if !ok {
				t.Fatalf("runbook %q has no definition in runbooks_test.go", name)
			}
			cmds := doc.commands[name]
			for i := 0; i < max(len(cmds), len(def.steps)); i++ {
				switch {
				case i >= len(cmds):
					t.Fatalf("the test runs %q, which the doc's runbook does not have", def.steps[i].cmd)
				case i >= len(def.steps):
					t.Fatalf("docs/operations.md:%d: %q has no step in the test", cmds[i].line, cmds[i].text)
				}
				want, wantRedirect, err := shellSplit(def.steps[i].cmd)
				if err != nil {
					t.Fatal(err)
				}
				if got := append([]string{"protctl"}, cmds[i].args...); !slices.Equal(got, want) || cmds[i].redirect != wantRedirect {
					t.Fatalf("docs/operations.md:%d: step %d is %q, the test expects %q", cmds[i].line, i+1, cmds[i].text, def.steps[i].cmd)
				}
			}

			rb := def.setup(t)
			t.Chdir(rb.dir)
			for i, step := range def.steps {
				c := cmds[i]
				if step.before != nil {
					step.before(rb)
				}
				cl := newCLI(t)
				for k, v := range rb.env {
					cl.env[k] = v
				}
				r := cl.run(c.args...)
				if r.code != step.code {
					t.Fatalf("docs/operations.md:%d: %s\nexit %d, want %d\nstdout:\n%s\nstderr:\n%s", c.line, c.text, r.code, step.code, r.stdout, r.stderr)
				}
				for _, w := range step.out {
					if len(rb.s.HaltedIDs) > 0 {
						w = strings.ReplaceAll(w, "%HEAD%", rb.s.HaltedIDs[0])
					}
					if !strings.Contains(r.stdout, w) {
						t.Fatalf("docs/operations.md:%d: %s\noutput lacks %q:\n%s\nstderr:\n%s", c.line, c.text, w, r.stdout, r.stderr)
					}
				}
				for _, w := range step.errOut {
					if !strings.Contains(r.stderr, w) {
						t.Fatalf("docs/operations.md:%d: %s\nstderr lacks %q:\n%s", c.line, c.text, w, r.stderr)
					}
				}
				if c.redirect != "" {
					writeFile(t, filepath.Join(rb.dir, c.redirect), r.stdout)
				}
				if step.check != nil {
					step.check(rb, r)
				}
				if t.Failed() {
					t.Fatalf("docs/operations.md:%d: %s\nstdout:\n%s\nstderr:\n%s", c.line, c.text, r.stdout, r.stderr)
				}
			}
		})
	}
}

// standardRunbook is the Protean scenario on a fresh redis-server.
func standardRunbook(t *testing.T, opts ...testenv.RedisOption) *rbEnv {
	t.Helper()
	srv := testenv.StartRedis(t, opts...)
	c := srv.Client(t)
	e := &opsEnv{t: t, srv: srv, c: c, s: testenv.ProteanStandard(t, c)}
	return &rbEnv{opsEnv: e, t: t, dir: t.TempDir(), env: map[string]string{"PROTCTL_REDIS": srv.URL()}}
}

// row finds the table row of stdout whose cells match, in order, the
// given patterns (each a regexp of one cell).
func hasRow(stdout string, cells ...string) bool {
	re := regexp.MustCompile(`(?m)^` + strings.Join(cells, `\s+`) + `(\s|$)`)
	return re.MatchString(stdout)
}

func (rb *rbEnv) wantRow(r result, cells ...string) {
	rb.t.Helper()
	if !hasRow(r.stdout, cells...) {
		rb.t.Errorf("no row %q in:\n%s", cells, r.stdout)
	}
}

// verdict reads partitions show -o json's verdict and pending count.
func (rb *rbEnv) verdict(category, key string) (state string, pending int64) {
	rb.t.Helper()
	cl := newCLI(rb.t)
	for k, v := range rb.env {
		cl.env[k] = v
	}
	r := cl.run("partitions", "show", category, key, "-o", "json")
	r.wantCode(rb.t, 0)
	var d struct {
		Groups []struct {
			Pending int64 `json:"pending"`
		} `json:"groups"`
		Verdict struct {
			State string `json:"state"`
		} `json:"verdict"`
	}
	decode(rb.t, r.stdout, &d)
	for _, g := range d.Groups {
		pending += g.Pending
	}
	return d.Verdict.State, pending
}

// acquire takes the lease of group on key as owner the way a node does
// (the broker's fenced acquire: the generation counter goes up by one).
func (rb *rbEnv) acquire(c redis.UniversalClient, layout broker.Layout, group, key, owner string) broker.Lease {
	rb.t.Helper()
	b := redisbroker.New(c, redisbroker.WithLayout(layout))
	l, ok, err := b.AcquirePartitionLease(rb.ctx(), layout.LeaseKey(group, key), layout.GenerationKey(group, key), owner, 30*time.Second)
	if err != nil || !ok {
		rb.t.Fatalf("acquire %s %s as %s: %v %v", group, key, owner, ok, err)
	}
	return l
}

func runbookDefs() map[string]runbookDef {
	return map[string]runbookDef{
		"stuck-parked": {
			setup: func(t *testing.T) *rbEnv {
				rb := standardRunbook(t)
				rb.park()
				return rb
			},
			steps: []rbStep{
				{cmd: "protctl check", code: 8, check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "parked", "FAILED", "0", "1", regexp.QuoteMeta("app.OrderProjector o-halted at "+rb.s.HaltedIDs[0]+": parked"))
				}},
				{cmd: "protctl parked ls", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "app.OrderProjector", "o-halted", "shop::order o-halted", rb.s.HaltedIDs[0], "parked", "3", `\S+`, "handler: amount must be positive")
				}},
				{cmd: "protctl parked show app.OrderProjector o-halted",
					out: []string{"Owner:         worker-1 (generation 5)", "Type:          test.OrderPlaced.v1", "Payload hidden"}},
				{cmd: "protctl parked retry app.OrderProjector o-halted --dry-run",
					out: []string{"parked at " + "%HEAD%" + ", 3 attempts"}, check: func(rb *rbEnv, r result) {
						rb.wantRow(r, "retry", "app.OrderProjector/o-halted", regexp.QuoteMeta("parked at "+rb.s.HaltedIDs[0]+", 3 attempts"), "yes")
						if p := rb.parked(); p.Request != nil {
							rb.t.Errorf("a dry run recorded %+v", p.Request)
						}
					}},
				{cmd: "protctl parked retry app.OrderProjector o-halted --yes", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "retry", "app.OrderProjector/o-halted", `.*`, "yes", "applied")
					if p := rb.parked(); p.Request == nil || p.Request.Action != ledger.ActionRetry {
						rb.t.Errorf("no retry request recorded: %+v", p.Request)
					}
				}},
				{cmd: "protctl parked ls", out: []string{"retrying (retry requested)"}},
				{cmd: `protctl parked skip app.OrderProjector o-halted --reason "bad amount, refunded by hand" --yes`, check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "skip", "app.OrderProjector/o-halted", `.*`, "yes", "applied")
					p := rb.parked()
					if p.Request == nil || p.Request.Action != ledger.ActionSkip || p.Request.Reason != "bad amount, refunded by hand" {
						rb.t.Errorf("skip request %+v", p.Request)
					}
				}},
			},
		},
		"retry-class": retryClassRunbook(),
		"stuck-protean": {
			setup: func(t *testing.T) *rbEnv { return standardRunbook(t) },
			steps: []rbStep{
				{cmd: "protctl partitions ls shop::order --sort-by lag", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "shop::order", "o-halted", "5", "app.OrderProjector", "1", "4", "held", "HALTED", "worker-1", "5", `\d+s`, "no")
				}},
				{cmd: "protctl partitions show shop::order o-halted", out: []string{
					"Verdict:  stuck (group app.OrderProjector): halted on a poison message: head %HEAD% delivered 7 times",
					"pending to worker-1:5, delivered 7 times",
					"protctl partitions skip-head shop::order o-halted --group app.OrderProjector --reason TEXT",
					"protctl partitions release shop::order o-halted --group app.OrderProjector --force",
				}},
				{cmd: `protctl partitions skip-head shop::order o-halted --group app.OrderProjector --reason "poison: amount must be positive" --dry-run -o json > skip-head.json`,
					check: func(rb *rbEnv, r result) {
						if n, _ := rb.c.XLen(rb.ctx(), broker.ProteanLayout.DLQStream(rb.s.Orders, rb.s.Halted)).Result(); n != 0 {
							rb.t.Errorf("the dry run dead-lettered %d entries", n)
						}
						var p plannedDoc
						decode(rb.t, r.stdout, &p)
						if len(p.Items) != 1 || p.Items[0].Precondition.Lease == nil || *p.Items[0].Precondition.Lease != rb.s.HaltedToken {
							rb.t.Errorf("plan items %+v, want one fenced on %s", p.Items, rb.s.HaltedToken)
						}
					}},
				{cmd: "protctl apply -f skip-head.json --yes", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "dead-letter", `.*`, "applied")
					dlq, err := rb.c.XRange(rb.ctx(), broker.ProteanLayout.DLQStream(rb.s.Orders, rb.s.Halted), "-", "+").Result()
					if err != nil || len(dlq) != 1 {
						rb.t.Errorf("dlq %v %v, want the head", dlq, err)
					}
				}},
				{cmd: "protctl partitions release shop::order o-halted --group app.OrderProjector --force --yes", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "release", `.*`, "applied")
					if l := rb.lease(rb.s.Projector, rb.s.Halted); l != "" {
						rb.t.Errorf("lease still %q", l)
					}
				}},
				{cmd: "protctl partitions show shop::order o-halted", out: []string{"Verdict:  lagging"}, check: func(rb *rbEnv, r result) {
					if state, pending := rb.verdict(rb.s.Orders, rb.s.Halted); state != "lagging" || pending != 0 {
						rb.t.Errorf("verdict %s with %d pending, want lagging with none", state, pending)
					}
				}},
			},
		},
		"node-died": {
			setup: func(t *testing.T) *rbEnv {
				rb := standardRunbook(t)
				rb.heartbeat() // node-a and node-b are live; node-c (o-lagging's owner) died
				return rb
			},
			steps: []rbStep{
				{cmd: "protctl nodes ls --service shop", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "node-a", "joined")
					rb.wantRow(r, "node-b", "joined")
					if strings.Contains(r.stdout, "node-c") {
						rb.t.Error("the dead node is listed")
					}
				}},
				{cmd: "protctl leases ls --category shop::order --state expired", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "app.OrderProjector", "o-lagging", "shop::order", "expired", "-", "2", "-")
					if strings.Count(strings.TrimSpace(r.stdout), "\n") != 1 {
						rb.t.Error("want the one expired lease")
					}
				}},
				{cmd: "protctl check --no-expired-leases", code: 8,
					out: []string{"shop::order o-lagging app.OrderProjector: expired at generation 2, 0 pending, lag 5"}},
				{cmd: "protctl leases ls --category shop::order --group app.OrderProjector",
					before: func(rb *rbEnv) {
						// A survivor takes over: the next generation, and it
						// handles what waited.
						l := rb.acquire(rb.c, broker.ProteanLayout, rb.s.Projector, rb.s.Lagging, "node-b")
						if l.Generation != 3 {
							rb.t.Fatalf("generation %d after 2", l.Generation)
						}
						testenv.Protean(rb.t, rb.c).Category(rb.s.Orders).Partition(rb.s.Lagging).Group(rb.s.Projector).Read(5).Ack(5)
					},
					check: func(rb *rbEnv, r result) {
						rb.wantRow(r, "app.OrderProjector", "o-lagging", "shop::order", "held", "node-b", "3", `\d+s`)
					}},
				{cmd: "protctl check --no-expired-leases", code: 0},
			},
		},
		"node-fenced": {
			setup: func(t *testing.T) *rbEnv {
				rb := standardRunbook(t)
				// node-a (lease node-a:3) was delivered two new entries, then
				// paused past its TTL; node-b acquired generation 4.
				o := testenv.Protean(t, rb.c).Category(rb.s.Orders).Partition(rb.s.Healthy).Entries(2).Group(rb.s.Projector).Read(2)
				if got := o.ConsumerName(); got != rb.s.HealthyToken {
					t.Fatalf("delivered to %s", got)
				}
				rb.c.Del(rb.ctx(), broker.ProteanLayout.LeaseKey(rb.s.Projector, rb.s.Healthy))
				rb.acquire(rb.c, broker.ProteanLayout, rb.s.Projector, rb.s.Healthy, "node-b")
				// The paused node wakes up: its ack carries the old token and
				// is refused in the same step.
				b := redisbroker.New(rb.c)
				stream := broker.ProteanLayout.Stream(rb.s.Orders, rb.s.Healthy)
				pend, _ := rb.c.XPending(rb.ctx(), stream, rb.s.Projector).Result()
				old := broker.Fence{LeaseKey: broker.ProteanLayout.LeaseKey(rb.s.Projector, rb.s.Healthy), Token: rb.s.HealthyToken}
				if _, err := b.AckPartitionFenced(rb.ctx(), old, stream, rb.s.Projector, pend.Lower); !errors.Is(err, broker.ErrLeaseLost) {
					t.Fatalf("the stale owner's ack: %v, want ErrLeaseLost", err)
				}
				return rb
			},
			steps: []rbStep{
				{cmd: "protctl leases ls --category shop::order --group app.OrderProjector", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "app.OrderProjector", "o-healthy", "shop::order", "held", "node-b", "4", `\d+s`)
				}},
				{cmd: "protctl partitions show shop::order o-healthy", out: []string{"node-b:4"}, check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "shop::order:o-healthy", `\S+`, regexp.QuoteMeta(rb.s.HealthyToken), "1", `\S+`)
					if _, pending := rb.verdict(rb.s.Orders, rb.s.Healthy); pending != 2 {
						rb.t.Errorf("%d pending, want the paused node's 2", pending)
					}
				}},
				{cmd: "protctl partitions show shop::order o-healthy",
					before: func(rb *rbEnv) {
						// The new owner reclaims the old generation's entries
						// (fenced on its own lease), handles and acks them.
						b := redisbroker.New(rb.c)
						stream := broker.ProteanLayout.Stream(rb.s.Orders, rb.s.Healthy)
						f := broker.Fence{LeaseKey: broker.ProteanLayout.LeaseKey(rb.s.Projector, rb.s.Healthy), Token: "node-b:4"}
						res, err := b.ReclaimPartitionPending(rb.ctx(), f, stream, rb.s.Projector, 0, 100)
						if err != nil || res.Claimed != 2 {
							rb.t.Fatalf("reclaim: %+v %v", res, err)
						}
						msgs, err := b.ReadPartitionFenced(rb.ctx(), f, stream, rb.s.Projector, 100, broker.ReadPending)
						if err != nil || len(msgs) != 2 {
							rb.t.Fatalf("read the reclaimed entries: %d %v", len(msgs), err)
						}
						ids := make([]string, len(msgs))
						for i, m := range msgs {
							ids[i] = m.ID
						}
						if n, err := b.AckPartitionFenced(rb.ctx(), f, stream, rb.s.Projector, ids...); err != nil || n != 2 {
							rb.t.Fatalf("ack: %d %v", n, err)
						}
					},
					out: []string{"Verdict:  healthy"},
					check: func(rb *rbEnv, r result) {
						if state, pending := rb.verdict(rb.s.Orders, rb.s.Healthy); state != "healthy" || pending != 0 {
							rb.t.Errorf("verdict %s with %d pending", state, pending)
						}
					}},
			},
		},
		"redis-restarted": {
			setup: func(t *testing.T) *rbEnv {
				rb := standardRunbook(t, testenv.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
				rb.park()
				rb.heartbeat()
				return rb
			},
			steps: []rbStep{
				{cmd: "protctl partitions ls",
					before: func(rb *rbEnv) {
						rb.partitionsBefore = rb.partitionSummary()
						if err := rb.srv.Restart(); err != nil {
							rb.t.Fatal(err)
						}
					},
					out: []string{"billing::payment", "shop::order"},
					check: func(rb *rbEnv, r result) {
						// A group's lag may come back unknown (see the runbook).
						unknownLag := regexp.MustCompile(`lag=\S+`)
						after, before := rb.partitionSummary(), rb.partitionsBefore
						for i := range after {
							if i < len(before) && strings.Contains(after[i], "lag=<nil>") {
								before[i] = unknownLag.ReplaceAllStringFunc(before[i], func(string) string { return "lag=<nil>" })
								after[i] = unknownLag.ReplaceAllStringFunc(after[i], func(string) string { return "lag=<nil>" })
							}
						}
						if !slices.Equal(after, before) {
							rb.t.Errorf("after the restart\n%v\nbefore\n%v", after, rb.partitionsBefore)
						}
					}},
				{cmd: "protctl leases ls --category shop::order", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "app.OrderProjector", "o-halted", "shop::order", "held", "worker-1", "5", `\d+s`)
					rb.wantRow(r, "app.OrderProjector", "o-healthy", "shop::order", "held", "node-a", "3", `\d+s`)
				}},
				{cmd: "protctl check", code: 8, out: []string{"parked", "expiredLeases"}},
			},
		},
		"stream-growth": {
			setup: func(t *testing.T) *rbEnv { return standardRunbook(t) },
			steps: []rbStep{
				{cmd: "protctl partitions ls billing::payment --sort-by lag", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "billing::payment", "p-1", "6", "audit", "1", "4")
				}},
				{cmd: "protctl streams trim billing::payment:p-1 --maxlen 2 --dry-run", out: []string{"pinned by audit; removes 1 of 6"},
					check: func(rb *rbEnv, r result) {
						if !strings.Contains(r.stdout, "floor "+rb.s.Pay1IDs[1]+" pinned by audit") {
							rb.t.Errorf("the floor is not audit's oldest pending entry %s", rb.s.Pay1IDs[1])
						}
						rb.wantLen(6)
					}},
				{cmd: "protctl streams trim billing::payment:p-1 --maxlen 2 --yes", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "trim", "billing::payment:p-1", `.*`, "yes", "applied")
					rb.wantLen(5)
				}},
				{cmd: "protctl streams trim billing::payment:p-1 --maxlen 2 --yes",
					before: func(rb *rbEnv) { // audit catches up
						testenv.Protean(rb.t, rb.c).Category(rb.s.Payments).Partition(rb.s.Pay1).Group(rb.s.Audit).Read(4).Ack(5)
					},
					check: func(rb *rbEnv, r result) {
						rb.wantRow(r, "trim", "billing::payment:p-1", `.*`, "yes", "applied")
						rb.wantLen(2)
					}},
			},
		},
		"consumers-pile-up": {
			setup: func(t *testing.T) *rbEnv {
				rb := standardRunbook(t)
				// Two earlier generations of the healthy partition.
				for _, name := range []string{"node-a:1", "node-a:2"} {
					if err := rb.c.XGroupCreateConsumer(rb.ctx(), broker.ProteanLayout.Stream(rb.s.Orders, rb.s.Healthy), rb.s.Projector, name).Err(); err != nil {
						t.Fatal(err)
					}
				}
				return rb
			},
			steps: []rbStep{
				{cmd: "protctl partitions fsck shop::order", check: func(rb *rbEnv, r result) {
					if !regexp.MustCompile(`(?m)^Stale consumers:\s+4$`).MatchString(r.stdout) {
						rb.t.Errorf("fsck does not count 4 stale consumers:\n%s", r.stdout)
					}
					rb.wantRow(r, "o-healthy", "shop::order:o-healthy", "app.OrderProjector", "node-a:1", `\S+`, rb.s.HealthyToken)
					rb.wantRow(r, "o-cold", "shop::order:o-cold", "app.OrderProjector", "fixture-consumer", `\S+`, "free")
				}},
				{cmd: "protctl partitions prune-consumers shop::order --dry-run", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "prune-consumer", "consumer node-a:2 of app.OrderProjector on shop::order:o-healthy", "0 pending; lease "+rb.s.HealthyToken, "yes")
					if n := strings.Count(strings.TrimSpace(r.stdout), "\n"); n != 4 {
						rb.t.Errorf("want 4 items, got %d lines:\n%s", n, r.stdout)
					}
				}},
				{cmd: "protctl partitions prune-consumers shop::order --yes", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "prune-consumer", "consumer node-a:1 of app.OrderProjector on shop::order:o-healthy", `.*`, "yes", "applied")
					cs, err := rb.c.XInfoConsumers(rb.ctx(), broker.ProteanLayout.Stream(rb.s.Orders, rb.s.Healthy), rb.s.Projector).Result()
					if err != nil || len(cs) != 1 || cs[0].Name != rb.s.HealthyToken {
						rb.t.Errorf("healthy consumers after the prune %+v, %v; want the live lease's alone", cs, err)
					}
				}},
			},
		},
		"reap-cold": {
			setup: func(t *testing.T) *rbEnv { return standardRunbook(t) },
			steps: []rbStep{
				{cmd: "protctl partitions ls shop::order --sort-by age", check: func(rb *rbEnv, r result) {
					lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
					if len(lines) < 2 || !strings.Contains(lines[1], "o-cold") {
						rb.t.Errorf("the oldest partition is not listed first:\n%s", r.stdout)
					}
				}},
				{cmd: "protctl partitions reap shop::order --all-cold --min-idle 12h --dry-run",
					out: []string{"every group has read and acked all 3 entries and the newest is older than 12h0m0s"},
					check: func(rb *rbEnv, r result) {
						rb.wantRow(r, "reap", "shop::order/o-cold", `.*`, "yes")
						if strings.Count(strings.TrimSpace(r.stdout), "\n") != 1 {
							rb.t.Error("want o-cold alone")
						}
					}},
				{cmd: "protctl partitions reap shop::order --all-cold --min-idle 12h --yes", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "reap", "shop::order/o-cold", `.*`, "yes", "applied")
					l := broker.ProteanLayout
					if in, _ := rb.c.SIsMember(rb.ctx(), l.IndexKey(rb.s.Orders), rb.s.Cold).Result(); in {
						rb.t.Error("o-cold is still indexed")
					}
					if n, _ := rb.c.Exists(rb.ctx(), l.Stream(rb.s.Orders, rb.s.Cold)).Result(); n != 0 {
						rb.t.Error("o-cold's stream is still there")
					}
				}},
				{cmd: "protctl partitions reap shop::order o-lagging o-never --min-idle 12h --dry-run", code: 6, check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "reap", "shop::order/o-lagging", `.*`, "no", `group "app.OrderProjector" has been delivered up to \S+ of "shop::order:o-lagging", whose last entry is \S+ \(lagging\)`)
					rb.wantRow(r, "reap", "shop::order/o-never", `.*`, "no", `"shop::order:o-never" has 2 entries but no consumer group`)
				}},
				{cmd: "protctl partitions fsck shop::order", check: func(rb *rbEnv, r result) {
					if !regexp.MustCompile(`(?m)^Orphans:\s+0$`).MatchString(r.stdout) {
						rb.t.Error("fsck found orphans after the reap")
					}
				}},
				{cmd: "protctl audit ls --limit 1", out: []string{"reap", "applied", "1 applied"}, check: func(rb *rbEnv, r result) {
					if n := strings.Count(strings.TrimSpace(r.stdout), "\n"); n != 1 {
						rb.t.Errorf("want one entry (the reap), got %d lines:\n%s", n, r.stdout)
					}
					if n, _ := rb.c.XLen(rb.ctx(), "protctl:audit").Result(); n != 1 {
						rb.t.Errorf("the audit log holds %d entries, want the reap's alone (dry runs record nothing)", n)
					}
				}},
			},
		},
		"kafka-partitions": {
			setup: kafkaRunbook,
			steps: []rbStep{
				{cmd: "protctl topics show orders --service shop",
					before: func(rb *rbEnv) { rb.kafka.grow(rb) },
					out:    []string{"Partitions:     4"},
					check: func(rb *rbEnv, r result) {
						for _, p := range []string{"0", "1", "2"} {
							rb.wantRow(r, p, "held", "node-a", `\d+`, `\S+`, "0", "ledger-sync", "0", "0")
						}
						// The record produced to the new partition before any
						// node had it: read from the beginning, checkpointed.
						rb.wantRow(r, "3", "held", "node-a", `\d+`, `\S+`, "1", "ledger-sync", "1", "0")
					}},
				{cmd: "protctl nodes ls --service shop", check: func(rb *rbEnv, r result) {
					rb.wantRow(r, "node-a", "joined", "active", "4")
				}},
				{cmd: "protctl check --no-paused --service shop", code: 0},
			},
		},
		"redis-to-cluster": {
			setup: clusterRunbook,
			steps: []rbStep{
				{cmd: "protctl --context single check --max-lag 0 --max-parked 0 --no-expired-leases", code: 0},
				{cmd: "protctl --context single leases ls --category shop::order --state held",
					before: func(rb *rbEnv) { // the nodes stop and release their leases
						rb.c.Del(rb.ctx(), broker.ProteanLayout.LeaseKey(rb.s.Projector, "o-1"))
					},
					errOut: []string{"No leases found."}},
				{cmd: "protctl --context cluster partitions ls shop::order",
					before: func(rb *rbEnv) { // nodes and publishers run on the cluster
						testenv.Protean(rb.t, rb.cluster).WithLayout(broker.ClusterLayout).Category("shop::order").
							Partition("o-1").Entries(2).Group(rb.s.Projector).Lease("node-a", 1, 30*time.Second).Read(2).Ack(2)
					},
					check: func(rb *rbEnv, r result) {
						rb.wantRow(r, "shop::order", "o-1", "2", "app.OrderProjector", "0", "0", "held", "OK", "node-a", "1")
					}},
				{cmd: "protctl --context cluster partitions show shop::order o-1", check: func(rb *rbEnv, r result) {
					if !regexp.MustCompile(`(?m)^Stream:\s+shop::order:\{o-1\}$`).MatchString(r.stdout) {
						rb.t.Error("the stream is not named in the cluster layout")
					}
				}},
				{cmd: "protctl --context cluster check", code: 0},
			},
		},
	}
}

// parked reads the halted partition's ledger entry.
func (rb *rbEnv) parked() ledger.Parked {
	rb.t.Helper()
	p, err := redisstore.New(rb.c).GetParked(rb.ctx(), rb.s.Projector, "", rb.s.Halted)
	if err != nil {
		rb.t.Fatal(err)
	}
	return p
}

func (rb *rbEnv) wantLen(n int64) {
	rb.t.Helper()
	if got, _ := rb.c.XLen(rb.ctx(), broker.ProteanLayout.Stream(rb.s.Payments, rb.s.Pay1)).Result(); got != n {
		rb.t.Errorf("p-1 has %d entries, want %d", got, n)
	}
}

// partitionSummary is what must survive a restart: each partition's
// category, key, length, and per group pending, lag, lease owner and
// generation, from partitions ls -o json.
func (rb *rbEnv) partitionSummary() []string {
	rb.t.Helper()
	cl := newCLI(rb.t)
	for k, v := range rb.env {
		cl.env[k] = v
	}
	r := cl.run("partitions", "ls", "-o", "json")
	r.wantCode(rb.t, 0)
	var doc struct {
		Items []struct {
			Category string `json:"category"`
			Key      string `json:"key"`
			Length   int64  `json:"length"`
			Groups   []struct {
				Name       string          `json:"name"`
				Pending    int64           `json:"pending"`
				Lag        *int64          `json:"lag"`
				Generation *int64          `json:"generation"`
				Lease      json.RawMessage `json:"lease"`
			} `json:"groups"`
		} `json:"items"`
	}
	decode(rb.t, r.stdout, &doc)
	var out []string
	for _, p := range doc.Items {
		s := fmt.Sprintf("%s %s len=%d", p.Category, p.Key, p.Length)
		for _, g := range p.Groups {
			var lease struct {
				Owner string `json:"owner"`
			}
			_ = json.Unmarshal(g.Lease, &lease)
			s += fmt.Sprintf(" [%s pending=%d lag=%v gen=%v owner=%s]", g.Name, g.Pending, deref64(g.Lag), deref64(g.Generation), lease.Owner)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		rb.t.Fatal("no partitions")
	}
	return out
}

func deref64(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// clusterRunbook is a drained single Redis (one partition, all acked,
// the lease still held by a running node) and an empty 3-master cluster,
// with the contexts of the runbook's yaml block pointed at them.
func clusterRunbook(t *testing.T) *rbEnv {
	t.Helper()
	doc, err := parseRunbooks(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	blocks := doc.files["redis-to-cluster"]
	if len(blocks) != 1 {
		t.Fatalf("want the runbook's contexts file, got %d blocks", len(blocks))
	}
	var file config.File
	dec := yaml.NewDecoder(strings.NewReader(blocks[0]))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("the runbook's contexts file: %v", err)
	}

	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	s := testenv.ProteanScenario{Projector: "app.OrderProjector"}
	testenv.Protean(t, c).Category("shop::order").Partition("o-1").Entries(3).
		Group(s.Projector).Lease("node-a", 1, time.Minute).Read(3).Ack(3)
	cluster := testenv.StartCluster(t)
	addrs := cluster.Addrs()

	for i, ctx := range file.Contexts {
		switch ctx.Name {
		case "single":
			if ctx.Redis.Layout != "" && ctx.Redis.Layout != "protean" {
				t.Fatalf("context single has layout %q", ctx.Redis.Layout)
			}
			file.Contexts[i].Redis.URL = srv.URL()
		case "cluster":
			if ctx.Redis.Layout != "cluster" || !strings.Contains(ctx.Redis.URL, "addr=") {
				t.Fatalf("context cluster %+v: want layout cluster and seed addresses", ctx.Redis)
			}
			file.Contexts[i].Redis.URL = "redis://" + addrs[0] + "/0?addr=" + strings.Join(addrs[1:], "&addr=")
		default:
			t.Fatalf("unexpected context %q", ctx.Name)
		}
	}
	b, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	writeFile(t, filepath.Join(home, "protctl", "config.yaml"), string(b))
	rb := &rbEnv{opsEnv: &opsEnv{t: t, srv: srv, c: c, s: s}, t: t, dir: t.TempDir(),
		env: map[string]string{"XDG_CONFIG_HOME": home}}
	rb.cluster = cluster.Client(t)
	return rb
}

const kafkaRunbookTopic = "orders"

// kafkaRig is a node of service shop consuming topic orders (three
// partitions) on an in-process Kafka, heartbeating to redis-server.
type kafkaRig struct {
	k       *testenv.Kafka
	prod    *kgo.Client
	mu      sync.Mutex
	handled map[int32]int
}

func kafkaRunbook(t *testing.T) *rbEnv {
	t.Helper()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	rig := &kafkaRig{k: testenv.StartKafka(t, 3, kafkaRunbookTopic), handled: map[int32]int{}}
	rig.prod = rig.k.Client(t)
	src, err := kafkasource.New(rig.k.Brokers, kafkasource.WithFetchMaxWait(50*time.Millisecond), kafkasource.WithRetry(3, 3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	store := redisstore.New(c)
	ts, err := topic.New(topic.Config{
		Topic: kafkaRunbookTopic,
		Subscriptions: []topic.Subscription{{Name: "ledger-sync", Handler: runtime.HandlerFunc(func(_ context.Context, m runtime.Message) error {
			rig.mu.Lock()
			rig.handled[m.Partition]++
			rig.mu.Unlock()
			return nil
		})}},
		Source: topic.Kafka(src), Leases: redisbroker.New(c),
		Checkpoints: store, Ledger: store,
		LeaseTTL: 2 * time.Second, RenewEvery: 300 * time.Millisecond, RefreshEvery: 200 * time.Millisecond,
		CheckpointEvery: 100 * time.Millisecond, LedgerPollEvery: 200 * time.Millisecond, OpTimeout: time.Second,
		JoinBackoff: 20 * time.Millisecond, JoinMaxBackoff: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	node, err := runtime.NewNode(runtime.NodeConfig{Service: "shop", NodeID: "node-a", Membership: store,
		HeartbeatEvery: 100 * time.Millisecond}, ts)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = node.Stop(ctx)
	})
	rb := &rbEnv{opsEnv: &opsEnv{t: t, srv: srv, c: c}, t: t, dir: t.TempDir(),
		env: map[string]string{"PROTCTL_REDIS": srv.URL(), "PROTCTL_KAFKA": strings.Join(rig.k.Brokers, ",")}}
	rb.kafka = rig
	rig.waitHeld(rb, 3)
	return rb
}

// grow adds a fourth partition, produces a record to it at once (before
// any node has it), and waits until the node holds the partition and has
// handled the record.
func (rig *kafkaRig) grow(rb *rbEnv) {
	rb.t.Helper()
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = kafkaRunbookTopic, 4
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 5000
	resp, err := req.RequestWith(rb.ctx(), rig.prod)
	if err != nil {
		rb.t.Fatal(err)
	}
	for _, r := range resp.Topics {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			rb.t.Fatalf("create partitions: %v", err)
		}
	}
	rig.prod.ForceMetadataRefresh()
	rig.k.Produce(rb.t, rig.prod, &kgo.Record{Topic: kafkaRunbookTopic, Partition: 3, Key: []byte("order-42"), Value: []byte(`{"data":{}}`)})
	rig.waitHeld(rb, 4)
	cp := redisstore.TopicLeaseGroup("shop", kafkaRunbookTopic).CheckpointsKey("ledger-sync")
	testenv.Eventually(rb.t, 20*time.Second, "the record on the new partition handled and checkpointed", func() (bool, string) {
		rig.mu.Lock()
		n := rig.handled[3]
		rig.mu.Unlock()
		next, err := rb.c.HGet(rb.ctx(), cp, "3").Result()
		return n > 0 && next == "1", fmt.Sprintf("handled %d, checkpoint %q (%v)", n, next, err)
	})
}

// waitHeld waits until node-a's status record lists n held partitions.
func (rig *kafkaRig) waitHeld(rb *rbEnv, n int) {
	rb.t.Helper()
	testenv.Eventually(rb.t, 30*time.Second, fmt.Sprintf("node-a to hold %d partitions", n), func() (bool, string) {
		nodes, err := redisstore.New(rb.c).Members(rb.ctx(), "shop")
		return err == nil && len(nodes) == 1 && len(nodes[0].Held) == n, fmt.Sprintf("%+v %v", nodes, err)
	})
}

func TestShellSplit(t *testing.T) {
	cases := []struct {
		in       string
		words    []string
		redirect string
		bad      bool
	}{
		{in: "protctl parked ls", words: []string{"protctl", "parked", "ls"}},
		{in: `protctl parked skip s a --reason "bad amount, refunded" --yes`, words: []string{"protctl", "parked", "skip", "s", "a", "--reason", "bad amount, refunded", "--yes"}},
		{in: `protctl x --data '{"a": 1}'`, words: []string{"protctl", "x", "--data", `{"a": 1}`}},
		{in: `protctl x "say \"hi\""`, words: []string{"protctl", "x", `say "hi"`}},
		{in: "protctl x -o json > plan.json", words: []string{"protctl", "x", "-o", "json"}, redirect: "plan.json"},
		{in: "protctl x # a comment", words: []string{"protctl", "x"}},
		{in: "# only a comment"},
		{in: "protctl x a#b", words: []string{"protctl", "x", "a#b"}},
		{in: "protctl x | jq", bad: true},
		{in: `protctl x "$VAR"`, bad: true},
		{in: "protctl x 'open", bad: true},
		{in: "protctl x >", bad: true},
	}
	for _, c := range cases {
		words, redirect, err := shellSplit(c.in)
		if (err != nil) != c.bad {
			t.Errorf("shellSplit(%q) error %v", c.in, err)
			continue
		}
		if !c.bad && (!slices.Equal(words, c.words) || redirect != c.redirect) {
			t.Errorf("shellSplit(%q) = %q > %q, want %q > %q", c.in, words, redirect, c.words, c.redirect)
		}
	}
}

// TestRunbookParserRejectsWhatItCannotRun checks the parser on a doc with a
// non-protctl command in a runbook block.
func TestRunbookParserRejectsWhatItCannotRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.md")
	writeFile(t, path, "# x\n\n```sh runbook=a\nprotctl parked ls\nredis-cli FLUSHALL\n```\n")
	if _, err := parseRunbooks(path); err == nil || !strings.Contains(err.Error(), "not a protctl command") {
		t.Fatalf("err %v", err)
	}
	writeFile(t, path, "```sh runbook=a\nprotctl parked \\\n  ls --subscription s\n```\n\n```sh\nredis-cli INFO\n```\n")
	d, err := parseRunbooks(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.commands["a"]; len(got) != 1 || !slices.Equal(got[0].args, []string{"parked", "ls", "--subscription", "s"}) {
		t.Fatalf("commands %+v", got)
	}
}
