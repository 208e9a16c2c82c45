package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// process is a server process testenv runs (redis-server or
// redis-sentinel). It dies with the test binary (Pdeathsig), so that a
// crashed test leaves no server behind.
type process struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// spawn starts bin and waits until it answers a PING through o; on
// failure it kills it and returns an error ending with the tail of its
// log file.
func (p *process) spawn(bin string, args []string, o *redis.Options, logPath string) error {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	if err := waitPing(o, done, 10*time.Second); err != nil {
		p.kill()
		log, _ := os.ReadFile(logPath)
		return fmt.Errorf("%s on %s: %w; log: %s", bin, o.Addr, err, tail(string(log), 500))
	}
	return nil
}

// waitPing waits until a PING through o answers, the process exits
// (done), or timeout passes.
func waitPing(o *redis.Options, done <-chan struct{}, timeout time.Duration) error {
	o.MaxRetries, o.DialTimeout = -1, 200*time.Millisecond
	c := redis.NewClient(o)
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-done:
			return errors.New("exited during start")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// signal sends sig to the running process.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return errors.New("testenv: the server is not running")
	}
	return p.cmd.Process.Signal(sig)
}

// alive reports whether the process was started and not killed.
func (p *process) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// kill ends the process with SIGKILL (after SIGCONT, should it be
// paused) and waits for it to exit; safe to call twice.
func (p *process) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	<-done
}
