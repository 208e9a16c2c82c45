package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// The operator commands reach a primary watched by Sentinel through a
// redis+sentinel:// URL, with the Sentinels' and the primary's passwords
// apart: partitions ls reads, partitions release applies on the primary,
// and after a forced failover the same commands reach the new primary.
func TestCLIThroughSentinel(t *testing.T) {
	const primaryPW, sentinelPW = "primary-secret", "sentinel-secret"
	s := testenv.StartSentinel(t, testenv.WithSentinelPasswords(primaryPW, sentinelPW))
	ctx := context.Background()
	fc := s.FailoverClient(t)
	sc := testenv.ProteanStandard(t, fc)
	pwFile := filepath.Join(t.TempDir(), "sentinel.password")
	writeFile(t, pwFile, sentinelPW+"\n")

	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = s.URL()
	cl.env["PROTCTL_REDIS_PASSWORD"] = primaryPW
	cl.env["PROTCTL_REDIS_SENTINEL_PASSWORD_FILE"] = pwFile

	// config view names the master, the Sentinels and where the
	// Sentinel password came from, never the password.
	r := cl.run("config", "view", "-o", "json")
	r.wantCode(t, 0)
	var v struct {
		Redis struct {
			Sentinel *struct {
				MasterName   string   `json:"masterName"`
				Addrs        []string `json:"addrs"`
				PasswordSet  bool     `json:"passwordSet"`
				PasswordFile *string  `json:"passwordFile"`
			} `json:"sentinel"`
		} `json:"redis"`
		Sources map[string]string `json:"sources"`
	}
	decode(t, r.stdout, &v)
	if v.Redis.Sentinel == nil || v.Redis.Sentinel.MasterName != s.MasterName || strings.Join(v.Redis.Sentinel.Addrs, ",") != strings.Join(s.Addrs(), ",") ||
		!v.Redis.Sentinel.PasswordSet || v.Redis.Sentinel.PasswordFile == nil || *v.Redis.Sentinel.PasswordFile != pwFile || v.Sources["redisSentinelPassword"] != "env" {
		t.Fatalf("config view: %s", r.stdout)
	}
	if strings.Contains(r.stdout+r.stderr, sentinelPW) || strings.Contains(r.stdout+r.stderr, primaryPW) {
		t.Fatal("config view printed a password")
	}

	listed := func(want ...string) {
		t.Helper()
		r := cl.run("partitions", "ls", sc.Orders, "-o", "json")
		r.wantCode(t, 0)
		for _, w := range want {
			if !strings.Contains(r.stdout, `"`+w+`"`) {
				t.Fatalf("partitions ls lacks %s:\n%s", w, r.stdout)
			}
		}
	}
	listed(sc.Halted, sc.Healthy, sc.Lagging)

	release := func(key, token string) {
		t.Helper()
		r := cl.run("partitions", "release", sc.Orders, key, "--group", sc.Projector, "--force", "--yes", "-o", "json")
		r.wantCode(t, 0)
		var p plannedDoc
		decode(t, r.stdout, &p)
		if len(p.Items) != 1 || p.Items[0].result() != "applied" || p.Items[0].Precondition.Lease == nil || *p.Items[0].Precondition.Lease != token {
			t.Fatalf("release %s: %s", key, r.stdout)
		}
	}
	leaseOn := func(srv *testenv.Redis, key string) string {
		t.Helper()
		v, err := srv.Client(t).Get(ctx, broker.ProteanLayout.LeaseKey(sc.Projector, key)).Result()
		if err == redis.Nil {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	release(sc.Halted, sc.HaltedToken)
	if got := leaseOn(s.Servers[0], sc.Halted); got != "" {
		t.Fatalf("the primary still holds the released lease %q", got)
	}

	// Fail over (after the replica has every write), then the same
	// commands find the new primary through the Sentinels.
	if n, err := fc.Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d, %v", n, err)
	}
	now, err := s.Promote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed(sc.Halted, sc.Healthy)
	release(sc.Healthy, sc.HealthyToken)
	if got := leaseOn(now, sc.Healthy); got != "" {
		t.Fatalf("the new primary %s still holds the released lease %q", now.Addr, got)
	}

	// The Sentinels' password is needed: without it, the command cannot
	// reach Redis (exit 3) and says why, without printing a password.
	nopw := newCLI(t)
	nopw.env["PROTCTL_REDIS"] = s.URL()
	nopw.env["PROTCTL_REDIS_PASSWORD"] = primaryPW
	r = nopw.run("partitions", "ls", sc.Orders)
	r.wantCode(t, 3)
	for _, w := range []string{"refused the login", "PROTCTL_REDIS_SENTINEL_PASSWORD", "redis.sentinel.passwordFile"} {
		if !strings.Contains(r.stderr, w) {
			t.Fatalf("no Sentinel password: stderr lacks %q: %s", w, r.stderr)
		}
	}
	if strings.Contains(r.stderr, primaryPW) {
		t.Fatal("the error printed the password")
	}

	// A master name no Sentinel monitors: exit 3, saying so.
	wrong := newCLI(t)
	wrong.env["PROTCTL_REDIS"] = strings.Replace(s.URL(), s.MasterName, "nosuch", 1)
	wrong.env["PROTCTL_REDIS_SENTINEL_PASSWORD"] = sentinelPW
	r = wrong.run("partitions", "ls", sc.Orders)
	r.wantCode(t, 3)
	if !strings.Contains(r.stderr, `no Sentinel monitors a master named "nosuch"`) {
		t.Fatalf("unknown master: %s", r.stderr)
	}
}

// Bad Sentinel settings are config errors (exit 2) that name the setting
// and what is wrong, before anything dials; a context with a bad Sentinel
// URL is refused and the file is left as it was.
func TestSentinelSettingsErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"no master name", []string{"--redis", "redis+sentinel://127.0.0.1:1"}, nil, []string{"--redis", "no master name"}},
		{"empty address", []string{"--redis", "redis+sentinel://127.0.0.1:1,,127.0.0.1:2/m"}, nil, []string{"--redis", "address 2 of 3 is empty"}},
		{"env names the variable", nil, map[string]string{"PROTCTL_REDIS": "redis+sentinel:///m"}, []string{"PROTCTL_REDIS", "no Sentinel address"}},
		{"cluster layout", []string{"--redis", "redis+sentinel://127.0.0.1:1/m", "--layout", "cluster"}, nil, []string{"--layout", "--redis", "Sentinel"}},
		{"replica reads", []string{"--redis", "redis+sentinel://127.0.0.1:1/m?replica_only=true"}, nil, []string{"replica_only", "replicas"}},
		{"unreadable Sentinel password file", []string{"--redis", "redis+sentinel://127.0.0.1:1/m"},
			map[string]string{"PROTCTL_REDIS_SENTINEL_PASSWORD_FILE": "/nonexistent/pw"}, []string{"PROTCTL_REDIS_SENTINEL_PASSWORD_FILE", "Sentinel password file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newCLI(t)
			for k, v := range tc.env {
				cl.env[k] = v
			}
			r := cl.run(append([]string{"partitions", "ls", "shop::order"}, tc.args...)...)
			r.wantCode(t, 2)
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Fatalf("stderr lacks %q: %s", w, r.stderr)
				}
			}
		})
	}

	t.Run("context add and set", func(t *testing.T) {
		cl := newCLI(t)
		path := filepath.Join(t.TempDir(), "config.yaml")
		cl.env["PROTCTL_CONFIG"] = path
		writeFile(t, path, "contexts: []\n")
		r := cl.run("context", "add", "ha", "--redis", "redis+sentinel://s1:26379,s2:26379/mymaster/0",
			"redis.sentinel.username=sentinel-ops", "redis.sentinel.passwordFile=ha-sentinel.password")
		r.wantCode(t, 0)
		good, _ := os.ReadFile(path)
		for _, w := range []string{"redis+sentinel://s1:26379,s2:26379/mymaster/0", "username: sentinel-ops", "passwordFile: ha-sentinel.password"} {
			if !strings.Contains(string(good), w) {
				t.Fatalf("the file lacks %q:\n%s", w, good)
			}
		}
		for _, bad := range []struct {
			args []string
			want string
		}{
			{[]string{"context", "set", "ha", "--redis", "redis+sentinel://s1:26379"}, "no master name"},
			{[]string{"context", "set", "ha", "redis.url=redis+sentinel://a:pw@s1/m"}, "stored in clear"},
			{[]string{"context", "set", "ha", "--layout", "cluster"}, "redis.layout"},
			{[]string{"context", "set", "ha", "redis.sentinel.password=x"}, "passwords are never stored"},
			{[]string{"context", "add", "plain", "--redis", "redis://h:6379/0", "redis.sentinel.username=x"}, "redis.sentinel"},
		} {
			r := cl.run(bad.args...)
			r.wantCode(t, 2)
			if !strings.Contains(r.stderr, bad.want) {
				t.Fatalf("%v: stderr lacks %q: %s", bad.args, bad.want, r.stderr)
			}
			if now, _ := os.ReadFile(path); string(now) != string(good) {
				t.Fatalf("%v changed the file:\n%s", bad.args, now)
			}
		}
	})
}

// A repair applied while Sentinel fails over either applies once or exits
// 3 (UNAVAILABLE) having changed nothing: a saved skip-head plan is
// applied right after the primary is SIGKILLed, then again once the
// replica is promoted. Exactly one of the two applies (the other is a
// conflict, exit 5, or the unavailable exit 3), and the dead-letter
// stream ends with the one head it named.
func TestRepairDuringSentinelFailover(t *testing.T) {
	s := testenv.StartSentinel(t)
	ctx := context.Background()
	fc := s.FailoverClient(t)
	sc := testenv.ProteanStandard(t, fc)
	if n, err := fc.Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d, %v", n, err)
	}
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = s.URL()
	r := cl.run("partitions", "skip-head", sc.Orders, sc.Halted, "--group", sc.Projector, "--reason", "poison", "--dry-run", "-o", "json")
	r.wantCode(t, 0)
	plan := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(plan, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}

	old := s.Servers[0]
	old.Kill()
	first := cl.run("apply", "-f", plan, "--yes", "-o", "json", "--timeout", "2s")
	t.Logf("apply during the failover: exit %d", first.code)
	switch first.code {
	case 0:
	case 3:
		if !strings.Contains(first.stderr, "cannot reach") || !strings.Contains(first.stderr, `"code":"UNAVAILABLE"`) {
			t.Fatalf("exit 3 without saying Redis is unreachable: %s", first.stderr)
		}
	default:
		t.Fatalf("apply during the failover exited %d, want 0 or 3:\n%s\n%s", first.code, first.stdout, first.stderr)
	}
	now, err := s.WaitNewMaster(ctx, old.Addr)
	if err != nil {
		t.Fatal(err)
	}
	second := cl.run("apply", "-f", plan, "--yes", "-o", "json")
	want := 0
	if first.code == 0 {
		want = 5 // the head moved: the plan's precondition no longer holds
	}
	second.wantCode(t, want)

	c := now.Client(t)
	l := broker.ProteanLayout
	dlq, err := c.XRange(ctx, l.DLQStream(sc.Orders, sc.Halted), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(dlq) != 1 {
		t.Fatalf("the dead-letter stream holds %d entries, want the one head: %v", len(dlq), dlq)
	}
	head, err := c.XRange(ctx, l.Stream(sc.Orders, sc.Halted), sc.HaltedIDs[0], sc.HaltedIDs[0]).Result()
	if err != nil || len(head) != 1 || !jsonEqual(deadLetterOf(dlq[0]).Payload, []byte(head[0].Values[broker.DataField].(string))) {
		t.Fatalf("dead-lettered %v, want the head %v (%v)", dlq[0].Values, head, err)
	}
	if pend, err := c.XPending(ctx, l.Stream(sc.Orders, sc.Halted), sc.Projector).Result(); err != nil || pend.Count != 0 {
		t.Fatalf("pending after the skip: %+v, %v", pend, err)
	}
}

// rediss+sentinel:// reaches Sentinels and a primary that speak only
// TLS, trusting the CA of --redis-tls-ca for both (each checked against
// the address it is dialled by); without that CA the certificate does not
// verify and the command exits 3.
func TestCLIThroughSentinelTLS(t *testing.T) {
	s := testenv.StartSentinel(t, testenv.WithSentinelTLS())
	sc := testenv.ProteanStandard(t, s.FailoverClient(t))
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = s.URL()
	r := cl.run("partitions", "ls", sc.Orders, "-o", "json", "--redis-tls-ca", s.TLS.CA)
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"`+sc.Halted+`"`) {
		t.Fatalf("partitions ls over TLS:\n%s", r.stdout)
	}
	// A generous bound: a loaded machine must not turn the handshake's
	// refusal into a timeout.
	r = cl.run("partitions", "ls", sc.Orders, "--timeout", "30s")
	r.wantCode(t, 3)
	if !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("an untrusted certificate: %s", r.stderr)
	}
}
