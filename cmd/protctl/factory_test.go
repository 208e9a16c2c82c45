package main

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// mutator is a command that changes something the way every mutator must:
// refuse early in read-only mode, print the plan and stop on --dry-run,
// otherwise confirm and apply.
func mutator(applied *bool) func(*Factory) []*cobra.Command {
	return func(f *Factory) []*cobra.Command {
		return []*cobra.Command{{
			Use: "mutate", Short: "m", Example: "m",
			RunE: func(cmd *cobra.Command, args []string) error {
				if f.DryRun() {
					_, err := f.IOStreams.Out.Write([]byte("plan: reap 1 partition\n"))
					return err
				}
				if err := f.CheckWritable(); err != nil {
					return err
				}
				if err := f.Confirm(cmd.Context(), "Reap 1 partition?"); err != nil {
					return err
				}
				*applied = true
				return nil
			},
		}}
	}
}

func TestMutatorGuardRails(t *testing.T) {
	cases := []struct {
		name    string
		tty     bool
		stdin   string
		args    []string
		env     map[string]string
		code    int
		applied bool
		stderr  string
	}{
		{name: "no TTY, no --yes", code: 6, stderr: "refusing to change anything without --yes when stdin is not a terminal"},
		{name: "no TTY, --yes", args: []string{"--yes"}, code: 0, applied: true},
		{name: "TTY, y", tty: true, stdin: "y\n", code: 0, applied: true, stderr: "Reap 1 partition? [y/N]"},
		{name: "TTY, declined", tty: true, stdin: "n\n", code: 6, stderr: "declined"},
		{name: "--read-only wins over --yes", args: []string{"--yes", "--read-only"}, code: 6, stderr: "read-only"},
		{name: "PROTCTL_READ_ONLY", args: []string{"--yes"}, env: map[string]string{"PROTCTL_READ_ONLY": "true"}, code: 6, stderr: "read-only"},
		{name: "dry run needs no --yes and changes nothing", args: []string{"--dry-run", "--read-only"}, code: 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			applied := false
			cl := newCLI(t)
			cl.tty, cl.stdin = c.tty, c.stdin
			for k, v := range c.env {
				cl.env[k] = v
			}
			cl.extra = mutator(&applied)
			r := cl.run(append([]string{"mutate"}, c.args...)...)
			r.wantCode(t, c.code)
			if applied != c.applied {
				t.Fatalf("applied = %v, want %v", applied, c.applied)
			}
			if !strings.Contains(r.stderr, c.stderr) {
				t.Fatalf("stderr %q, want %q", r.stderr, c.stderr)
			}
		})
	}
}

func TestReadOnlyContext(t *testing.T) {
	applied := false
	cl := newCLI(t)
	writeFile(t, cl.env["XDG_CONFIG_HOME"]+"/protctl/config.yaml", "currentContext: prod\ncontexts:\n  - name: prod\n    readOnly: true\n")
	cl.extra = mutator(&applied)
	r := cl.run("mutate", "--yes", "-o", "json")
	r.wantCode(t, 6)
	if applied || !strings.Contains(r.stderr, `"code":"REFUSED"`) {
		t.Fatalf("applied %v, stderr %q", applied, r.stderr)
	}
	// An explicit --read-only=false wins over the context (flag > context).
	r = cl.run("mutate", "--yes", "--read-only=false")
	r.wantCode(t, 0)
}

func TestProtectedContextAsksForItsName(t *testing.T) {
	applied := false
	cl := newCLI(t)
	writeFile(t, cl.env["XDG_CONFIG_HOME"]+"/protctl/config.yaml", "currentContext: prod\ncontexts:\n  - name: prod\n    protected: true\n")
	cl.extra = mutator(&applied)
	cl.tty, cl.stdin = true, "y\n"
	cl.run("mutate").wantCode(t, 6)
	cl.stdin = "prod\n"
	cl.run("mutate").wantCode(t, 0)
	if !applied {
		t.Fatal("typing the context's name confirms")
	}
}

// redisClientOf runs a command that creates the Redis client and returns it.
func redisClientOf(t *testing.T, cl *cli, args ...string) (redis.UniversalClient, result) {
	t.Helper()
	var got redis.UniversalClient
	cl.extra = func(f *Factory) []*cobra.Command {
		return []*cobra.Command{{
			Use: "client", Short: "c", Example: "c",
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := f.RedisClient()
				if err != nil {
					return err
				}
				again, _ := f.RedisClient()
				if again != c {
					t.Error("RedisClient must return the same client")
				}
				got = c
				return nil
			},
		}}
	}
	r := cl.run(append([]string{"client"}, args...)...)
	return got, r
}

func TestRedisClientSettings(t *testing.T) {
	t.Run("URL, env password, timeouts", func(t *testing.T) {
		cl := newCLI(t)
		cl.env["PROTCTL_REDIS"] = "redis://10.0.0.1:6390/3"
		cl.env["PROTCTL_REDIS_PASSWORD"] = "pw-from-env"
		c, r := redisClientOf(t, cl, "--timeout", "3s")
		r.wantCode(t, 0)
		o := c.(*redis.Client).Options()
		if o.Addr != "10.0.0.1:6390" || o.DB != 3 || o.Password != "pw-from-env" || o.TLSConfig != nil {
			t.Fatalf("options: addr %s db %d tls %v", o.Addr, o.DB, o.TLSConfig != nil)
		}
		if o.DialTimeout.Seconds() != 3 || o.ReadTimeout.Seconds() != 3 || o.ClientName != "protctl" {
			t.Fatalf("timeouts %v %v, name %q", o.DialTimeout, o.ReadTimeout, o.ClientName)
		}
	})
	t.Run("URL timeouts win over --timeout", func(t *testing.T) {
		c, r := redisClientOf(t, newCLI(t), "--redis", "redis://127.0.0.1:6390/0?read_timeout=7s", "--timeout", "2s")
		r.wantCode(t, 0)
		o := c.(*redis.Client).Options()
		if o.ReadTimeout.Seconds() != 7 || o.WriteTimeout.Seconds() != 2 || o.DialTimeout.Seconds() != 2 {
			t.Fatalf("dial %v read %v write %v", o.DialTimeout, o.ReadTimeout, o.WriteTimeout)
		}
	})
	t.Run("rediss is TLS", func(t *testing.T) {
		c, r := redisClientOf(t, newCLI(t), "--redis", "rediss://cache.example:6380/0")
		r.wantCode(t, 0)
		o := c.(*redis.Client).Options()
		if o.TLSConfig == nil || o.TLSConfig.ServerName != "cache.example" {
			t.Fatalf("TLS config %+v", o.TLSConfig)
		}
	})
	t.Run("cluster layout uses a cluster client", func(t *testing.T) {
		c, r := redisClientOf(t, newCLI(t), "--redis", "redis://10.0.0.1:7000?addr=10.0.0.2:7001", "--layout", "cluster")
		r.wantCode(t, 0)
		cc, ok := c.(*redis.ClusterClient)
		if !ok {
			t.Fatalf("got %T", c)
		}
		if got := strings.Join(cc.Options().Addrs, ","); got != "10.0.0.1:7000,10.0.0.2:7001" {
			t.Fatalf("seed addrs %s", got)
		}
	})
	t.Run("bad CA file is a config error", func(t *testing.T) {
		_, r := redisClientOf(t, newCLI(t), "--redis-tls-ca", "/nonexistent/ca.pem")
		r.wantCode(t, 2)
	})
}

func TestPasswordIsNeverPrinted(t *testing.T) {
	const secret = "hunter2-very-secret"
	cl := newCLI(t)
	_, r := redisClientOf(t, cl, "--redis", "redis://ops:"+secret+"@127.0.0.1:1/0", "-vv")
	r.wantCode(t, 0)
	if !strings.Contains(r.stderr, "redis client") {
		t.Fatalf("-vv should log the client: %q", r.stderr)
	}
	if strings.Contains(r.stderr+r.stdout, secret) {
		t.Fatalf("the password was printed: %q", r.stderr)
	}
	// A URL that fails to parse must not echo the password either.
	_, r = redisClientOf(t, newCLI(t), "--redis", "redis://ops:"+secret+"@127.0.0.1:1/notadb")
	r.wantCode(t, 2)
	if strings.Contains(r.stderr, secret) {
		t.Fatalf("the password was printed: %q", r.stderr)
	}
}
