package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/acl"
	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// aclEnv is the Protean fixture (with a parked entry and a live node's
// status record) on a server that has a user of each role.
type aclEnv struct {
	*opsEnv
	users     map[acl.Role]string
	passwords map[acl.Role]string
	parked    ledger.Parked
}

func newACLEnv(t *testing.T, args ...string) *aclEnv {
	t.Helper()
	e := &aclEnv{opsEnv: newOpsEnv(t), users: map[acl.Role]string{}, passwords: map[acl.Role]string{}}
	e.parked = e.park()
	ctx := context.Background()
	st := runtime.NodeStatus{Service: "shop", Node: "node-1", JoinState: "joined", LastSeen: time.Now().UTC()}
	if err := redisstore.New(e.c).Heartbeat(ctx, st, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, role := range acl.Roles() {
		e.createUser(role, args...)
	}
	return e
}

// createUser creates role's user on the env's server.
func (e *aclEnv) createUser(role acl.Role, args ...string) {
	e.t.Helper()
	e.users[role], e.passwords[role] = createACLUser(e.t, e.c, role, args...)
}

// createACLUser applies the ACL SETUSER line that `protctl acl print
// --role R --line setuser` prints (with args such as --category) on c's
// server, so that a wrong printed rule fails the tests that use the user,
// then gives the user a random password. It returns the user and the
// password.
func createACLUser(t *testing.T, c redis.UniversalClient, role acl.Role, args ...string) (user, password string) {
	t.Helper()
	r := newCLI(t).run(append([]string{"acl", "print", "--role", string(role), "--line", "setuser"}, args...)...)
	r.wantCode(t, 0)
	line := strings.TrimSpace(r.stdout)
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "ACL" || fields[1] != "SETUSER" || fields[3] != "reset" || fields[4] != "on" {
		t.Fatalf("acl print --line setuser: %q", line)
	}
	cmd := make([]any, len(fields))
	for i, f := range fields {
		cmd[i] = f
	}
	ctx := context.Background()
	if err := c.Do(ctx, cmd...).Err(); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	pw := randomSecret(t)
	if err := c.Do(ctx, "ACL", "SETUSER", fields[2], ">"+pw).Err(); err != nil {
		t.Fatal(err)
	}
	return fields[2], pw
}

func randomSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "pw-" + hex.EncodeToString(b)
}

// as is a non-terminal invocation as role's user (the password from the
// environment, the user name from PROTCTL_REDIS_USERNAME).
func (e *aclEnv) as(role acl.Role) *cli {
	cl := e.cli(false)
	cl.env["PROTCTL_REDIS_USERNAME"] = e.users[role]
	cl.env["PROTCTL_REDIS_PASSWORD"] = e.passwords[role]
	return cl
}

// runAs runs args as role and fails the test if the password shows up
// in anything the invocation wrote.
func (e *aclEnv) runAs(role acl.Role, args ...string) result {
	e.t.Helper()
	r := e.as(role).run(append(args, "-vv")...)
	e.noSecret(r.stdout + r.stderr)
	return r
}

func (e *aclEnv) noSecret(s string) {
	e.t.Helper()
	noPassword(e.t, e.passwords, s)
}

// noPassword fails the test when s contains one of the passwords.
func noPassword(t *testing.T, passwords map[acl.Role]string, s string) {
	t.Helper()
	for role, pw := range passwords {
		if strings.Contains(s, pw) {
			t.Fatalf("the %s user's password was printed:\n%s", role, s)
		}
	}
}

// readCommands are the commands the readonly role must be enough for:
// every ls, show, check and fsck, and the plan of every repair.
func readCommands(e *aclEnv) [][]string {
	s, p := e.s, e.parked
	cmds := [][]string{
		{"partitions", "ls"},
		{"partitions", "ls", s.Orders, "--sort-by", "key"},
		{"partitions", "show", s.Orders, s.Halted},
		{"partitions", "show", s.Payments, s.Pay1},
		{"partitions", "fsck", s.Payments},
		{"leases", "ls"},
		{"leases", "ls", "--group", s.Projector},
		{"parked", "ls"},
		{"parked", "show", p.Subscription, p.Aggregate},
		{"nodes", "ls", "--service", "shop"},
		{"check"},
		{"check", "--max-parked", "10", "--no-expired-leases"},
		// Plans are reads.
		{"partitions", "reap", s.Orders, "--all-cold", "--dry-run"},
		{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force", "--dry-run"},
		{"partitions", "skip-head", s.Orders, s.Halted, "--group", s.Projector, "--reason", "poison", "--dry-run"},
		{"streams", "trim", s.Payments + ":" + s.Pay1, "--maxlen", "1", "--dry-run"},
		{"parked", "retry", p.Subscription, p.Aggregate, "--dry-run"},
		{"parked", "skip", p.Subscription, p.Aggregate, "--reason", "refunded", "--dry-run"},
	}
	if hasCommand("audit", "ls") {
		cmds = append(cmds, []string{"audit", "ls"})
	}
	return cmds
}

// hasCommand reports whether the command tree has the command path.
func hasCommand(path ...string) bool {
	ios, _, _, _ := output.Test()
	c, _, err := newRootCmd(newFactory(ios)).Find(path)
	return err == nil && c.Name() == path[len(path)-1]
}

// repairCommands are the repairs, each of which changes something when
// run with full rights on the fixture.
func repairCommands(e *aclEnv, plan string) [][]string {
	s, p := e.s, e.parked
	return [][]string{
		{"partitions", "skip-head", s.Orders, s.Halted, "--group", s.Projector, "--reason", "poison", "--yes"},
		// No lease held: skip-head takes an operator lease (INCR).
		{"partitions", "skip-head", s.Payments, s.Pay1, "--group", s.Audit, "--reason", "poison", "--force", "--yes"},
		{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force", "--yes"},
		{"partitions", "reap", s.Orders, s.Cold, "--yes"},
		{"streams", "trim", s.Payments + ":" + s.Pay1, "--maxlen", "1", "--yes"},
		{"parked", "retry", p.Subscription, p.Aggregate, "--yes"},
		{"parked", "skip", p.Subscription, p.Aggregate, "--reason", "refunded", "--yes"},
		{"publish", s.Orders, "o-new", "--data", `{"data":{"n":1},"metadata":{"headers":{"id":"e-1","type":"T"}}}`, "--yes"},
		{"apply", "-f", plan, "--yes"},
	}
}

// TestACLReadOnlyRoleReadsEverything runs every read command as the
// readonly user and as the server's default user: same exit code, same
// JSON document (volatile values normalised), and nothing changed.
func TestACLReadOnlyRoleReadsEverything(t *testing.T) {
	e := newACLEnv(t)
	before := e.digest()
	for _, args := range readCommands(e) {
		args := append(args, "-o", "json")
		want := e.run(args...)
		got := e.runAs(acl.ReadOnly, args...)
		if got.code != want.code || strings.Contains(got.stderr, "permission") {
			t.Fatalf("%s: readonly exit %d, default user %d\nreadonly stderr:\n%s\ndefault stderr:\n%s",
				strings.Join(args, " "), got.code, want.code, got.stderr, want.stderr)
		}
		if want.code != 0 && want.code != clierr.ExitCheckFailed {
			t.Fatalf("%s: exit %d with full rights\n%s", strings.Join(args, " "), want.code, want.stderr)
		}
		if g, w := normalizeJSON(t, got.stdout), normalizeJSON(t, want.stdout); g != w {
			t.Fatalf("%s: readonly output differs\n--- readonly:\n%s\n--- default user:\n%s", strings.Join(args, " "), g, w)
		}
	}
	// Tables too (they read the same, but format times on the server's clock).
	for _, args := range [][]string{{"partitions", "ls"}, {"nodes", "ls", "--service", "shop"}, {"parked", "ls"}} {
		e.runAs(acl.ReadOnly, args...).wantCode(t, 0)
	}
	if after := e.digest(); after != before {
		t.Fatal("read commands changed the server's state")
	}
}

// TestACLReadOnlyRoleCannotRepair: every repair as the readonly user
// exits 3 with an error that says permission was denied (in text and in
// -o json), and no key changes. The same repairs then succeed as the
// operator user, and change the state.
func TestACLReadOnlyRoleCannotRepair(t *testing.T) {
	e := newACLEnv(t)
	s := e.s
	// A plan saved by the readonly user itself (planning is a read).
	r := e.runAs(acl.ReadOnly, "partitions", "release", s.Orders, s.Healthy, "--group", s.Projector, "--force", "--dry-run", "-o", "json")
	r.wantCode(t, 0)
	plan := filepath.Join(t.TempDir(), "plan.json")
	writeFile(t, plan, r.stdout)

	before := e.digest()
	for _, args := range repairCommands(e, plan) {
		name := strings.Join(args[:2], " ")
		t.Run(name, func(t *testing.T) {
			r := e.runAs(acl.ReadOnly, args...)
			r.wantCode(t, clierr.ExitUnavailable)
			if !strings.Contains(r.stderr, "protctl: permission denied: ") || !strings.Contains(r.stderr, "NOPERM") {
				t.Fatalf("stderr does not say permission denied:\n%s", r.stderr)
			}
			r = e.runAs(acl.ReadOnly, append(args, "-o", "json")...)
			r.wantCode(t, clierr.ExitUnavailable)
			var doc struct {
				Error struct {
					Code     string `json:"code"`
					Message  string `json:"message"`
					ExitCode int    `json:"exitCode"`
				} `json:"error"`
			}
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n") // -vv logs come first
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &doc); err != nil {
				t.Fatalf("stderr is not one JSON error: %v\n%s", err, r.stderr)
			}
			if doc.Error.Code != string(clierr.Unavailable) || doc.Error.ExitCode != 3 || !strings.Contains(doc.Error.Message, "permission denied") {
				t.Fatalf("JSON error %+v", doc.Error)
			}
			if after := e.digest(); after != before {
				t.Fatal("a refused repair changed the server's state")
			}
		})
	}

	for _, args := range repairCommands(e, plan) {
		r := e.runAs(acl.Operator, args...)
		r.wantCode(t, 0)
		if strings.Contains(r.stderr, "warning") {
			t.Fatalf("operator %s: %s", strings.Join(args, " "), r.stderr)
		}
	}
	// Each applied repair (all but publish) appended its audit entry.
	if n, err := e.c.XLen(context.Background(), audit.Key).Result(); err != nil || n != int64(len(repairCommands(e, plan))-1) {
		t.Fatalf("%d audit entries (%v), want one per repair", n, err)
	}
	if after := e.digest(); after == before {
		t.Fatal("the operator's repairs changed nothing")
	}
	// What was repaired is visible.
	if got := e.lease(s.Projector, s.Halted); got != "" {
		t.Fatalf("lease of %s still %q", s.Halted, got)
	}
	if got := e.lease(s.Projector, s.Healthy); got != "" {
		t.Fatalf("the applied plan left the lease of %s at %q", s.Healthy, got)
	}
}

// TestACLOperatorRoleReadsEverything: the operator role is a superset of
// the readonly role.
func TestACLOperatorRoleReadsEverything(t *testing.T) {
	e := newACLEnv(t)
	for _, args := range readCommands(e) {
		r := e.runAs(acl.Operator, append(args, "-o", "json")...)
		if r.code != 0 && r.code != clierr.ExitCheckFailed {
			t.Fatalf("%s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}

// TestACLReadOnlyDashboardDataLayer drives the dashboard's data layer
// (the Source and the Actions' plans the dashboard builds in read-only
// mode) as the readonly user.
func TestACLReadOnlyDashboardDataLayer(t *testing.T) {
	e := newACLEnv(t)
	before := e.digest()
	ios, _, _, _ := output.Test()
	ios.SetTTY(true)
	f := newFactory(ios)
	env := map[string]string{
		"PROTCTL_REDIS":          e.srv.URL(),
		"PROTCTL_REDIS_USERNAME": e.users[acl.ReadOnly],
		"PROTCTL_REDIS_PASSWORD": e.passwords[acl.ReadOnly],
		"PROTCTL_READ_ONLY":      "true",
	}
	f.Getenv = func(k string) string { return env[k] }
	t.Cleanup(f.close)
	_ = newRootCmd(f) // binds the global flags' defaults
	opts := &tuiOptions{IO: ios, Settings: f.Settings, Inspector: f.Inspector, Repairer: f.Repairer,
		Operator: "protctl:test", Refresh: time.Hour, View: "partitions", Services: []string{"shop"}}
	dash, err := dashboardOptions(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !dash.ReadOnly {
		t.Fatal("the dashboard is not read-only")
	}
	ctx := context.Background()
	src := dash.Source
	cats, err := src.Categories(ctx)
	if err != nil || len(cats) != 2 {
		t.Fatalf("categories %v %v", cats, err)
	}
	for _, c := range cats {
		n := 0
		if err := src.Partitions(ctx, c, func(p []inspect.Partition) error { n += len(p); return nil }); err != nil || n == 0 {
			t.Fatalf("partitions of %s: %d %v", c, n, err)
		}
	}
	if _, err := src.Explain(ctx, e.s.Orders, e.s.Halted); err != nil {
		t.Fatalf("explain: %v", err)
	}
	if l, err := src.Leases(ctx); err != nil || len(l) == 0 {
		t.Fatalf("leases %v %v", l, err)
	}
	if p, err := src.Parked(ctx); err != nil || len(p) != 1 {
		t.Fatalf("parked %v %v", p, err)
	}
	if n, err := src.Nodes(ctx); err != nil || len(n) != 1 {
		t.Fatalf("nodes %v %v", n, err)
	}
	if after := e.digest(); after != before {
		t.Fatal("the dashboard's reads changed the server's state")
	}
}

// TestACLPasswordFromAContextFile: the readonly user with its password in
// a context's passwordFile; a wrong one is an auth failure (exit 3) and
// neither password is printed.
func TestACLPasswordFromAContextFile(t *testing.T) {
	e := newACLEnv(t)
	for _, c := range []struct {
		password string
		code     int
	}{{e.passwords[acl.ReadOnly], 0}, {"not-" + e.passwords[acl.ReadOnly], clierr.ExitUnavailable}} {
		cl := newCLI(t)
		dir := cl.env["XDG_CONFIG_HOME"] + "/protctl"
		writeFile(t, dir+"/ro.password", c.password+"\n")
		writeFile(t, dir+"/config.yaml", "currentContext: ro\ncontexts:\n  - name: ro\n    redis:\n      url: "+e.srv.URL()+
			"\n      username: "+e.users[acl.ReadOnly]+"\n      passwordFile: ro.password\n")
		for _, format := range []string{"table", "json"} {
			r := cl.run("partitions", "ls", "-o", format, "-vv")
			r.wantCode(t, c.code)
			e.noSecret(r.stdout + r.stderr)
			if strings.Contains(r.stdout+r.stderr, c.password) {
				t.Fatalf("the password was printed:\n%s%s", r.stdout, r.stderr)
			}
		}
	}
}

// TestACLPrint: the command's formats, stable JSON fields, the layout
// from the environment, and its usage errors (exit 2, naming the valid
// values).
func TestACLPrint(t *testing.T) {
	r := newCLI(t).run("acl", "print", "--role", "operator", "-o", "json")
	r.wantCode(t, 0)
	var doc map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"apiVersion", "kind", "role", "user", "layout", "commands", "keys", "channels", "setUser", "aclFileLine"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("-o json lacks %q:\n%s", k, r.stdout)
		}
	}
	if doc["kind"] != "ACLProfile" || doc["role"] != "operator" || doc["user"] != "protctl-operator" || doc["layout"] != "protean" {
		t.Errorf("-o json: %v", doc)
	}
	p, err := acl.For(acl.Operator, acl.Options{})
	if err != nil || doc["setUser"] != p.SetUser {
		t.Errorf("setUser %v, want %s (%v)", doc["setUser"], p.SetUser, err)
	}

	r = newCLI(t).run("acl", "print", "--role", "readonly")
	r.wantCode(t, 0)
	for _, w := range []string{"Role:", "readonly", "Keys:", "%R~*:*", "Channels:", "none", "ACL SETUSER protctl-readonly reset on +ping"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("table lacks %q:\n%s", w, r.stdout)
		}
	}
	r = newCLI(t).run("acl", "print", "--role", "node", "-o", "yaml", "--user", "n1")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "setUser: ACL SETUSER n1 reset on") && !strings.Contains(r.stdout, "setUser: 'ACL SETUSER n1 reset on") {
		t.Errorf("yaml:\n%s", r.stdout)
	}
	cl := newCLI(t)
	cl.env["PROTCTL_LAYOUT"] = "cluster"
	r = cl.run("acl", "print", "--role", "node", "--line", "aclfile")
	r.wantCode(t, 0)
	if !strings.HasPrefix(r.stdout, "user protctl-node reset on ") || !strings.Contains(r.stdout, "+cluster|slots") || !strings.HasSuffix(r.stdout, "\n") {
		t.Errorf("aclfile line with PROTCTL_LAYOUT=cluster: %q", r.stdout)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--role", "admin"}, "want readonly, operator or node"},
		{[]string{}, `"role" not set`},
		{[]string{"--role", "node", "--line", "redis-cli"}, "want setuser or aclfile"},
		{[]string{"--role", "node", "--group", "g"}, "only together with categories"},
		{[]string{"--role", "node", "--category", "a b"}, "must not contain spaces"},
		{[]string{"--role", "node", "--layout", "ring"}, "want protean or cluster"},
		// --line prints plain text, which -o json (jsonl, yaml) is not.
		{[]string{"--role", "node", "--line", "aclfile", "-o", "json"}, "--line aclfile and -o json do not combine"},
		{[]string{"--role", "node", "--line", "setuser", "-o", "yaml"}, "--line setuser and -o yaml do not combine"},
	} {
		r := newCLI(t).run(append([]string{"acl", "print"}, c.args...)...)
		r.wantCode(t, clierr.ExitUsage)
		if !strings.Contains(r.stderr, c.want) {
			t.Errorf("acl print %v: stderr %q lacks %q", c.args, r.stderr, c.want)
		}
	}
}

// TestACLReadOnlyDashboardOnATerminal runs protctl tui on a terminal as
// the readonly user: it draws the partitions it read.
func TestACLReadOnlyDashboardOnATerminal(t *testing.T) {
	e := newACLEnv(t)
	before := e.digest()
	cl := e.as(acl.ReadOnly)
	cl.tty = true
	want := []string{"partitions [9]", "o-healthy"}
	cl.configure = func(s *output.IOStreams) { typeWhenShown(s, "q", want...) }
	r := cl.run("tui", "--refresh", "1h", "--read-only")
	r.wantCode(t, 0)
	e.noSecret(r.stdout + r.stderr)
	for _, want := range want {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("the dashboard does not show %q:\n%q", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "NOPERM") || strings.Contains(r.stdout, "permission") {
		t.Fatalf("the dashboard was refused a read:\n%q", r.stdout)
	}
	if e.digest() != before {
		t.Fatal("the dashboard changed the server's state")
	}
}
