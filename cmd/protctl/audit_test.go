package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// auditEntries reads the audit stream as stored, oldest first, decoding
// each entry's JSON.
func (e *opsEnv) auditEntries() []auditItemDoc {
	e.t.Helper()
	msgs, err := e.c.XRange(context.Background(), audit.Key, "-", "+").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]auditItemDoc, len(msgs))
	for i, m := range msgs {
		raw, _ := m.Values["entry"].(string)
		if err := json.Unmarshal([]byte(raw), &out[i]); err != nil {
			e.t.Fatalf("entry %s: %v\n%s", m.ID, err, raw)
		}
		out[i].raw = raw
	}
	return out
}

// auditItemDoc is the part of an audit entry the tests look at.
type auditItemDoc struct {
	ID          string        `json:"id"`
	User        string        `json:"user"`
	Host        string        `json:"host"`
	Context     *string       `json:"context"`
	CommandLine string        `json:"commandLine"`
	Actions     []string      `json:"actions"`
	Outcome     string        `json:"outcome"`
	ExitCode    int           `json:"exitCode"`
	Summary     string        `json:"summary"`
	Items       []plannedItem `json:"items"`
	raw         string
}

// TestAuditEveryAppliedMutatorRecordsOneEntry: each mutator applied
// appends exactly one entry holding who, where, the command line and the
// plan's items with the state each saw and the result it printed; the
// same mutator as a dry run appends none.
func TestAuditEveryAppliedMutatorRecordsOneEntry(t *testing.T) {
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	cases := []struct {
		name   string
		args   func(e *opsEnv) []string
		action string
	}{
		{"reap", func(e *opsEnv) []string { return []string{"partitions", "reap", e.s.Orders, e.s.Cold} }, "reap"},
		{"release", func(e *opsEnv) []string {
			return []string{"partitions", "release", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--force"}
		}, "release"},
		{"skip-head", func(e *opsEnv) []string {
			return []string{"partitions", "skip-head", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--reason", "poison"}
		}, "dead-letter"},
		{"trim", func(e *opsEnv) []string {
			return []string{"streams", "trim", broker.ProteanLayout.Stream(e.s.Payments, e.s.Pay1), "--maxlen", "1"}
		}, "trim"},
		{"parked retry", func(e *opsEnv) []string { return []string{"parked", "retry", e.s.Projector, e.s.Halted} }, "retry"},
		{"parked skip", func(e *opsEnv) []string {
			return []string{"parked", "skip", e.s.Projector, e.s.Halted, "--reason", "poison"}
		}, "skip"},
		{"apply -f", func(e *opsEnv) []string {
			return []string{"apply", "-f", savePlan(e.t, e, "partitions", "release", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--force")}
		}, "release"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newOpsEnv(t)
			e.park()
			args := c.args(e)

			r := e.run(append(args, "--dry-run", "-o", "json")...)
			r.wantCode(t, 0)
			if n := e.c.Exists(context.Background(), audit.Key).Val(); n != 0 {
				t.Fatal("a dry run wrote to the audit log")
			}

			r = e.run(append(args, "--yes", "-o", "json")...)
			r.wantCode(t, 0)
			var printed plannedDoc
			decode(t, r.stdout, &printed)
			got := e.auditEntries()
			if len(got) != 1 {
				t.Fatalf("%d audit entries after one apply, want 1", len(got))
			}
			a := got[0]
			if a.User != me.Username || a.Host != host || (a.Context != nil && *a.Context != "") {
				t.Fatalf("origin user %q host %q context %v", a.User, a.Host, a.Context)
			}
			if want := "protctl " + strings.Join(args, " ") + " --yes -o json"; a.CommandLine != want {
				t.Fatalf("command line %q, want %q", a.CommandLine, want)
			}
			if strings.Join(a.Actions, ",") != c.action || a.Outcome != "applied" || a.ExitCode != 0 {
				t.Fatalf("actions %v outcome %s exit %d", a.Actions, a.Outcome, a.ExitCode)
			}
			if len(a.Items) != len(printed.Items) || len(a.Items) == 0 {
				t.Fatalf("%d items recorded, %d printed", len(a.Items), len(printed.Items))
			}
			for i := range a.Items {
				rec, out := a.Items[i], printed.Items[i]
				if rec.result() != "applied" || rec.result() != out.result() || rec.Detail != out.Detail || rec.Action != out.Action {
					t.Fatalf("item %d recorded %+v, printed %+v", i, rec, out)
				}
			}
			if !strings.Contains(a.raw, `"precondition":{`) {
				t.Fatalf("no precondition in %s", a.raw)
			}
		})
	}
}

// TestAuditRecordsAConflictButNotWhatTriedNothing: an apply that tried an
// item is recorded even when the state moved (exit 5, nothing changed);
// a plan refused by its own checks, a declined confirmation, a refusal
// without a terminal and a read-only refusal try nothing and are not.
func TestAuditRecordsAConflictButNotWhatTriedNothing(t *testing.T) {
	t.Run("conflict", func(t *testing.T) {
		e := newOpsEnv(t)
		plan := savePlan(t, e, "partitions", "release", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--force")
		testenvLease(e, "worker-2", 6)
		e.run("apply", "-f", plan, "--yes").wantCode(t, clierr.ExitConflict)
		got := e.auditEntries()
		if len(got) != 1 || got[0].Outcome != "conflict" || got[0].ExitCode != clierr.ExitConflict || got[0].Items[0].result() != "conflict" {
			t.Fatalf("entries %+v", got)
		}
	})
	t.Run("partial", func(t *testing.T) {
		e := newOpsEnv(t)
		reap := savePlan(t, e, "partitions", "reap", e.s.Orders, e.s.Cold, "--min-idle", "1h")
		release := savePlan(t, e, "partitions", "release", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--force")
		testenvLease(e, "worker-2", 6)
		e.run("apply", "-f", combinePlans(t, reap, release), "--yes").wantCode(t, clierr.ExitPartial)
		got := e.auditEntries()
		if len(got) != 1 || got[0].Outcome != "partial" || got[0].Summary != "1 applied, 1 conflict" || strings.Join(got[0].Actions, ",") != "reap,release" {
			t.Fatalf("entries %+v", got)
		}
	})
	e := newOpsEnv(t)
	s := e.s
	release := []string{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force"}
	nothing := []struct {
		name string
		run  func() result
		code int
	}{
		{"refused by the plan", func() result {
			return e.run("partitions", "reap", s.Orders, s.Lagging, "--min-idle", "0s", "--yes")
		}, clierr.ExitRefused},
		{"lease already free", func() result {
			return e.run("partitions", "release", s.Orders, s.Cold, "--group", s.Projector, "--yes")
		}, 0},
		{"declined on a terminal", func() result {
			cl := e.cli(true)
			cl.stdin = "n\n"
			return cl.run(release...)
		}, clierr.ExitRefused},
		{"no terminal, no --yes", func() result { return e.run(release...) }, clierr.ExitRefused},
		{"read-only", func() result { return e.run(append(release, "--yes", "--read-only")...) }, clierr.ExitRefused},
	}
	for _, c := range nothing {
		t.Run(c.name, func(t *testing.T) {
			c.run().wantCode(t, c.code)
			if n := e.c.Exists(context.Background(), audit.Key).Val(); n != 0 {
				t.Fatalf("recorded: %+v", e.auditEntries())
			}
		})
	}
}

// TestAuditFailedAppendKeepsTheResult: when the entry cannot be written
// though the apply went through (an ACL user without XADD: only the
// append finds out), the repair's output and exit code are what they
// would be, and stderr says the apply was not recorded and why: a line in
// table mode, a JSON warning object in JSON mode. (An audit key of the
// wrong type is found before the apply, which is then refused:
// TestAuditLogOfTheWrongTypeStopsEveryMutator.)
func TestAuditFailedAppendKeepsTheResult(t *testing.T) {
	releaseArgs := func(e *opsEnv) []string {
		return []string{"partitions", "release", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--force", "--yes"}
	}
	noXAdd := func(e *opsEnv) *cli {
		if err := e.c.Do(context.Background(), "ACL", "SETUSER", "noaudit", "on", ">pw-noaudit", "~*", "&*", "+@all", "-xadd").Err(); err != nil {
			e.t.Fatal(err)
		}
		cl := e.cli(false)
		cl.env["PROTCTL_REDIS"] = "redis://noaudit:pw-noaudit@" + strings.TrimPrefix(e.srv.URL(), "redis://")
		return cl
	}
	for _, c := range []struct {
		name  string
		setup func(e *opsEnv) *cli
		why   string
	}{
		{"no XADD permission", noXAdd, "NOPERM"},
	} {
		t.Run(c.name+", table", func(t *testing.T) {
			e := newOpsEnv(t)
			r := c.setup(e).run(releaseArgs(e)...)
			r.wantCode(t, 0)
			if !strings.Contains(r.stdout, "applied") {
				t.Fatalf("the result is not shown:\n%s", r.stdout)
			}
			if !strings.Contains(r.stderr, "warning") || !strings.Contains(r.stderr, "not recorded in the audit log") || !strings.Contains(r.stderr, c.why) {
				t.Fatalf("stderr does not report the failed append:\n%s", r.stderr)
			}
			if e.lease(e.s.Projector, e.s.Halted) != "" {
				t.Fatal("the lease was not released")
			}
			if strings.Contains(r.stdout+r.stderr, "pw-noaudit") {
				t.Fatal("the password is in the output")
			}
		})
		t.Run(c.name+", json", func(t *testing.T) {
			e := newOpsEnv(t)
			r := c.setup(e).run(append(releaseArgs(e), "-o", "json")...)
			r.wantCode(t, 0)
			var p plannedDoc
			decode(t, r.stdout, &p)
			if len(p.Items) != 1 || p.Items[0].result() != "applied" {
				t.Fatalf("items %+v", p.Items)
			}
			var w struct {
				Warning struct{ Code, Message string } `json:"warning"`
			}
			decode(t, r.stderr, &w)
			if w.Warning.Code != "AUDIT_NOT_RECORDED" || !strings.Contains(w.Warning.Message, c.why) {
				t.Fatalf("stderr %q", r.stderr)
			}
		})
	}
	t.Run("a conflict still exits 5", func(t *testing.T) {
		e := newOpsEnv(t)
		plan := savePlan(t, e, "partitions", "release", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--force")
		testenvLease(e, "worker-2", 6)
		r := noXAdd(e).run("apply", "-f", plan, "--yes", "-o", "json")
		r.wantCode(t, clierr.ExitConflict)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], `"AUDIT_NOT_RECORDED"`) || !strings.Contains(lines[1], `"CONFLICT"`) {
			t.Fatalf("stderr %q", r.stderr)
		}
	})
}

// TestAuditLogOfTheWrongTypeStopsEveryMutator: every mutator appends to
// the audit log; when its key holds another type than a stream, each
// apply is refused before it changes anything, with the wrong-type error
// (exit 9) naming the key, the type it holds and "stream", rather than
// repairing and then warning that the repair went unrecorded. A dry run
// records nothing and still works; audit ls reports the same error.
func TestAuditLogOfTheWrongTypeStopsEveryMutator(t *testing.T) {
	e := newOpsEnv(t)
	e.park()
	s := e.s
	ctx := context.Background()
	plan := savePlan(t, e, "partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force")
	if err := e.c.Set(ctx, audit.Key, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	e.c.XGroupCreateConsumer(ctx, broker.ProteanLayout.Stream(s.Orders, s.Healthy), s.Projector, "node-a:1") // stale: prune-consumers has one
	want := fmt.Sprintf("%q holds a string, want a stream", audit.Key)
	for _, args := range [][]string{
		{"partitions", "reap", s.Orders, s.Cold},
		{"partitions", "reap", s.Orders, "--all-cold"},
		{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force"},
		{"partitions", "skip-head", s.Orders, s.Halted, "--group", s.Projector, "--reason", "poison"},
		{"partitions", "prune-consumers", s.Orders},
		{"streams", "trim", broker.ProteanLayout.Stream(s.Payments, s.Pay1), "--maxlen", "1"},
		{"parked", "retry", s.Projector, s.Halted},
		{"parked", "skip", s.Projector, s.Halted, "--reason", "poison"},
		{"parked", "retry", "--all"},
		{"apply", "-f", plan},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			before := e.digest()
			e.run(append(args, "--dry-run")...).wantCode(t, 0)
			for _, format := range []string{"table", "json"} {
				r := e.run(append(args, "--yes", "-o", format)...)
				r.wantCode(t, clierr.ExitWrongType)
				if !strings.Contains(strings.ReplaceAll(r.stderr, `\"`, `"`), want) || !strings.Contains(r.stderr, "nothing was changed") {
					t.Errorf("-o %s: stderr %q lacks %s and that nothing was changed", format, r.stderr, want)
				}
			}
			if e.digest() != before {
				t.Fatal("the mutator changed Redis though its apply could not be recorded")
			}
			if typ := e.c.Type(ctx, audit.Key).Val(); typ != "string" {
				t.Fatalf("the audit key holds a %s now", typ)
			}
		})
	}
	r := e.run("audit", "ls")
	r.wantCode(t, clierr.ExitWrongType)
	if !strings.Contains(r.stderr, want) {
		t.Fatalf("audit ls: %q lacks %s", r.stderr, want)
	}
}

// TestAuditNeverRecordsThePassword: a Redis password given in --redis is
// in no audit entry, no output of the repair or of audit ls in any
// format, and no log line (-vv).
func TestAuditNeverRecordsThePassword(t *testing.T) {
	const pw = "Sup3r-s3cret-pw"
	e := newOpsEnv(t)
	if err := e.c.Do(context.Background(), "ACL", "SETUSER", "op", "on", ">"+pw, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	url := "redis://op:" + pw + "@" + strings.TrimPrefix(e.srv.URL(), "redis://")
	var seen strings.Builder
	run := func(code int, args ...string) result {
		t.Helper()
		r := newCLI(t).run(append([]string{"--redis", url, "-vv"}, args...)...)
		r.wantCode(t, code)
		seen.WriteString(r.stdout + r.stderr)
		return r
	}
	run(0, "partitions", "release", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--force", "--yes", "-o", "json")
	run(0, "partitions", "reap", e.s.Orders, e.s.Cold, "--yes", "--redis="+url)
	for _, o := range []string{"table", "wide", "json", "jsonl", "yaml"} {
		run(0, "audit", "ls", "-o", o)
	}
	// And when the audit log cannot take it (an apply with nothing to
	// try, which is not recorded; one with something is refused).
	if err := e.c.Rename(context.Background(), audit.Key, "audit-kept").Err(); err != nil {
		t.Fatal(err)
	}
	e.c.Set(context.Background(), audit.Key, "x", 0)
	run(0, "partitions", "release", e.s.Orders, e.s.Lagging, "--group", e.s.Projector, "--force", "--yes", "-o", "json")
	run(clierr.ExitWrongType, "streams", "trim", broker.ProteanLayout.Stream(e.s.Payments, e.s.Pay1), "--maxlen", "1", "--yes", "-o", "json")

	entries, err := e.c.XRange(context.Background(), "audit-kept", "-", "+").Result()
	if err != nil || len(entries) != 2 {
		t.Fatalf("%d entries, %v", len(entries), err)
	}
	for _, m := range entries {
		for k, v := range m.Values {
			if strings.Contains(v.(string), pw) {
				t.Fatalf("the password is in the entry's %s field: %s", k, v)
			}
		}
		if !strings.Contains(m.Values["entry"].(string), "redis://op:xxxxx@") {
			t.Fatalf("the command line does not show the redacted URL: %s", m.Values["entry"])
		}
	}
	if strings.Contains(seen.String(), pw) {
		t.Fatalf("the password is in the output:\n%s", seen.String())
	}
	if !strings.Contains(seen.String(), "redis://op:xxxxx@") {
		t.Fatal("audit ls does not show the redacted command line")
	}
}

// TestAuditLs: audit ls lists the entries newest first in a table (plain
// without a terminal) and as an AuditList document (golden); --limit and
// --since select; an empty log says so; bad flags exit 2.
func TestAuditLs(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	r := e.run("audit", "ls")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout+r.stderr, "The audit log is empty") {
		t.Fatalf("empty log: %q %q", r.stdout, r.stderr)
	}
	e.run("partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force", "--yes").wantCode(t, 0)
	e.run("partitions", "reap", s.Orders, s.Cold, "--min-idle", "1h", "--yes").wantCode(t, 0)

	r = e.run("audit", "ls")
	r.wantCode(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^TIME\s+USER\s+CONTEXT\s+ACTIONS\s+OUTCOME\s+RESULTS\s+COMMAND$`).MatchString(lines[0]) {
		t.Fatalf("table:\n%s", r.stdout)
	}
	if !strings.Contains(lines[1], "reap") || !strings.Contains(lines[2], "release") || !strings.Contains(lines[1], "1 applied") ||
		!strings.Contains(lines[2], "protctl partitions release shop::order o-halted --group app.OrderProjector --force --yes") {
		t.Fatalf("not newest first, or a row misses its data:\n%s", r.stdout)
	}
	if hasANSI(r.stdout) {
		t.Fatal("colour without a terminal")
	}
	r = e.run("audit", "ls", "-o", "wide")
	r.wantCode(t, 0)
	if !regexp.MustCompile(`\bID\s+EXIT\s+VERSION\b`).MatchString(r.stdout) || !streamIDRe.MatchString(r.stdout) {
		t.Fatalf("wide:\n%s", r.stdout)
	}

	r = e.run("audit", "ls", "-o", "json")
	r.wantCode(t, 0)
	goldenJSON(t, "audit-ls", scrubOrigin(r.stdout))

	r = e.run("audit", "ls", "-o", "jsonl", "--limit", "1")
	r.wantCode(t, 0)
	if n := strings.Count(strings.TrimSpace(r.stdout), "\n"); n != 0 || !strings.Contains(r.stdout, `"actions":["reap"]`) {
		t.Fatalf("--limit 1 -o jsonl:\n%s", r.stdout)
	}
	r = e.run("audit", "ls", "-o", "json", "--since", "1h")
	r.wantCode(t, 0)
	var list struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	decode(t, r.stdout, &list)
	if list.Kind != "AuditList" || len(list.Items) != 2 {
		t.Fatalf("--since 1h: kind %s, %d items", list.Kind, len(list.Items))
	}
	r = e.run("audit", "ls", "-o", "json", "--since", "2999-01-01T00:00:00Z")
	r.wantCode(t, 0)
	decode(t, r.stdout, &list)
	if len(list.Items) != 0 {
		t.Fatalf("--since the future: %d items", len(list.Items))
	}

	for _, bad := range [][]string{{"--since", "yesterday"}, {"--since", "-1h"}, {"--limit", "-1"}, {"extra"}} {
		r = e.run(append([]string{"audit", "ls"}, bad...)...)
		r.wantCode(t, clierr.ExitUsage)
	}
	e.c.Del(context.Background(), audit.Key)
	e.c.Set(context.Background(), audit.Key, "x", 0)
	r = e.run("audit", "ls", "-o", "json")
	r.wantCode(t, clierr.ExitWrongType)
	if !strings.Contains(r.stderr, audit.Key) || !strings.Contains(r.stderr, "holds a string, want a stream") {
		t.Fatalf("stderr %q does not name the key, its type and the type expected", r.stderr)
	}
}

// TestAuditLsUnreachableExits3: audit ls against no server is exit 3.
func TestAuditLsUnreachableExits3(t *testing.T) {
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = "redis://127.0.0.1:1/0"
	cl.run("audit", "ls", "--timeout", "2s").wantCode(t, clierr.ExitUnavailable)
}

// scrubOrigin replaces the values that depend on the machine running the
// test (OS user, host, version) in a JSON document.
func scrubOrigin(doc string) string {
	re := regexp.MustCompile(`"(user|host|version)": "[^"]*"`)
	return re.ReplaceAllString(doc, `"$1": "<$1>"`)
}

// TestTUIActionIsAudited: an action applied in the dashboard is recorded
// like the CLI's; when the audit log's key holds another type, the apply
// is refused before it changes anything, and the dashboard says why.
func TestTUIActionIsAudited(t *testing.T) {
	for _, broken := range []bool{false, true} {
		name := "recorded"
		if broken {
			name = "append fails"
		}
		t.Run(name, func(t *testing.T) {
			e := newOpsEnv(t)
			if broken {
				e.c.Set(context.Background(), audit.Key, "x", 0)
			}
			d := newDashboard(t, e)
			d.keys("/")
			d.typeText(e.s.Halted)
			d.keys("enter")
			d.keys("L")
			d.wantView("Apply 1 change?")
			d.keys("y")
			if broken {
				d.wantView(fmt.Sprintf("%q holds a string, want a stream", audit.Key))
				if e.lease(e.s.Projector, e.s.Halted) == "" {
					t.Fatal("the lease was released though the apply could not be recorded")
				}
				return
			}
			d.wantView("Result: 1 applied")
			got := e.auditEntries()
			if len(got) != 1 || strings.Join(got[0].Actions, ",") != "release" || got[0].Items[0].result() != "applied" {
				t.Fatalf("entries %+v", got)
			}
		})
	}
}

// TestAuditOnACluster: on a 3-master Redis Cluster (cluster layout), a
// release appends its entry to the one protctl:audit key, wherever that
// key's slot lives, and audit ls reads it back.
func TestAuditOnACluster(t *testing.T) {
	ctx := context.Background()
	cl := testenv.StartCluster(t)
	c := cl.Client(t)
	l := broker.ClusterLayout
	b := redisbroker.New(c, redisbroker.WithLayout(l))
	const cat, key, grp = "shop::order", "o-1", "projector"
	if _, err := b.PublishPartitioned(ctx, cat, key, "", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.AcquirePartitionLease(ctx, l.LeaseKey(grp, key), l.GenerationKey(grp, key), "node-a", time.Minute); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	url := "redis://" + cl.Masters[len(cl.Masters)-1].Addr
	newCLI(t).run("partitions", "release", cat, key, "--group", grp, "--force", "--yes", "--layout", "cluster", "--redis", url).wantCode(t, 0)
	if n := c.XLen(ctx, audit.Key).Val(); n != 1 {
		t.Fatalf("%d audit entries on the cluster, want 1", n)
	}
	r := newCLI(t).run("audit", "ls", "-o", "json", "--layout", "cluster", "--redis", url)
	r.wantCode(t, 0)
	var list struct {
		Items []auditItemDoc `json:"items"`
	}
	decode(t, r.stdout, &list)
	if len(list.Items) != 1 || list.Items[0].Items[0].result() != "applied" || list.Items[0].Items[0].Target["key"] != key {
		t.Fatalf("items %+v", list.Items)
	}
}
