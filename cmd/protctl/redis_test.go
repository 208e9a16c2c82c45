package main

import (
	"context"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/testenv"
)

// TestRedisAuthAgainstARealServer runs a command that pings through the
// factory's client against a password-protected redis-server: the password
// comes from the environment, a wrong or missing one exits 3 (auth failed),
// and the password never appears in the output.
func TestRedisAuthAgainstARealServer(t *testing.T) {
	srv := testenv.StartRedis(t)
	const secret = "s3cret-for-test"
	if err := srv.Client(t).ConfigSet(context.Background(), "requirepass", secret).Err(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		password string
		code     int
	}{
		{"right password", secret, 0},
		{"wrong password", "nope", 3},
		{"no password", "", 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := newCLI(t)
			cl.env["PROTCTL_REDIS"] = srv.URL()
			cl.env["PROTCTL_REDIS_PASSWORD"] = c.password
			cl.extra = needsRedis
			r := cl.run("needredis", "-o", "json", "-vv")
			r.wantCode(t, c.code)
			if c.code == 3 && !strings.Contains(r.stderr, `"code":"UNAVAILABLE"`) {
				t.Fatalf("stderr %q", r.stderr)
			}
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Fatal("the password was printed")
			}
		})
	}
}

func TestPasswordFileFromContext(t *testing.T) {
	srv := testenv.StartRedis(t)
	const secret = "from-a-file"
	if err := srv.Client(t).ConfigSet(context.Background(), "requirepass", secret).Err(); err != nil {
		t.Fatal(err)
	}
	cl := newCLI(t)
	dir := cl.env["XDG_CONFIG_HOME"] + "/protctl"
	writeFile(t, dir+"/local.password", secret+"\n")
	writeFile(t, dir+"/config.yaml", "currentContext: local\ncontexts:\n  - name: local\n    redis:\n      url: "+srv.URL()+"\n      passwordFile: local.password\n")
	cl.extra = needsRedis
	cl.run("needredis").wantCode(t, 0)
}

// TestParkedCommandsWithARefusedLogin: every parked command exits 3
// (UNAVAILABLE) when Redis refuses the credentials, as parked ls does;
// the refusal is never read as an entry ("key \"\" does not hold a JSON
// parked entry", exit 1) or as an empty ledger (exit 0).
func TestParkedCommandsWithARefusedLogin(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.WithPassword("right"))
	for _, args := range [][]string{
		{"parked", "ls"},
		{"parked", "ls", "--subscription", "demo.OrderProjector"},
		{"parked", "show", "demo.OrderProjector", "o-0005"},
		{"parked", "retry", "demo.OrderProjector", "o-0005", "--dry-run"},
		{"parked", "skip", "demo.OrderProjector", "o-0005", "--reason", "r", "--dry-run"},
	} {
		t.Run(strings.Join(args[:2], " ")+" "+args[len(args)-1], func(t *testing.T) {
			cl := newCLI(t)
			cl.env["PROTCTL_REDIS"] = srv.URL()
			cl.env["PROTCTL_REDIS_PASSWORD"] = "wrong"
			r := cl.run(append(args, "-o", "json")...)
			r.wantCode(t, 3)
			if !strings.Contains(r.stderr, `"code":"UNAVAILABLE"`) || !strings.Contains(r.stderr, "WRONGPASS") {
				t.Fatalf("stderr %q", r.stderr)
			}
		})
	}
}
