package bench

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// In BenchmarkLatencyRedis's run-node variant the plain loop runs in a
// process of its own, as the runtime does (`protctl run node`) and as a
// plain consumer a user deploys would. In the bench's process, beside
// the http server of the handler it POSTs to, its request was handed to
// the server within one process that was already awake, while the
// runtime's crossed from one idle process to another; on this machine's
// vCPUs each such wake-up costs tens of microseconds, and at 500/s hot
// keys the runtime's p50 was 0.33 ms against the plain loop's 0.11 ms
// (docs/benchmarks.md, fourteenth pass).

// latPlainProcessEnv names the environment that turns the test binary
// into the run-node variant's plain loop (TestLatencyPlainProcess).
const latPlainProcessEnv = "PROTCTL_BENCH_LATENCY_PLAIN_PROCESS"

// latStartPlainProcess starts latPlain over streams on addr in a process
// of its own, POSTing each entry to url; stop ends it (by closing its
// stdin) and waits for it.
func latStartPlainProcess(b *testing.B, addr string, streams []string, group, url string) (stop func()) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "streams")
	if err := os.WriteFile(path, []byte(strings.Join(streams, "\n")), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestLatencyPlainProcess$", "-test.count", "1")
	cmd.Env = append(os.Environ(), latPlainProcessEnv+"="+strings.Join([]string{addr, group, url, path}, ","))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return func() {
		_ = in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				b.Errorf("the plain loop's process: %v", err)
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			b.Error("the plain loop's process did not end within a minute of its stop")
		}
	}
}

// TestLatencyPlainProcess is the run-node variant's plain loop when
// latStartPlainProcess runs the test binary as it; otherwise it returns
// at once. It reads until its stdin closes.
func TestLatencyPlainProcess(t *testing.T) {
	spec := os.Getenv(latPlainProcessEnv)
	if spec == "" {
		return // a plain loop only when the benchmark starts it
	}
	f := strings.Split(spec, ",")
	if len(f) != 4 {
		t.Fatalf("%s=%q: want addr,group,url,streams file", latPlainProcessEnv, spec)
	}
	data, err := os.ReadFile(f[3])
	if err != nil {
		t.Fatal(err)
	}
	streams := strings.Split(string(data), "\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	c := redis.NewClient(&redis.Options{Addr: f[0]})
	defer c.Close()
	if err := latPlainLoop()(ctx, c, streams, f[1], latHTTPCaller(t, f[2])); err != nil {
		t.Fatal(err)
	}
}
