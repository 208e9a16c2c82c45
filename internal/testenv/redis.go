// Package testenv starts real servers for tests: redis-server processes on
// free loopback ports (never the user's 6379), each with its own temporary
// directory, stopped at cleanup. No test in protctl talks to a mock.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// InstallHint is printed when redis-server is missing.
const InstallHint = "redis-server not found on PATH: install it with `sudo apt-get install -y redis-server` (or run scripts/test, which does)"

// Redis is a redis-server process started for tests.
type Redis struct {
	Addr string // 127.0.0.1:port
	Port int
	// TLS holds the certificates of a server started WithTLS (its only
	// listener is then TLS); nil for a plain server.
	TLS *PKI

	dir  string
	args []string
	// tlsAuth is the server's tls-auth-clients (optional or yes).
	tlsAuth string
	// users are the ACL users of WithACLUser; with any, the default user
	// is off and testenv's own clients log in as adminUser.
	users     []aclUser
	adminPass string
	// password is requirepass (and masterauth, for a replica): testenv's
	// own clients log in with it.
	password string

	proc process
}

// RedisOption configures StartRedis.
type RedisOption func(*redisConfig)

type redisConfig struct {
	args     []string
	tls      bool
	tlsAuth  string
	users    []aclUser
	password string
	// pki, when set with tls, is shared with other servers (a primary and
	// its replica) instead of generated for this one.
	pki *PKI
}

type aclUser struct {
	name, password string
	rules          []string
}

// WithArgs passes extra redis-server arguments, e.g. "--appendonly", "yes".
func WithArgs(args ...string) RedisOption {
	return func(c *redisConfig) { c.args = append(c.args, args...) }
}

// WithPassword sets requirepass (and masterauth, so that a replica of a
// server with the same password can sync): clients must AUTH with it;
// testenv's own clients do.
func WithPassword(pw string) RedisOption {
	return func(c *redisConfig) { c.password = pw }
}

// StartRedis starts a redis-server for t and stops it at cleanup. It fails
// the test with the install command when redis-server is missing.
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	dir := t.TempDir()
	r, err := NewRedis(dir, opts...)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(r.Stop)
	return r
}

// NewRedis starts a redis-server with its files in dir. Use it from
// TestMain to share one server per package; call Stop when done.
func NewRedis(dir string, opts ...RedisOption) (*Redis, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New(InstallHint)
	}
	var cfg redisConfig
	for _, o := range opts {
		o(&cfg)
	}
	var pki *PKI
	if cfg.tls && cfg.pki != nil {
		pki = cfg.pki
	} else if cfg.tls {
		var err error
		if pki, err = GeneratePKI(filepath.Join(dir, "tls")); err != nil {
			return nil, err
		}
	}
	adminPass := ""
	if len(cfg.users) > 0 {
		adminPass = randomSecret()
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: dir, args: cfg.args,
			TLS: pki, tlsAuth: cfg.tlsAuth, users: cfg.users, adminPass: adminPass, password: cfg.password}
		if lastErr = r.start(); lastErr == nil {
			return r, nil
		}
	}
	return nil, fmt.Errorf("start redis-server: %w", lastErr)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (r *Redis) start() error {
	args := []string{"--port", strconv.Itoa(r.Port)}
	if r.TLS != nil {
		args = []string{
			"--port", "0",
			"--tls-port", strconv.Itoa(r.Port),
			"--tls-cert-file", r.TLS.ServerCert,
			"--tls-key-file", r.TLS.ServerKey,
			"--tls-ca-cert-file", r.TLS.CA,
			"--tls-auth-clients", r.tlsAuth,
		}
	}
	args = append(args, r.aclArgs()...)
	if r.password != "" {
		args = append(args, "--requirepass", r.password, "--masterauth", r.password)
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--dir", r.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", filepath.Join(r.dir, "redis.log"),
	)
	args = append(args, r.args...)
	return r.proc.spawn("redis-server", args, r.Options(), filepath.Join(r.dir, "redis.log"))
}

// URL is the server's redis:// URL (rediss:// for a TLS server). It
// names no user and no password.
func (r *Redis) URL() string {
	if r.TLS != nil {
		return "rediss://" + r.Addr + "/0"
	}
	return "redis://" + r.Addr + "/0"
}

// Client returns a new client for the server, closed at t's cleanup. On a
// TLS server it trusts the test CA and presents the client certificate;
// with ACL users it logs in as testenv's own admin user.
func (r *Redis) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(r.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// FlushAll empties the server, failing t on error.
func (r *Redis) FlushAll(t testing.TB) {
	t.Helper()
	c := redis.NewClient(r.Options())
	defer c.Close()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("testenv: flushall: %v", err)
	}
}

// Pause stops the server process (SIGSTOP): connections hang, nothing
// expires until Resume.
func (r *Redis) Pause() error { return r.proc.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (r *Redis) Resume() error { return r.proc.signal(syscall.SIGCONT) }

// Kill ends the server with SIGKILL and waits for it to exit.
func (r *Redis) Kill() { r.proc.kill() }

// Restart kills the server and starts it again on the same port and
// directory (with its persistence settings, whatever survives survives).
func (r *Redis) Restart() error {
	r.Kill()
	return r.start()
}

// Stop kills the server; safe to call twice.
func (r *Redis) Stop() { r.Kill() }

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
