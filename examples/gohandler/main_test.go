//go:build unix

package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The example builds, runs as a node against a real redis-server, handles
// the events published to its category in order, and stops gracefully on
// SIGTERM.
func TestGoHandlerExampleNode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example")
	}
	bin := filepath.Join(t.TempDir(), "gohandler")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	srv := testenv.StartRedis(t)
	var out, errOut lockedBuffer
	cmd := exec.Command(bin, "-redis", srv.URL(), "-node", "example-1")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
		}
	}()

	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	pub, err := partitioned.NewPublisher(redisbroker.New(c))
	if err != nil {
		t.Fatal(err)
	}
	for _, amount := range []string{"5", "7", "9"} {
		if _, err := pub.Publish(context.Background(), "shop::order", "o-1", []byte(`{"data":{"amount":`+amount+`}}`)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, time.Minute, "the three events handled", func() (bool, string) {
		s := out.String()
		return strings.Count(s, "order o-1") >= 3, "stdout:\n" + s
	})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for i, amount := range []string{"5", "7", "9"} {
		if !strings.HasPrefix(lines[i], "order o-1: amount "+amount+" ") {
			t.Errorf("line %d: %q, want amount %s (in order)", i, lines[i], amount)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("no exit within 30s of SIGTERM")
	}
	if !strings.Contains(errOut.String(), "gohandler: stopped") {
		t.Error("no graceful stop")
	}
}
