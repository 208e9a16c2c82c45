package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/pkg/broker"
)

// TestHaltedProteanPartitionRunbook is the on-call runbook for a Protean
// partition halted on a poison message, with protctl alone: show names
// the head and its delivery count; skip-head moves the head to C:K:dlq and
// acks it, fenced on the lease; release frees the lease; the partition is
// then lagging with nobody on it, ready for the instance to re-acquire.
func TestHaltedProteanPartitionRunbook(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	ctx := context.Background()
	l := broker.ProteanLayout
	stream := l.Stream(s.Orders, s.Halted)
	head := s.HaltedIDs[0]

	// 1. What is stuck, and why.
	r := e.run("partitions", "show", s.Orders, s.Halted, "-o", "json")
	r.wantCode(t, 0)
	var d struct {
		Groups []struct {
			Name        string `json:"name"`
			HeadPending struct {
				ID         string `json:"id"`
				Deliveries int64  `json:"deliveries"`
			} `json:"headPending"`
		} `json:"groups"`
		Verdict struct {
			State  string `json:"state"`
			Reason string `json:"reason"`
		} `json:"verdict"`
	}
	decode(t, r.stdout, &d)
	if len(d.Groups) != 1 || d.Groups[0].HeadPending.ID != head || d.Groups[0].HeadPending.Deliveries != s.PoisonDeliveries {
		t.Fatalf("head %+v, want %s delivered %d times", d.Groups, head, s.PoisonDeliveries)
	}
	if d.Verdict.State != "stuck" || !strings.Contains(d.Verdict.Reason, head) || !strings.Contains(d.Verdict.Reason, "delivered 7 times") {
		t.Fatalf("verdict %+v does not name the poison head and its deliveries", d.Verdict)
	}
	r = e.run("partitions", "show", s.Orders, s.Halted)
	r.wantCode(t, 0)
	for _, w := range []string{head, "delivered 7 times", "partitions skip-head shop::order o-halted --group app.OrderProjector", "partitions release shop::order o-halted --group app.OrderProjector --force"} {
		if !strings.Contains(r.stdout, w) {
			t.Fatalf("show lacks %q:\n%s", w, r.stdout)
		}
	}

	// 2. Dead-letter the head, fenced on the lease the plan saw.
	r = e.run("partitions", "skip-head", s.Orders, s.Halted, "--group", s.Projector, "--reason", "poison", "--yes", "-o", "json")
	r.wantCode(t, 0)
	var p plannedDoc
	decode(t, r.stdout, &p)
	if len(p.Items) != 1 || p.Items[0].result() != "applied" || p.Items[0].Precondition.Lease == nil || *p.Items[0].Precondition.Lease != s.HaltedToken {
		t.Fatalf("skip-head items %+v", p.Items)
	}
	dlq, err := e.c.XRange(ctx, l.DLQStream(s.Orders, s.Halted), "-", "+").Result()
	if err != nil || len(dlq) != 1 {
		t.Fatalf("dlq %v %v, want the head", dlq, err)
	}
	orig, _ := e.c.XRange(ctx, stream, head, head).Result()
	if len(orig) != 1 || !jsonEqual(deadLetterOf(dlq[0]).Payload, []byte(orig[0].Values[broker.DataField].(string))) {
		t.Fatalf("dlq entry %v is not the head %v", dlq[0].Values, orig)
	}
	if pend, _ := e.c.XPending(ctx, stream, s.Projector).Result(); pend.Count != 0 {
		t.Fatalf("%d still pending after skip-head", pend.Count)
	}
	if got := e.lease(s.Projector, s.Halted); got != s.HaltedToken {
		t.Fatalf("skip-head changed the lease to %q", got)
	}

	// 3. Free the lease, fenced on its value.
	r = e.run("partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force", "--yes", "-o", "json")
	r.wantCode(t, 0)
	decode(t, r.stdout, &p)
	if p.Items[0].result() != "applied" {
		t.Fatalf("release %+v", p.Items)
	}
	if got := e.lease(s.Projector, s.Halted); got != "" {
		t.Fatalf("lease still %q", got)
	}
	if gen, _ := e.c.Get(ctx, l.GenerationKey(s.Projector, s.Halted)).Int64(); gen != s.HaltedGeneration {
		t.Fatalf("generation %d, want %d kept", gen, s.HaltedGeneration)
	}

	// 4. Nothing is stuck now: the rest waits for the next owner.
	r = e.run("partitions", "show", s.Orders, s.Halted, "-o", "json")
	r.wantCode(t, 0)
	decode(t, r.stdout, &d)
	if d.Verdict.State != "lagging" {
		t.Fatalf("verdict after the runbook %+v", d.Verdict)
	}
}

// TestLeaseMovedBetweenPlanAndApply saves each fenced step's plan with
// --dry-run -o json, moves the lease (as if it expired and the instance
// re-acquired it), and applies the saved plan: exit 5, the item a
// conflict, nothing changed. The same plan applies cleanly when nothing
// moved.
func TestLeaseMovedBetweenPlanAndApply(t *testing.T) {
	steps := []struct {
		name string
		args []string
	}{
		{"skip-head", []string{"partitions", "skip-head", "shop::order", "o-halted", "--group", "app.OrderProjector", "--reason", "poison"}},
		{"release", []string{"partitions", "release", "shop::order", "o-halted", "--group", "app.OrderProjector", "--force"}},
	}
	moves := []struct {
		name string
		move func(e *opsEnv)
	}{
		{"re-acquired", func(e *opsEnv) {
			testenvLease(e, "worker-1", 6)
		}},
		{"taken by another owner", func(e *opsEnv) {
			testenvLease(e, "worker-2", 6)
		}},
		{"expired", func(e *opsEnv) {
			if err := e.c.Del(context.Background(), broker.ProteanLayout.LeaseKey(e.s.Projector, e.s.Halted)).Err(); err != nil {
				e.t.Fatal(err)
			}
		}},
	}
	for _, st := range steps {
		for _, mv := range moves {
			t.Run(st.name+" after the lease was "+mv.name, func(t *testing.T) {
				e := newOpsEnv(t)
				plan := savePlan(t, e, st.args...)
				mv.move(e)
				before := e.digest()
				r := e.run("apply", "-f", plan, "--yes", "-o", "json")
				r.wantCode(t, clierr.ExitConflict)
				var p plannedDoc
				decode(t, r.stdout, &p)
				if len(p.Items) != 1 || p.Items[0].result() != "conflict" {
					t.Fatalf("items %+v", p.Items)
				}
				if !strings.Contains(r.stderr, `"code":"CONFLICT"`) {
					t.Fatalf("stderr %q", r.stderr)
				}
				if e.digest() != before {
					t.Fatal("a conflicting apply changed Redis")
				}
			})
		}
		t.Run(st.name+" when nothing moved", func(t *testing.T) {
			e := newOpsEnv(t)
			plan := savePlan(t, e, st.args...)
			r := e.run("apply", "-f", plan, "--yes", "-o", "json")
			r.wantCode(t, 0)
			goldenJSON(t, "apply-"+st.name, r.stdout)
		})
	}
}

// testenvLease sets the halted partition's lease as a newer acquire would.
func testenvLease(e *opsEnv, owner string, gen int64) {
	e.t.Helper()
	ctx := context.Background()
	l := broker.ProteanLayout
	if err := e.c.Set(ctx, l.GenerationKey(e.s.Projector, e.s.Halted), gen, 0).Err(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.c.Set(ctx, l.LeaseKey(e.s.Projector, e.s.Halted), broker.FenceToken(owner, gen), time.Minute).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// savePlan runs a mutator's --dry-run -o json and writes the plan to a
// file for apply -f.
func savePlan(t *testing.T, e *opsEnv, args ...string) string {
	t.Helper()
	r := e.run(append(args, "--dry-run", "-o", "json")...)
	r.wantCode(t, 0)
	path := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(path, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestApplyPartial: a plan whose items were made apart (a reap of a cold
// partition and a release of the halted one's lease), applied after the
// lease moved: the reap applies, the release conflicts, exit 7.
func TestApplyPartial(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	reap := savePlan(t, e, "partitions", "reap", s.Orders, s.Cold, "--min-idle", "1h")
	release := savePlan(t, e, "partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force")
	combined := combinePlans(t, reap, release)
	testenvLease(e, "worker-2", 6)
	r := e.run("apply", "-f", combined, "--yes", "-o", "json")
	r.wantCode(t, clierr.ExitPartial)
	var p plannedDoc
	decode(t, r.stdout, &p)
	if len(p.Items) != 2 || p.Items[0].result() != "applied" || p.Items[1].result() != "conflict" {
		t.Fatalf("items %+v", p.Items)
	}
	if n, _ := e.c.Exists(context.Background(), broker.ProteanLayout.Stream(s.Orders, s.Cold)).Result(); n != 0 {
		t.Fatal("the cold partition was not reaped")
	}
	if got := e.lease(s.Projector, s.Halted); got != "worker-2:6" {
		t.Fatalf("lease %q", got)
	}
}

// combinePlans writes one plan with the items of several plan files.
func combinePlans(t *testing.T, paths ...string) string {
	t.Helper()
	var first string
	var items []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(b)
		if first == "" {
			first = doc
		}
		start := strings.Index(doc, `"items": [`) + len(`"items": [`)
		end := strings.LastIndex(doc, "]")
		items = append(items, strings.TrimSpace(doc[start:end]))
	}
	start := strings.Index(first, `"items": [`) + len(`"items": [`)
	end := strings.LastIndex(first, "]")
	out := first[:start] + strings.Join(items, ",") + first[end:]
	path := filepath.Join(t.TempDir(), "combined.json")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReapRefusesAndSaysWhy: reap refuses a partition whose group lags,
// has pending entries, or (registered) has never read it, naming the group
// and the reason, exits 6 and deletes nothing; a cold one it reaps.
func TestReapRefusesAndSaysWhy(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	// A registered group that has not read anything yet: the cold
	// partition is not cold for it.
	if err := e.c.SAdd(context.Background(), broker.ProteanLayout.GroupsKey(s.Orders), "app.Mailer", s.Projector).Err(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		key  string
		want []string
	}{
		{s.Lagging, []string{s.Projector, "lagging"}},
		{s.Halted, []string{s.Projector, "pending"}},
		{s.Cold, []string{"app.Mailer", "never read"}},
		{s.Never, []string{"no consumer group"}},
	}
	for _, c := range cases {
		t.Run(c.key, func(t *testing.T) {
			before := e.digest()
			r := e.run("partitions", "reap", s.Orders, c.key, "--min-idle", "0s", "--yes")
			r.wantCode(t, clierr.ExitRefused)
			for _, w := range c.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("the refusal does not say %q:\n%s\n%s", w, r.stdout, r.stderr)
				}
			}
			if !strings.Contains(r.stdout, "refused") {
				t.Errorf("no refused result:\n%s", r.stdout)
			}
			if e.digest() != before {
				t.Fatal("a refused reap changed Redis")
			}
		})
	}
	t.Run("cold, once the registered group has read it", func(t *testing.T) {
		if err := e.c.SRem(context.Background(), broker.ProteanLayout.GroupsKey(s.Orders), "app.Mailer").Err(); err != nil {
			t.Fatal(err)
		}
		r := e.run("partitions", "reap", s.Orders, "--all-cold", "--min-idle", "1h", "--yes", "-o", "json")
		r.wantCode(t, 0)
		var p plannedDoc
		decode(t, r.stdout, &p)
		if len(p.Items) != 1 || p.Items[0].Target["key"] != s.Cold || p.Items[0].result() != "applied" {
			t.Fatalf("items %+v", p.Items)
		}
		if ok, _ := e.c.SIsMember(context.Background(), broker.ProteanLayout.IndexKey(s.Orders), s.Cold).Result(); ok {
			t.Fatal("o-cold is still indexed")
		}
	})
}

// TestTrimKeepsWhatGroupsNeed: trimming p-1 to one entry removes only the
// entry every group has read and acked; the plan names the group that
// pins the floor; the unacked entry and the ones audit has not read stay.
func TestTrimKeepsWhatGroupsNeed(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	stream := broker.ProteanLayout.Stream(s.Payments, s.Pay1)
	ctx := context.Background()
	pend, err := e.c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: s.Audit, Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(pend) != 1 {
		t.Fatalf("fixture: audit pending %v %v", pend, err)
	}
	unacked := pend[0].ID

	r := e.run("streams", "trim", stream, "--maxlen", "1", "--dry-run")
	r.wantCode(t, 0)
	for _, w := range []string{"floor " + unacked + " pinned by " + s.Audit, "removes 1 of 6"} {
		if !strings.Contains(r.stdout, w) {
			t.Fatalf("the plan does not show %q:\n%s", w, r.stdout)
		}
	}

	r = e.run("streams", "trim", stream, "--maxlen", "1", "--yes", "-o", "json")
	r.wantCode(t, 0)
	var p plannedDoc
	decode(t, r.stdout, &p)
	if p.Items[0].result() != "applied" || p.Items[0].Precondition.Trim == nil || p.Items[0].Precondition.Trim.PinnedBy != s.Audit {
		t.Fatalf("items %+v", p.Items)
	}
	left, err := e.c.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range left {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, " ") != strings.Join(s.Pay1IDs[1:], " ") {
		t.Fatalf("left %v, want %v (only the entry both groups acked goes)", ids, s.Pay1IDs[1:])
	}
	if ids[0] != unacked {
		t.Fatalf("the unacked entry %s is not the first left: %v", unacked, ids)
	}

	// Again: nothing more may go while audit is where it is.
	r = e.run("streams", "trim", stream, "--maxlen", "1", "--yes", "-o", "json")
	r.wantCode(t, 0)
	if n, _ := e.c.XLen(ctx, stream).Result(); n != 5 {
		t.Fatalf("length %d after a second trim, want 5", n)
	}
}

// mutatorCases are every mutator, applied to the scenario, each of which
// would change something with --yes.
func mutatorCases(e *opsEnv) [][]string {
	s := e.s
	return [][]string{
		{"partitions", "reap", s.Orders, s.Cold},
		{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force"},
		{"partitions", "skip-head", s.Orders, s.Halted, "--group", s.Projector, "--reason", "poison"},
		{"streams", "trim", broker.ProteanLayout.Stream(s.Payments, s.Pay1), "--maxlen", "1"},
		{"parked", "retry", s.Projector, s.Halted},
		{"parked", "skip", s.Projector, s.Halted, "--reason", "poison"},
		{"parked", "retry", "--all"},
		{"publish", s.Orders, "o-new", "--data", `{"data":{},"metadata":{"headers":{"type":"T"}}}`},
	}
}

// TestMutatorsRefuseWithoutATerminalOrInReadOnlyMode: without a terminal
// and without --yes every mutator exits 6 having changed nothing; so does
// each in read-only mode even with --yes (flag, environment or context);
// apply -f likewise.
func TestMutatorsRefuseWithoutATerminalOrInReadOnlyMode(t *testing.T) {
	e := newOpsEnv(t)
	e.park()
	plan := savePlan(t, e, "partitions", "release", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--force")
	cases := append(mutatorCases(e), []string{"apply", "-f", plan})
	modes := []struct {
		name  string
		extra []string
		env   map[string]string
		msg   string
	}{
		{"no terminal, no --yes", nil, nil, "without --yes"},
		{"--read-only", []string{"--read-only", "--yes"}, nil, "read-only"},
		{"PROTCTL_READ_ONLY", []string{"--yes"}, map[string]string{"PROTCTL_READ_ONLY": "true"}, "read-only"},
	}
	for _, args := range cases {
		for _, m := range modes {
			t.Run(strings.Join(args[:2], " ")+" "+m.name, func(t *testing.T) {
				before := e.digest()
				cl := e.cli(false)
				for k, v := range m.env {
					cl.env[k] = v
				}
				r := cl.run(append(args, m.extra...)...)
				r.wantCode(t, clierr.ExitRefused)
				if !strings.Contains(r.stderr, m.msg) {
					t.Fatalf("stderr %q lacks %q", r.stderr, m.msg)
				}
				if e.digest() != before {
					t.Fatal("a refused mutator changed Redis")
				}
			})
		}
	}
}

// TestReadOnlyContextRefusesButDryRunWorks: a context marked readOnly
// refuses changes, while a dry run (a read) still prints its plan.
func TestReadOnlyContextRefusesButDryRunWorks(t *testing.T) {
	e := newOpsEnv(t)
	cl := e.cli(false)
	delete(cl.env, "PROTCTL_REDIS")
	writeFile(t, cl.env["XDG_CONFIG_HOME"]+"/protctl/config.yaml",
		"currentContext: prod\ncontexts:\n  - name: prod\n    readOnly: true\n    redis: {url: "+e.srv.URL()+"}\n")
	before := e.digest()
	args := []string{"partitions", "release", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--force"}
	cl.run(append(args, "--yes")...).wantCode(t, clierr.ExitRefused)
	r := cl.run(append(args, "--dry-run")...)
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, e.s.HaltedToken) {
		t.Fatalf("dry run:\n%s", r.stdout)
	}
	if e.digest() != before {
		t.Fatal("changed Redis")
	}
}

// TestMutatorsOnATerminalShowThePlanAndAsk: on a terminal the plan goes
// to stderr with a question; "n" declines (exit 6, nothing changed), "y"
// applies.
func TestMutatorsOnATerminalShowThePlanAndAsk(t *testing.T) {
	for _, answer := range []string{"n", "y"} {
		t.Run("answer "+answer, func(t *testing.T) {
			e := newOpsEnv(t)
			e.park()
			for _, args := range mutatorCases(e) {
				before := e.digest()
				cl := e.cli(true)
				cl.stdin = answer + "\n"
				r := cl.run(args...)
				if !strings.Contains(r.stderr, "[y/N]") {
					t.Fatalf("%v: no question on stderr: %q", args, r.stderr)
				}
				if args[0] != "publish" && !strings.Contains(stripANSI(r.stderr), "Plan:") {
					t.Fatalf("%v: no plan before the question: %q", args, r.stderr)
				}
				if answer == "n" {
					r.wantCode(t, clierr.ExitRefused)
					if !strings.Contains(r.stderr, "declined") || e.digest() != before {
						t.Fatalf("%v: declined but %q / changed", args, r.stderr)
					}
					continue
				}
				r.wantCode(t, 0)
				if e.digest() == before {
					t.Fatalf("%v: confirmed but nothing changed", args)
				}
			}
		})
	}
}

// TestDryRunExitsWithThePredictedOutcome: a dry run exits 0 when the plan
// would apply cleanly and 6 when every item would be refused (the plan is
// printed either way), changing nothing.
func TestDryRunExitsWithThePredictedOutcome(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	before := e.digest()
	r := e.run("partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--dry-run")
	r.wantCode(t, clierr.ExitRefused)
	if !strings.Contains(r.stdout, "release") || !strings.Contains(r.stderr, "dry run") {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	r = e.run("partitions", "reap", s.Orders, s.Cold, s.Lagging, "--dry-run", "-o", "json")
	r.wantCode(t, clierr.ExitPartial)
	e.run("partitions", "reap", s.Orders, s.Cold, "--dry-run").wantCode(t, 0)
	if e.digest() != before {
		t.Fatal("a dry run changed Redis")
	}
}
