package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelInstallHint is the error when neither redis-sentinel nor a
// redis-server that can run as a Sentinel is on PATH.
const SentinelInstallHint = "redis-sentinel not found on PATH: install it with `sudo apt-get install -y redis-sentinel` (or run scripts/test, which does)"

// SentinelMasterName is the name the Sentinels of StartSentinel monitor
// the primary under.
const SentinelMasterName = "protctl-primary"

// Sentinel timing: short, so that a failover takes about 1 to 3 seconds
// (down-after 500 ms to notice, then an election and the promotion), yet
// long enough that a loaded test machine is not taken for a dead primary.
const (
	sentinelDownAfter       = 500 * time.Millisecond
	sentinelFailoverTimeout = 3 * time.Second
	// sentinelReadyTimeout bounds the start (the Sentinels must know the
	// replica and each other before a failover can happen) and each wait
	// for a new primary.
	sentinelReadyTimeout = 60 * time.Second
)

// Sentinel is a primary, one replica (or more: WithSentinelReplicas) and
// three redis-sentinel processes
// monitoring them, each on its own free loopback port, started by
// StartSentinel. Kill, Pause and Resume the servers through Servers (or
// Master()); Promote forces a failover.
type Sentinel struct {
	// MasterName is the name the Sentinels monitor the primary under.
	MasterName string
	// Servers are the primary as started (0) and its replicas (1, ...);
	// which one is the primary now is Master's to say.
	Servers []*Redis
	// Sentinels are the three Sentinel processes.
	Sentinels []*SentinelProcess
	// Password is the servers' requirepass, SentinelPassword the
	// Sentinels' ("" for none: see WithSentinelPasswords).
	Password, SentinelPassword string
	// TLS holds the certificates when the servers and the Sentinels speak
	// only TLS (WithSentinelTLS); nil otherwise.
	TLS *PKI

	replicas int
}

// SentinelOption configures StartSentinel.
type SentinelOption func(*Sentinel)

// WithSentinelTLS makes the primary, the replica and the Sentinels listen
// only on TLS, with one test CA (Sentinel.TLS) whose server certificate
// names 127.0.0.1; replication and the Sentinels' own connections use TLS
// too, with the client certificate. Clients need not present one.
func WithSentinelTLS() SentinelOption {
	return func(s *Sentinel) { s.TLS = &PKI{} }
}

// WithSentinelReplicas starts n replicas (at least 1) instead of one: with
// two, a primary that dies leaves the promoted one a replica, so writes
// that WAIT for one replica go on after a failover.
func WithSentinelReplicas(n int) SentinelOption {
	return func(s *Sentinel) { s.replicas = max(n, 1) }
}

// WithSentinelPasswords requires a password of the clients: primary of
// the primary and the replica (requirepass, masterauth, and the
// Sentinels' auth-pass), sentinel of the Sentinels (requirepass, which
// they also use with each other). Either may be "".
func WithSentinelPasswords(primary, sentinel string) SentinelOption {
	return func(s *Sentinel) { s.Password, s.SentinelPassword = primary, sentinel }
}

// SentinelProcess is one redis-sentinel.
type SentinelProcess struct {
	Addr string
	Port int

	dir      string
	password string
	pki      *PKI
	proc     process
}

// StartSentinel starts a primary, a replica and three Sentinels (quorum
// 2) for t, waits until the Sentinels know the replica and each other
// (so that a failover can happen), and stops everything at cleanup. It
// fails the test with the install command when redis-sentinel is
// missing.
func StartSentinel(t testing.TB, opts ...SentinelOption) *Sentinel {
	t.Helper()
	bin, args, err := sentinelCommand()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	s := &Sentinel{MasterName: SentinelMasterName, replicas: 1}
	for _, o := range opts {
		o(s)
	}
	// Fast full syncs.
	repl := []string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
	common := []RedisOption{WithPassword(s.Password)}
	if s.TLS != nil {
		pki, err := GeneratePKI(filepath.Join(t.TempDir(), "tls"))
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		s.TLS = pki
		repl = append(repl, "--tls-replication", "yes", "--tls-client-cert-file", pki.ClientCert, "--tls-client-key-file", pki.ClientKey)
		common = append(common, WithTLS(), func(c *redisConfig) { c.pki = pki })
	}
	s.Servers = []*Redis{StartRedis(t, append(common, WithArgs(repl...))...)}
	for i := 0; i < s.replicas; i++ {
		s.Servers = append(s.Servers, StartRedis(t, append(common, WithArgs(append(repl, "--replicaof", "127.0.0.1", strconv.Itoa(s.Servers[0].Port))...))...))
	}
	for i := 0; i < 3; i++ {
		p, err := s.startSentinelProcess(t.TempDir(), bin, args)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		t.Cleanup(p.Kill)
		s.Sentinels = append(s.Sentinels, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sentinelReadyTimeout)
	defer cancel()
	if err := s.waitReady(ctx, s.Servers[0], s.Servers[1:]); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return s
}

// sentinelCommand is redis-sentinel, or redis-server --sentinel where
// only the server is installed (the same binary).
func sentinelCommand() (string, []string, error) {
	if p, err := exec.LookPath("redis-sentinel"); err == nil {
		return p, nil, nil
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, []string{"--sentinel"}, nil
	}
	return "", nil, errors.New(SentinelInstallHint)
}

func (s *Sentinel) startSentinelProcess(dir, bin string, extra []string) (*SentinelProcess, error) {
	primaryPort := s.Servers[0].Port
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		p := &SentinelProcess{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: dir, password: s.SentinelPassword, pki: s.TLS}
		listen := []string{"port " + strconv.Itoa(port)}
		if s.TLS != nil {
			listen = []string{
				"port 0",
				"tls-port " + strconv.Itoa(port),
				"tls-cert-file " + s.TLS.ServerCert,
				"tls-key-file " + s.TLS.ServerKey,
				"tls-ca-cert-file " + s.TLS.CA,
				"tls-client-cert-file " + s.TLS.ClientCert,
				"tls-client-key-file " + s.TLS.ClientKey,
				"tls-auth-clients optional",
				"tls-replication yes", // TLS to the servers and the other Sentinels
			}
		}
		// Sentinel rewrites its config file, so it gets one of its own.
		lines := []string{
			"bind 127.0.0.1",
			"protected-mode no",
			"daemonize no",
			"dir " + dir,
			"logfile " + filepath.Join(dir, "sentinel.log"),
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", SentinelMasterName, primaryPort),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", SentinelMasterName, sentinelDownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", SentinelMasterName, sentinelFailoverTimeout.Milliseconds()),
			fmt.Sprintf("sentinel parallel-syncs %s 1", SentinelMasterName),
		}
		lines = append(listen, lines...)
		if s.Password != "" {
			lines = append(lines, fmt.Sprintf("sentinel auth-pass %s %s", SentinelMasterName, s.Password))
		}
		if s.SentinelPassword != "" {
			lines = append(lines, "requirepass "+s.SentinelPassword)
		}
		conf := strings.Join(lines, "\n") + "\n"
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		o := &redis.Options{Addr: p.Addr, Password: p.password, TLSConfig: p.tlsConfig()}
		if lastErr = p.proc.spawn(bin, append([]string{path}, extra...), o, filepath.Join(dir, "sentinel.log")); lastErr == nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("start redis-sentinel: %w", lastErr)
}

// Kill ends the Sentinel with SIGKILL; safe to call twice.
func (p *SentinelProcess) Kill() { p.proc.kill() }

// Addrs are the Sentinels' addresses.
func (s *Sentinel) Addrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, p := range s.Sentinels {
		out[i] = p.Addr
	}
	return out
}

// URL is the redis+sentinel:// URL of the primary, database 0
// (rediss+sentinel:// WithSentinelTLS).
func (s *Sentinel) URL() string {
	scheme := "redis+sentinel://"
	if s.TLS != nil {
		scheme = "rediss+sentinel://"
	}
	return scheme + strings.Join(s.Addrs(), ",") + "/" + s.MasterName + "/0"
}

func (p *SentinelProcess) tlsConfig() *tls.Config {
	if p.pki == nil {
		return nil
	}
	return p.pki.ClientTLS()
}

// FailoverClient returns a go-redis failover client on the primary,
// closed at t's cleanup.
func (s *Sentinel) FailoverClient(t testing.TB) *redis.Client {
	t.Helper()
	o := &redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.Addrs(), Password: s.Password, SentinelPassword: s.SentinelPassword}
	if s.TLS != nil {
		o.TLSConfig = s.TLS.ClientTLS()
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sentinelClient runs f on a client of Sentinel p.
func sentinelClient(p *SentinelProcess, f func(*redis.SentinelClient) error) error {
	c := redis.NewSentinelClient(&redis.Options{Addr: p.Addr, Password: p.password, TLSConfig: p.tlsConfig(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	return f(c)
}

// MasterAddr is the primary's address as the first Sentinel that answers
// says.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var last error
	for _, p := range s.Sentinels {
		var addr []string
		err := sentinelClient(p, func(c *redis.SentinelClient) error {
			var err error
			addr, err = c.GetMasterAddrByName(ctx, s.MasterName).Result()
			return err
		})
		if err == nil && len(addr) == 2 {
			return net.JoinHostPort(addr[0], addr[1]), nil
		}
		last = err
	}
	return "", fmt.Errorf("testenv: no Sentinel names the primary: %v", last)
}

// Master is the server that is the primary now, as the Sentinels say.
func (s *Sentinel) Master(ctx context.Context) (*Redis, error) {
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		return nil, err
	}
	return s.server(addr)
}

func (s *Sentinel) server(addr string) (*Redis, error) {
	for _, r := range s.Servers {
		if r.Addr == addr {
			return r, nil
		}
	}
	return nil, fmt.Errorf("testenv: the Sentinels name %s, none of the servers", addr)
}

// Promote forces a failover (SENTINEL FAILOVER, which needs no agreement
// that the primary is down) and waits until the replica is the primary:
// every live Sentinel names it and it reports role:master. It returns
// the new primary.
func (s *Sentinel) Promote(ctx context.Context) (*Redis, error) {
	old, err := s.Master(ctx)
	if err != nil {
		return nil, err
	}
	var last error
	for _, p := range s.Sentinels {
		if last = sentinelClient(p, func(c *redis.SentinelClient) error { return c.Failover(ctx, s.MasterName).Err() }); last == nil {
			return s.WaitNewMaster(ctx, old.Addr)
		}
	}
	return nil, fmt.Errorf("testenv: SENTINEL FAILOVER: %w", last)
}

// WaitNewMaster waits until the Sentinels have promoted a server other
// than oldAddr (after Kill or Pause of the primary, or Promote): every
// Sentinel that answers names it, and it reports role:master. It returns
// the new primary.
func (s *Sentinel) WaitNewMaster(ctx context.Context, oldAddr string) (*Redis, error) {
	ctx, cancel := context.WithTimeout(ctx, sentinelReadyTimeout)
	defer cancel()
	var last string
	for {
		addr, ok, why := s.agreedMaster(ctx)
		switch {
		case !ok:
			last = why
		case addr == oldAddr:
			last = "the Sentinels still name " + oldAddr
		default:
			r, err := s.server(addr)
			if err != nil {
				return nil, err
			}
			if role, err := serverRole(ctx, r); err != nil || role != "master" {
				last = fmt.Sprintf("%s is named but reports role %q (%v)", addr, role, err)
				break
			}
			return r, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testenv: no new primary: %s: %w", last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// agreedMaster is the primary every live Sentinel names; ok is false
// while they disagree.
func (s *Sentinel) agreedMaster(ctx context.Context) (addr string, ok bool, why string) {
	for _, p := range s.Sentinels {
		if !p.proc.alive() {
			continue
		}
		var got []string
		err := sentinelClient(p, func(c *redis.SentinelClient) error {
			var err error
			got, err = c.GetMasterAddrByName(ctx, s.MasterName).Result()
			return err
		})
		if err != nil || len(got) != 2 {
			return "", false, fmt.Sprintf("Sentinel %s: %v", p.Addr, err)
		}
		a := net.JoinHostPort(got[0], got[1])
		if addr != "" && a != addr {
			return "", false, fmt.Sprintf("Sentinels disagree: %s and %s", addr, a)
		}
		addr = a
	}
	return addr, addr != "", "no Sentinel is alive"
}

func serverRole(ctx context.Context, r *Redis) (string, error) {
	c := redis.NewClient(r.Options())
	defer c.Close()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := c.Do(short, "role").Slice()
	if err != nil || len(v) == 0 {
		return "", err
	}
	role, _ := v[0].(string)
	return role, nil
}

// waitReady waits until the replicas are in sync with the primary and
// every Sentinel knows the replicas and the two other Sentinels: before
// that, a failover cannot happen.
func (s *Sentinel) waitReady(ctx context.Context, primary *Redis, replicas []*Redis) error {
	var last string
	for {
		ok := true
		for _, r := range replicas {
			if err := replicaSynced(ctx, r); err != nil {
				ok, last = false, err.Error()
			}
		}
		for _, p := range s.Sentinels {
			if !ok {
				break
			}
			err := sentinelClient(p, func(c *redis.SentinelClient) error {
				replicas, err := c.Replicas(ctx, s.MasterName).Result()
				if err != nil {
					return err
				}
				if len(replicas) != s.replicas {
					return fmt.Errorf("knows replicas %v", replicas)
				}
				for _, r := range replicas {
					if strings.Contains(r["flags"], "disconnected") || strings.Contains(r["flags"], "s_down") {
						return fmt.Errorf("knows replicas %v", replicas)
					}
				}
				others, err := c.Sentinels(ctx, s.MasterName).Result()
				if err != nil {
					return err
				}
				if len(others) != len(s.Sentinels)-1 {
					return fmt.Errorf("knows %d other Sentinels", len(others))
				}
				return nil
			})
			if err != nil {
				ok, last = false, fmt.Sprintf("Sentinel %s: %v", p.Addr, err)
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("Sentinel setup of primary %s not ready: %s: %w", primary.Addr, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// replicaSynced is nil once r is a replica whose link to its primary is
// up.
func replicaSynced(ctx context.Context, r *Redis) error {
	c := redis.NewClient(r.Options())
	defer c.Close()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := c.Info(short, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("replica %s not in sync yet", r.Addr)
	}
	return nil
}
