package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/testenv"
)

// A node config with a problem exits 2 (a config error) and names the
// field's path (and line) in its message, before anything is dialled.
func TestRunNodeBadConfigExits2(t *testing.T) {
	good := `service: shop
node: n1
redis:
  url: redis://127.0.0.1:1/0
admin: {listen: "127.0.0.1:0"}
subscriptions:
  - name: projector
    redis: {categories: [shop::order]}
    handler:
      http: {url: "http://127.0.0.1:1/events"}
`
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown field", strings.Replace(good, "node: n1", "node: n1\nnodes: 3", 1), "node.yaml:3: nodes: unknown field"},
		{"unknown nested field", strings.Replace(good, "categories:", "categorys:", 1), "node.yaml:8: subscriptions[0].redis.categorys: unknown field (did you mean categories?)"},
		{"missing handler", strings.Replace(good, "    handler:\n      http: {url: \"http://127.0.0.1:1/events\"}\n", "", 1), "subscriptions[0].handler: exactly one of exec, http, log, process is required"},
		{"bad handler URL", strings.Replace(good, "http://127.0.0.1:1/events", "127.0.0.1:1/events", 1), `node.yaml:10: subscriptions[0].handler.http.url: want an http:// or https:// URL with a host, got "127.0.0.1:1/events"`},
		{"bad Redis URL", strings.Replace(good, "redis://127.0.0.1:1/0", "tcp://127.0.0.1:1", 1), "node.yaml:4: redis.url: invalid Redis URL"},
		{"admin off loopback without a token", strings.Replace(good, "127.0.0.1:0", "0.0.0.0:0", 1), "admin.tokenFile: a token is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl := newCLI(t)
			path := filepath.Join(t.TempDir(), "node.yaml")
			writeFile(t, path, tc.yaml)
			r := cl.run("run", "node", "--config", path)
			r.wantCode(t, 2)
			if !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("stderr lacks %q:\n%s", tc.want, r.stderr)
			}
			cl.run("run", "node", "--config", path, "-o", "json").wantCode(t, 2)
		})
	}

	cl := newCLI(t)
	r := cl.run("run", "node", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	r.wantCode(t, 2)
	if !strings.Contains(r.stderr, "missing.yaml: cannot read the config") {
		t.Errorf("missing file: %s", r.stderr)
	}
	cl.run("run", "node").wantCode(t, 2)
	path := filepath.Join(t.TempDir(), "node.yaml")
	writeFile(t, path, good)
	cl.run("run", "node", "--config", path, "--log-format", "xml").wantCode(t, 2)
	cl.run("run", "node", "--config", path, "--log-level", "loud").wantCode(t, 2)
	cl.run("run", "node", "--config", path, "--redis", "redis://x:1").wantCode(t, 2)
}

// Redis unreachable at start exits 3 (UNAVAILABLE), without waiting
// forever.
func TestRunNodeRedisUnreachableExits3(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "node.yaml")
	writeFile(t, path, `service: shop
redis: {url: "redis://127.0.0.1:`+strconv.Itoa(port)+`/0"}
admin: {listen: "127.0.0.1:0"}
subscriptions:
  - name: p
    redis: {categories: [c]}
    handler: {log: {}}
`)
	cl := newCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl.ctx = ctx
	r := cl.run("run", "node", "--config", path)
	r.wantCode(t, 3)
	if !strings.HasPrefix(r.stderr, "protctl: redis.url redis://127.0.0.1:"+strconv.Itoa(port)+"/0: cannot reach Redis: ") {
		t.Errorf("stderr: %s", r.stderr)
	}
}

// Redis refusing the node's credentials at start exits 3 naming the
// settings that hold them, not only Redis's reply.
func TestRunNodeRedisAuthRefusedNamesTheSettings(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.WithACLUser("node", "s3cret"))
	path := filepath.Join(t.TempDir(), "node.yaml")
	writeFile(t, path, `service: shop
redis: {url: "`+srv.URL()+`"}
admin: {listen: "127.0.0.1:0"}
subscriptions:
  - name: p
    redis: {categories: [c]}
    handler: {log: {}}
`)
	for _, tc := range []struct{ name, password, reply string }{
		{"no password", "", "NOAUTH"},
		{"wrong password", "nope", "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newCLI(t)
			cl.env["PROTCTL_REDIS_PASSWORD"] = tc.password
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl.ctx = ctx
			r := cl.run("run", "node", "--config", path)
			r.wantCode(t, 3)
			for _, want := range []string{"Redis refused the login: " + tc.reply, "redis.username", "PROTCTL_REDIS_PASSWORD", "redis.passwordFile"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr lacks %q: %s", want, r.stderr)
				}
			}
			if strings.Contains(r.stderr, "nope") {
				t.Errorf("stderr shows the password: %s", r.stderr)
			}
		})
	}
}
