//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/placement"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// drainRecord is an http handler that records every call (B and E lines,
// naming the node by its X-Node header) with the time it began, so that
// the tests can check ownership intervals per key and measure handoffs.
type drainRecord struct {
	keyHeader string // the header naming the unit of ordering
	mu        sync.Mutex
	lines     []string
	began     []time.Time // per line
}

func (r *drainRecord) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var env struct {
		Data struct {
			Seq int `json:"seq"`
		} `json:"data"`
	}
	if err := json.NewDecoder(req.Body).Decode(&env); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	line := func(kind string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.lines = append(r.lines, fmt.Sprintf("%s %s %s %d %s %s", kind, req.Header.Get("X-Node"),
			req.Header.Get(r.keyHeader), env.Data.Seq, req.Header.Get("X-Protctl-Position"), req.Header.Get("X-Protctl-Generation")))
		r.began = append(r.began, time.Now())
	}
	line("B")
	time.Sleep(2 * time.Millisecond) // a batch takes a moment: overlaps would show
	line("E")
	w.WriteHeader(http.StatusNoContent)
}

// snapshot returns the record so far and the time of each line.
func (r *drainRecord) snapshot() (string, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) == 0 {
		return "", nil
	}
	return strings.Join(r.lines, "\n") + "\n", slices.Clone(r.began)
}

func (r *drainRecord) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lines)
}

// endsBy counts node's finished calls in lines [from, to).
func endsBy(t *testing.T, record string, node string, from int) int {
	t.Helper()
	n := 0
	for i, e := range parseEvents(t, record) {
		if i >= from && e.kind == 'E' && e.node == node {
			n++
		}
	}
	return n
}

// continuousPublisher appends to every key, round after round, until
// stopped; stop returns how many rounds were written (each key's last
// seq).
func continuousPublisher(t *testing.T, c *redis.Client, keys []string, pause time.Duration) (stop func() int) {
	t.Helper()
	pub, err := partitioned.NewPublisher(redisbroker.New(c))
	if err != nil {
		t.Fatal(err)
	}
	var quit atomic.Bool
	done := make(chan struct{})
	rounds := 0
	var pubErr error
	go func() {
		defer close(done)
		ctx := context.Background()
		for seq := 1; !quit.Load(); seq++ {
			for _, k := range keys {
				env := fmt.Sprintf(`{"data":{"key":"%s","seq":%d},"metadata":{"headers":{"id":"%s-%d","type":"OrderChanged"}}}`, k, seq, k, seq)
				if _, err := pub.Publish(ctx, procCategory, k, []byte(env)); err != nil {
					pubErr = err
					return
				}
			}
			rounds = seq
			time.Sleep(pause)
		}
	}()
	return func() int {
		quit.Store(true)
		<-done
		if pubErr != nil {
			t.Fatalf("publish: %v", pubErr)
		}
		return rounds
	}
}

// nodeStatus returns node's status record, ok=false when it is not live.
func nodeStatus(store *redisstore.Store, node string) (runtime.NodeStatus, bool) {
	members, err := store.Members(context.Background(), procService)
	if err != nil {
		return runtime.NodeStatus{}, false
	}
	for _, m := range members {
		if m.Node == node {
			return m, true
		}
	}
	return runtime.NodeStatus{}, false
}

// drainBackend is what differs between the engines in the drain
// acceptance test.
type drainBackend struct {
	// subscription is the subscription's source lines of the node config
	// (and any top-level lines, e.g. kafka:).
	top, source string
	// publish starts continuous load over keys; stop returns each key's
	// last seq.
	publish func(keys []string) (stop func() int)
	// keyHeader names the header that carries the unit of ordering.
	keyHeader string
	// leases counts the leases node holds.
	leases func(node string) int
}

// Acceptance (issue 23, drain, Redis): three `run node` processes under
// continuous load; `nodes drain node-1` moves every partition it holds to
// the others at batch boundaries, no key is ever inside two nodes'
// handlers at once, nothing is lost or reordered, node-1 holds and takes
// nothing afterwards, also after its restart, until `nodes uncordon`,
// after which it gets work again.
func TestRunNodeDrainRedis(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	runDrain(t, srv, drainBackend{
		source:    fmt.Sprintf(`redis: {categories: ["%s"]}`, procCategory),
		publish:   func(keys []string) func() int { return continuousPublisher(t, c, keys, 50*time.Millisecond) },
		keyHeader: "X-Protctl-Partition",
		leases:    func(node string) int { return len(heldLeases(t, c, node)) },
	})
}

// The same on a Kafka topic subscription (kfake): the topic's partitions
// move off node-1 with their checkpoints saved; per aggregate, order
// holds and no aggregate is in two nodes' handlers at once.
func TestRunNodeDrainKafka(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	const topic = "orders"
	k := testenv.StartKafka(t, 12, topic)
	cl := k.Client(t)
	store := redisstore.New(c)
	runDrain(t, srv, drainBackend{
		top:    fmt.Sprintf(`kafka: {brokers: ["%s"]}`, k.Brokers[0]),
		source: fmt.Sprintf(`kafka: {topic: %s}`, topic),
		publish: func(keys []string) func() int {
			var quit atomic.Bool
			done := make(chan struct{})
			rounds := 0
			go func() {
				defer close(done)
				for seq := 1; !quit.Load(); seq++ {
					var recs []*kgo.Record
					for i, key := range keys {
						v := fmt.Sprintf(`{"data":{"key":"%s","seq":%d},"metadata":{"headers":{"id":"%s-%d"}}}`, key, seq, key, seq)
						recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 12), Key: []byte(key), Value: []byte(v)})
					}
					if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
						t.Errorf("produce: %v", err)
						return
					}
					rounds = seq
					time.Sleep(50 * time.Millisecond)
				}
			}()
			return func() int { quit.Store(true); <-done; return rounds }
		},
		keyHeader: "X-Protctl-Aggregate",
		leases: func(node string) int {
			st, _ := nodeStatus(store, node)
			return len(st.Held)
		},
	})
}

// drainNodeYAML is the config of node id of the drain and move tests.
func drainNodeYAML(srv *testenv.Redis, be drainBackend, handlerURL, id string) string {
	return fmt.Sprintf(`service: %s
node: %s
redis: {url: "%s"}
%s
admin: {listen: "127.0.0.1:0"}
lease: {ttl: %s, renewEvery: %s}
drain: {timeout: 10s}
subscriptions:
  - name: %s
    %s
    retry: {attempts: 5, backoff: 20ms}
    maxInFlight: 20
    handler:
      http: {url: "%s/events", timeout: 5s, headers: {X-Node: %s}}
`, procService, id, srv.URL(), be.top, procTTL, procRenew, procGroup, be.source, handlerURL, id)
}

func runDrain(t *testing.T, srv *testenv.Redis, be drainBackend) {
	bin := buildProtctl(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	store := redisstore.New(c)
	rec := &drainRecord{keyHeader: be.keyHeader}
	hs := httptest.NewServer(rec)
	defer hs.Close()
	dir := t.TempDir()

	keys := keyNames(60)
	configs := map[string]string{}
	start := func(id string) *nodeProc {
		if configs[id] == "" {
			configs[id] = filepath.Join(dir, id+".yaml")
			writeFile(t, configs[id], drainNodeYAML(srv, be, hs.URL, id))
		}
		return startNodeProc(t, bin, id, configs[id])
	}
	procs := map[string]*nodeProc{}
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		procs[id] = start(id)
	}
	waitMembers(t, store, 3)
	stop := be.publish(keys)
	testenv.Eventually(t, 2*time.Minute, "node-1 handling", func() (bool, string) {
		text, _ := rec.snapshot()
		n := endsBy(t, text, "node-1", 0)
		return n >= 100, fmt.Sprintf("node-1 handled %d", n)
	})
	held, _ := nodeStatus(store, "node-1")

	cli := newCLI(t)
	drainAt := time.Now()
	r := cli.run("nodes", "drain", "node-1", "--service", procService, "--reason", "test", "--yes", "--redis", srv.URL(), "-o", "json")
	r.wantCode(t, 0)
	var drained int
	testenv.Eventually(t, time.Minute, "node-1 drained", func() (bool, string) {
		st, ok := nodeStatus(store, "node-1")
		leases := be.leases("node-1")
		drained = rec.len()
		return ok && st.Mode == placement.Draining && len(st.Held) == 0 && leases == 0,
			fmt.Sprintf("live %v mode %q held %d leases %d", ok, st.Mode, len(st.Held), leases)
	})
	t.Logf("node-1 drained %s after the drain command (it held %d partitions)", time.Since(drainAt).Round(time.Millisecond), len(held.Held))
	r = cli.run("nodes", "ls", "--service", procService, "-o", "json", "--redis", srv.URL())
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"mode": "drained"`) {
		t.Errorf("nodes ls does not show node-1 drained:\n%s", r.stdout)
	}

	// The others keep handling; node-1 takes nothing.
	more := func(what string, n int) {
		t.Helper()
		from := rec.len()
		testenv.Eventually(t, 2*time.Minute, what, func() (bool, string) {
			got := rec.len() - from
			return got >= 2*n, fmt.Sprintf("%d lines since", got)
		})
	}
	more("load after the drain", 600)

	// A restart keeps the mode: node-1 comes back draining and takes
	// nothing.
	procs["node-1"].signal(syscall.SIGTERM)
	if code := procs["node-1"].exitCode(30 * time.Second); code != 0 {
		t.Fatalf("node-1 exited %d on SIGTERM", code)
	}
	procs["node-1"] = start("node-1")
	testenv.Eventually(t, time.Minute, "node-1 back, draining", func() (bool, string) {
		st, ok := nodeStatus(store, "node-1")
		return ok && st.Mode == placement.Draining, fmt.Sprintf("live %v mode %q", ok, st.Mode)
	})
	more("load after node-1's restart", 600)
	text, _ := rec.snapshot()
	if n := endsBy(t, text, "node-1", drained); n != 0 {
		t.Errorf("node-1 handled %d events after it was drained (and restarted), want 0", n)
	}

	// Uncordon: it gets work again.
	uncordoned := rec.len()
	cli.run("nodes", "uncordon", "node-1", "--service", procService, "--yes", "--redis", srv.URL()).wantCode(t, 0)
	testenv.Eventually(t, 2*time.Minute, "node-1 handles again", func() (bool, string) {
		text, _ := rec.snapshot()
		n := endsBy(t, text, "node-1", uncordoned)
		return n >= 20, fmt.Sprintf("node-1 handled %d since the uncordon", n)
	})

	rounds := stop()
	testenv.Eventually(t, 3*time.Minute, "every event handled", func() (bool, string) {
		text, _ := rec.snapshot()
		done := map[string]bool{}
		for _, e := range parseEvents(t, text) {
			if e.kind == 'E' {
				done[fmt.Sprintf("%s/%d", e.key, e.seq)] = true
			}
		}
		return len(done) == len(keys)*rounds, fmt.Sprintf("%d of %d handled", len(done), len(keys)*rounds)
	})
	text, times := rec.snapshot()
	events := parseEvents(t, text)
	checkHandling(t, events, keys, rounds)
	gaps := handoffGaps(events, times, "node-1", drainAt)
	if len(gaps) == 0 {
		t.Fatalf("no key of node-1 was handed off (it held %d partitions)", len(held.Held))
	}
	worst := slices.Max(gaps)
	t.Logf("%d keys handed off; handoff gap (node-1's last call on a key to the next node's first) median %s, max %s; renewal period %s",
		len(gaps), gaps[len(gaps)/2].Round(time.Millisecond), worst.Round(time.Millisecond), procRenew)
	// A lease left to expire would keep the key for the lease TTL after
	// node-1's last renewal; a handoff at the batch boundary releases it.
	if worst >= procTTL {
		t.Errorf("a key waited %s to move, as long as a lease TTL (%s): the lease was not released", worst, procTTL)
	}
}

// handoffGaps returns, sorted, for each key node handled before at and
// another node handled after, the time from node's last call end on the
// key to the other's first call begin after it.
func handoffGaps(events []handlerEvent, times []time.Time, node string, at time.Time) []time.Duration {
	lastEnd := map[string]time.Time{}
	var gaps []time.Duration
	moved := map[string]bool{}
	for i, e := range events {
		switch {
		case e.node == node && e.kind == 'E' && times[i].Before(at.Add(5*time.Second)):
			lastEnd[e.key] = times[i]
		case e.node != node && e.kind == 'B' && !moved[e.key] && times[i].After(at):
			if le, ok := lastEnd[e.key]; ok && le.After(at.Add(-time.Second)) {
				moved[e.key] = true
				gaps = append(gaps, times[i].Sub(le))
			}
		}
	}
	slices.Sort(gaps)
	return gaps
}
