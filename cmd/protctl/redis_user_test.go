package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/testenv"
)

// A Redis user given without a password, in the URL or in
// PROTCTL_REDIS_USERNAME, is the user commands run as (a nopass ACL user)
// and the user config view shows; it was dropped, so commands ran as the
// default user. The user here may only ping, so a listing it runs is
// refused (exit 3, permission denied), where the default user's is not.
func TestRedisUserWithoutPassword(t *testing.T) {
	srv := testenv.StartRedis(t)
	if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "limited", "on", "nopass", "-@all", "+ping", "+hello", "+client|setname").Err(); err != nil {
		t.Fatal(err)
	}
	limitedURL := "redis://limited@" + srv.Addr + "/0"

	r := newCLI(t).run("partitions", "ls", "shop::order", "--redis", srv.URL())
	if r.code == clierr.ExitUnavailable {
		t.Fatalf("as the default user: exit %d\n%s", r.code, r.stderr)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"the URL's user", nil, []string{"--redis", limitedURL}},
		{"PROTCTL_REDIS_USERNAME", map[string]string{"PROTCTL_REDIS_USERNAME": "limited"}, []string{"--redis", srv.URL()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			for k, v := range tc.env {
				c.env[k] = v
			}
			r := c.run(append([]string{"partitions", "ls", "shop::order"}, tc.args...)...)
			r.wantCode(t, clierr.ExitUnavailable)
			if !strings.Contains(r.stderr, "permission denied") {
				t.Errorf("want a permission denial:\n%s", r.stderr)
			}

			r = c.run(append([]string{"config", "view", "-o", "json"}, tc.args...)...)
			r.wantCode(t, 0)
			var v struct {
				Redis struct {
					Username *string `json:"username"`
				} `json:"redis"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
				t.Fatal(err)
			}
			if v.Redis.Username == nil || *v.Redis.Username != "limited" {
				t.Errorf("config view: redis.username %v, want \"limited\"\n%s", v.Redis.Username, r.stdout)
			}
		})
	}
}
