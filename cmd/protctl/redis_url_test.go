package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/testenv"
)

// Every way to give a Redis URL accepts and refuses the same URLs
// (redisconn.Check): --redis, context add, context set, and a contexts
// file written by hand. unix:// was refused by context add and set alone.
func TestRedisURLFormsAgree(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"redis://127.0.0.1:6390/0", true},
		{"rediss://redis.example:6380/1", true},
		{"unix:///tmp/x/redis.sock", true},
		{"unix://limited@/tmp/x/redis.sock?db=2", true},
		{"redis+sentinel://s1,s2:26380/mymaster/0", true},
		{"http://127.0.0.1:6390", false},
		{"redis:///0", false}, // go-redis would dial localhost:6379
		{"unix://", false},
		{"redis+sentinel://s1", false},
	} {
		t.Run(tc.url, func(t *testing.T) {
			want := 0
			if !tc.ok {
				want = clierr.ExitUsage
			}
			hand := "contexts:\n  - name: hand\n    redis: {url: \"" + tc.url + "\"}\n"
			for _, p := range []struct {
				name    string
				content string
				args    []string
			}{
				{"--redis", commentedContexts, []string{"config", "view", "--redis", tc.url}},
				{"context add", commentedContexts, []string{"context", "add", "x3", "--redis", tc.url}},
				{"context set", commentedContexts, []string{"context", "set", "prod", "redis.url=" + tc.url}},
				{"a file written by hand", hand, []string{"config", "view", "--context", "hand"}},
			} {
				cl, _ := cliWithConfig(t, p.content)
				r := cl.run(p.args...)
				if r.code != want {
					t.Errorf("%s: exit %d, want %d\n%s", p.name, r.code, want, r.stderr)
				}
				if !tc.ok && !strings.Contains(r.stderr, "invalid Redis URL") {
					t.Errorf("%s: the refusal does not say the URL is invalid:\n%s", p.name, r.stderr)
				}
			}
		})
	}
}

// A context added with a unix:// URL reaches Redis over its socket.
func TestContextWithUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	srv := testenv.StartRedis(t, testenv.WithArgs("--unixsocket", sock))
	s := testenv.ProteanStandard(t, srv.Client(t))
	cl := newCLI(t)
	cl.run("context", "add", "local", "--redis", "unix://"+sock).wantCode(t, 0)
	r := cl.run("--context", "local", "partitions", "ls", s.Orders, "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, s.Healthy) {
		t.Fatalf("partitions ls over the socket:\n%s\n%s", r.stdout, r.stderr)
	}
}
