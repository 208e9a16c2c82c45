package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The ramp's publisher runs in a process of its own. In the consumer's
// process it was one goroutine among the runtime's thousand, and Go's
// scheduler gave it a thousandth of the process's turns: at 64,000
// events/s and more it fell behind its schedule (the rate it reached was
// then taken as the consumer's "at least"), and each event's stamp, taken
// before the goroutine waited for its turn to send, counted that wait in
// the consumer's latency. The plain loop's process, with a few
// goroutines, starved it far less. In a process of its own it shares the
// machine's cores with both consumers alike, as a real publisher does.

// rampPublisherEnv names the environment that turns the test binary into
// the ramp's publisher (TestRampPublisherProcess).
const rampPublisherEnv = "PROTCTL_BENCH_RAMP_PUBLISHER"

// rampPublisher is the publisher process of one probe, as the consumer's
// process sees it.
type rampPublisher struct {
	cmd  *exec.Cmd
	sent atomic.Int64 // events written so far, as last reported
	took time.Duration
	cpu  time.Duration // the process's CPU time (user + system)
	done chan error
}

// startRampPublisher starts the publisher of keys at rate to addr.
func startRampPublisher(b *testing.B, addr, category string, keys []string, rate int) *rampPublisher {
	b.Helper()
	path := filepath.Join(b.TempDir(), "keys")
	if err := os.WriteFile(path, []byte(strings.Join(keys, "\n")), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestRampPublisherProcess$", "-test.count", "1")
	cmd.Env = append(os.Environ(), rampPublisherEnv+"="+strings.Join([]string{addr, category, strconv.Itoa(rate), path}, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &rampPublisher{cmd: cmd, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			name, v, _ := strings.Cut(sc.Text(), " ")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch name {
			case "ramp-sent":
				p.sent.Store(n)
			case "ramp-took":
				p.took = time.Duration(n)
			case "ramp-cpu":
				p.cpu = time.Duration(n)
			}
		}
		p.done <- cmd.Wait()
	}()
	return p
}

// wait waits for the publisher to have written every event.
func (p *rampPublisher) wait(b *testing.B) {
	b.Helper()
	if err := <-p.done; err != nil {
		b.Fatalf("the ramp's publisher: %v", err)
	}
	if p.took == 0 {
		b.Fatal("the ramp's publisher did not say how long it took")
	}
}

// TestRampPublisherProcess is the ramp's publisher (rampPublisherEnv:
// "addr,category,rate,keys file"); without it the test does nothing. It
// writes each line of the keys file as an event at rate, saying on
// stdout how many it has written every 20ms, then how long it took and
// its CPU time.
func TestRampPublisherProcess(t *testing.T) {
	spec := os.Getenv(rampPublisherEnv)
	if spec == "" {
		return // a publisher only when the ramp starts it
	}
	f := strings.Split(spec, ",")
	if len(f) != 4 {
		t.Fatalf("%s=%q: want addr,category,rate,keys file", rampPublisherEnv, spec)
	}
	rate, err := strconv.Atoi(f[2])
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(f[3])
	if err != nil {
		t.Fatal(err)
	}
	keys := strings.Split(string(data), "\n")
	c := redis.NewClient(&redis.Options{Addr: f[0]})
	defer c.Close()
	var sent atomic.Int64
	stop := make(chan struct{})
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				fmt.Printf("ramp-sent %d\n", sent.Load())
			}
		}
	}()
	took := rampPublish(context.Background(), t, c, f[1], keys, rate, &sent)
	close(stop)
	<-reported
	fmt.Printf("ramp-sent %d\nramp-took %d\nramp-cpu %d\n", sent.Load(), took.Nanoseconds(), rtProcessCPU().Nanoseconds())
}

const (
	// rampSenders is how many of the ramp publisher's pipelines may be in
	// flight at once. With one, a publisher that shared two cores with a
	// consumer and the server reached 72,000-96,000 events/s, short of
	// either consumer's limit (both kept up with all it wrote): the
	// consumers' limits could not be told.
	rampSenders = 4
	// rampMaxPipeline bounds one pipeline's events: what the publisher
	// says it has sent counts a pipeline once answered, so the halfway
	// backlog can be short by up to rampSenders x rampMaxPipeline events
	// (2,000, under 5% of a second at the rates where it matters).
	rampMaxPipeline = 500
)

// rampPublish writes keys at rate as latPublish does, with up to
// rampSenders pipelines in flight, each on its own connection: what is
// due is cut into pipelines of at most rampMaxPipeline events, each
// stamped when its sender takes it, and sent counts the events of the
// pipelines answered. Two events of one key may be appended out of their
// order; the ramp measures latency, not order.
func rampPublish(ctx context.Context, tb testing.TB, c *redis.Client, category string, keys []string, rate int, sent *atomic.Int64) time.Duration {
	tb.Helper()
	type chunk struct{ from, to int }
	work := make(chan chunk, rampSenders)
	var wg sync.WaitGroup
	for range rampSenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ch := range work {
				pipe := c.Pipeline()
				latAppend(ctx, pipe, category, keys, 0, ch.from, ch.to, time.Now().UnixNano())
				if _, err := pipe.Exec(ctx); err != nil {
					tb.Error(err)
				}
				sent.Add(int64(ch.to - ch.from))
			}
		}()
	}
	start := time.Now()
	latSchedule(len(keys), rate, rampMaxPipeline, func(from, to int) { work <- chunk{from, to} })
	close(work)
	wg.Wait()
	return time.Since(start)
}
