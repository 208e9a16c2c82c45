//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// These tests run `protctl run node` as separate OS processes (the binary
// is built without -race, whatever the test run uses) against a real
// redis-server, and check from outside what the nodes did.

const (
	procService  = "shop"
	procCategory = "shop::order"
	procGroup    = "projector"
	// Short leases keep the fault tests fast: a dead node's partitions
	// move within ttl + renew.
	procTTL   = 2 * time.Second
	procRenew = 400 * time.Millisecond
)

// nodeProc is one `protctl run node` process.
type nodeProc struct {
	t    *testing.T
	id   string
	cmd  *exec.Cmd
	logs *procOutput
	done chan struct{}
	err  error // of Wait, once done is closed
}

type procOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *procOutput) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *procOutput) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startNodeProc(t *testing.T, bin, id, config string, extraEnv ...string) *nodeProc {
	t.Helper()
	p := &nodeProc{t: t, id: id, logs: &procOutput{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "run", "node", "--config", config, "--log-level", "debug")
	p.cmd.Env = append(os.Environ(), extraEnv...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	// The node dies with the test; SIGSTOP and SIGKILL go to the node
	// only, not to the handlers it runs (they have groups of their own).
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			logs := p.logs.String()
			if len(logs) > 6000 {
				logs = "..." + logs[len(logs)-6000:]
			}
			t.Logf("%s (pid %d) output:\n%s", id, p.cmd.Process.Pid, logs)
		}
	})
	return p
}

func (p *nodeProc) pid() int { return p.cmd.Process.Pid }

func (p *nodeProc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %s to %s: %v", sig, p.id, err)
	}
}

// exitCode waits for the process to end within d and returns its exit
// code (-1 when killed by a signal).
func (p *nodeProc) exitCode(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("%s did not exit within %s", p.id, d)
	}
	return p.cmd.ProcessState.ExitCode()
}

// nodeYAML is a node config of the fault tests.
func nodeYAML(redisURL, id, handler string, drain time.Duration) string {
	return fmt.Sprintf(`service: %s
node: %s
redis: {url: "%s"}
admin: {listen: "127.0.0.1:0"}
lease: {ttl: %s, renewEvery: %s}
drain: {timeout: %s}
subscriptions:
  - name: %s
    redis: {categories: ["%s"]}
    retry: {attempts: 5, backoff: 20ms}
    maxInFlight: 20
    handler:
%s`, procService, id, redisURL, procTTL, procRenew, drain, procGroup, procCategory, handler)
}

func waitMembers(t *testing.T, store *redisstore.Store, n int) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%d live nodes", n), func() (bool, string) {
		m, err := store.Members(context.Background(), procService)
		ids := make([]string, len(m))
		for i, s := range m {
			ids[i] = s.Node
		}
		return err == nil && len(m) == n, fmt.Sprintf("members %v, err %v", ids, err)
	})
}

// handlerEvent is one line of the handlers' shared record: a handler call
// began (B) or ended (E), or the test killed a node (K: its open calls
// ended with it), stopped it (S) or let it continue (C). The record's order is the order things happened in:
// each line is one atomic append (O_APPEND, a single short write) made
// by the handler itself, before and after its work.
type handlerEvent struct {
	kind     byte
	node     string // pid (exec) or node id (http)
	key      string
	seq      int
	position string
	gen      int64
}

func parseEvents(t *testing.T, text string) []handlerEvent {
	t.Helper()
	var out []handlerEvent
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && (f[0] == "K" || f[0] == "S" || f[0] == "C") {
			out = append(out, handlerEvent{kind: f[0][0], node: f[1]})
			continue
		}
		if len(f) != 6 || (f[0] != "B" && f[0] != "E") {
			t.Fatalf("bad record line %q", sc.Text())
		}
		seq, err1 := strconv.Atoi(f[3])
		gen, err2 := strconv.ParseInt(f[5], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad record line %q", sc.Text())
		}
		out = append(out, handlerEvent{kind: f[0][0], node: f[1], key: f[2], seq: seq, position: f[4], gen: gen})
	}
	return out
}

// checkHandling checks the record against the acceptance criteria: every
// event handled at least once, per-key order (each key's calls begin in
// sequence order, replays going back but never skipping ahead), no two
// nodes inside the handler for one key at once, and no call under a
// generation older than one already seen for the key (a stale owner).
func checkHandling(t *testing.T, events []handlerEvent, keys []string, perKey int) {
	t.Helper()
	inside := map[string]map[string]int{} // key -> node -> open calls
	killed := map[string]bool{}
	lastSeq := map[string]int{}
	maxGen := map[string]int64{}
	done := map[string]map[int]bool{}
	errs := 0
	fail := func(format string, a ...any) {
		t.Helper()
		if errs < 20 {
			t.Errorf(format, a...)
		}
		errs++
	}
	for i, e := range events {
		switch e.kind {
		case 'K':
			killed[e.node] = true
			for _, nodes := range inside {
				delete(nodes, e.node)
			}
		case 'B':
			if inside[e.key] == nil {
				inside[e.key] = map[string]int{}
			}
			for other, n := range inside[e.key] {
				if other != e.node && n > 0 {
					fail("line %d: %s began key %s seq %d while %s was inside the handler for it", i+1, e.node, e.key, e.seq, other)
				}
			}
			inside[e.key][e.node]++
			if prev, seen := lastSeq[e.key]; (!seen && e.seq != 1) || (seen && e.seq > prev+1) {
				fail("line %d: key %s: seq %d began after seq %d (order broken)", i+1, e.key, e.seq, prev)
			}
			lastSeq[e.key] = e.seq
			if e.gen < maxGen[e.key] {
				fail("line %d: key %s: %s handled seq %d under generation %d after generation %d had handled it (a stale owner)", i+1, e.key, e.node, e.seq, e.gen, maxGen[e.key])
			}
			maxGen[e.key] = max(maxGen[e.key], e.gen)
		case 'E':
			switch {
			case inside[e.key][e.node] > 0:
				inside[e.key][e.node]--
			case killed[e.node]:
				// A call of a killed node whose end landed after the
				// kill was recorded: it had ended by then.
			default:
				fail("line %d: %s ended key %s seq %d without beginning it", i+1, e.node, e.key, e.seq)
				continue
			}
			if done[e.key] == nil {
				done[e.key] = map[int]bool{}
			}
			done[e.key][e.seq] = true
		}
	}
	missing := 0
	for _, k := range keys {
		for s := 1; s <= perKey; s++ {
			if !done[k][s] {
				missing++
				if missing <= 5 {
					fail("key %s seq %d never handled", k, s)
				}
			}
		}
	}
	if missing > 5 {
		t.Errorf("... %d events never handled in all", missing)
	}
}

// takenOver counts the keys node had begun before its from marker that
// another node began after that marker (and before the until marker, when
// until is not 0).
func takenOver(events []handlerEvent, node string, from, until byte) int {
	before := map[string]bool{}
	moved := map[string]bool{}
	phase := 0
	for _, e := range events {
		switch {
		case e.node == node && e.kind == from:
			phase = 1
		case e.node == node && until != 0 && e.kind == until:
			phase = 2
		case e.kind == 'B' && phase == 0 && e.node == node:
			before[e.key] = true
		case e.kind == 'B' && phase == 1 && e.node != node && before[e.key]:
			moved[e.key] = true
		}
	}
	return len(moved)
}

// countEnds counts E lines (finished handler calls, replays included).
func countEnds(text string) int {
	return strings.Count(text, "\nE ") + boolInt(strings.HasPrefix(text, "E "))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// publisher writes perKey events to every key, round by round (seq 1 to
// every key, then seq 2, ...), pausing between rounds so that the run
// lasts long enough for the faults to land mid-run.
func publishEvents(t *testing.T, c *redis.Client, keys []string, perKey int, pause time.Duration) (done <-chan error) {
	t.Helper()
	pub, err := partitioned.NewPublisher(redisbroker.New(c))
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() {
		ctx := context.Background()
		for seq := 1; seq <= perKey; seq++ {
			for _, k := range keys {
				env := fmt.Sprintf(`{"data":{"key":"%s","seq":%d},"metadata":{"headers":{"id":"%s-%d","type":"OrderChanged"}}}`, k, seq, k, seq)
				if _, err := pub.Publish(ctx, procCategory, k, []byte(env)); err != nil {
					ch <- err
					return
				}
			}
			time.Sleep(pause)
		}
		ch <- nil
	}()
	return ch
}

func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("o-%03d", i)
	}
	return keys
}

// failoverRun is the acceptance scenario with one kind of handler: three
// node processes, 10,000 events over 200 keys, one node SIGKILLed and
// another SIGSTOPped for longer than the lease TTL mid-run.
type failoverRun struct {
	handlerYAML func(id string) string
	// record returns the record so far (B/E/K lines in order).
	record func() string
	// mark appends a marker line to the record.
	mark func(line string)
	// name is how the record names a node.
	name func(p *nodeProc) string
}

func runFailover(t *testing.T, f failoverRun) {
	bin := buildProtctl(t)
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	store := redisstore.New(c)
	dir := t.TempDir()

	const nKeys, perKey = 200, 50 // 10,000 events
	keys := keyNames(nKeys)
	procs := make([]*nodeProc, 3)
	for i := range procs {
		id := fmt.Sprintf("node-%d", i+1)
		cfg := filepath.Join(dir, id+".yaml")
		writeFile(t, cfg, nodeYAML(srv.URL(), id, f.handlerYAML(id), 10*time.Second))
		procs[i] = startNodeProc(t, bin, id, cfg)
	}
	waitMembers(t, store, 3)
	start := time.Now()
	pubDone := publishEvents(t, c, keys, perKey, 100*time.Millisecond)

	// SIGKILL node-2 once a quarter of the events were handled.
	testenv.Eventually(t, 4*time.Minute, "2,500 handled", func() (bool, string) {
		n := countEnds(f.record())
		return n >= 2500, fmt.Sprintf("%d handled", n)
	})
	victim := procs[1]
	victim.signal(syscall.SIGKILL)
	<-victim.done
	f.mark("K " + f.name(victim))
	t.Logf("%s SIGKILLed after %s", victim.id, time.Since(start).Round(time.Millisecond))

	// SIGSTOP node-3 for longer than the lease TTL once half were handled.
	testenv.Eventually(t, 4*time.Minute, "5,000 handled", func() (bool, string) {
		n := countEnds(f.record())
		return n >= 5000, fmt.Sprintf("%d handled", n)
	})
	paused := procs[2]
	paused.signal(syscall.SIGSTOP)
	f.mark("S " + f.name(paused))
	stopFor := procTTL + 2*procRenew + time.Second
	t.Logf("%s SIGSTOPped for %s after %s", paused.id, stopFor, time.Since(start).Round(time.Millisecond))
	time.Sleep(stopFor)
	// Stopped for longer than the lease TTL: none of its leases is left.
	if leases := heldLeases(t, c, paused.id); len(leases) != 0 {
		t.Errorf("%s still holds %d leases after %s stopped (lease TTL %s)", paused.id, len(leases), stopFor, procTTL)
	}
	f.mark("C " + f.name(paused))
	paused.signal(syscall.SIGCONT)

	if err := <-pubDone; err != nil {
		t.Fatalf("publish: %v", err)
	}
	testenv.Eventually(t, 5*time.Minute, "every event handled", func() (bool, string) {
		done := map[string]bool{}
		for _, e := range parseEvents(t, f.record()) {
			if e.kind == 'E' {
				done[e.key+"/"+strconv.Itoa(e.seq)] = true
			}
		}
		return len(done) == nKeys*perKey, fmt.Sprintf("%d of %d handled", len(done), nKeys*perKey)
	})
	t.Logf("all %d events handled after %s", nKeys*perKey, time.Since(start).Round(time.Millisecond))

	record := f.record()
	events := parseEvents(t, record)
	checkHandling(t, events, keys, perKey)
	handledBy := map[string]int{}
	for _, e := range events {
		if e.kind == 'E' {
			handledBy[e.node]++
		}
	}
	t.Logf("handler calls by node: %v (%d calls for %d events)", handledBy, countEnds(record), nKeys*perKey)
	// The faults did move partitions: keys the victims were handling
	// before were handled by the others while the victims were gone.
	if n := takenOver(events, f.name(victim), 'K', 0); n == 0 {
		t.Errorf("no key of the SIGKILLed %s was taken over", victim.id)
	} else {
		t.Logf("%d keys of the SIGKILLed %s taken over", n, victim.id)
	}
	// Whether the others began its keys while it was stopped depends on
	// how busy they were (their workers may all be on their own keys);
	// what must hold is checked above (its leases expired) and by
	// checkHandling (it never handled under a superseded generation).
	t.Logf("%d keys of the SIGSTOPped %s begun by the others while it was stopped", takenOver(events, f.name(paused), 'S', 'C'), paused.id)
	for _, p := range []*nodeProc{procs[0], paused} {
		if handledBy[f.name(p)] == 0 {
			t.Errorf("%s handled nothing", p.id)
		}
	}

	// The survivors drain on SIGTERM and exit 0, leaving no lease.
	for _, p := range []*nodeProc{procs[0], paused} {
		p.signal(syscall.SIGTERM)
	}
	for _, p := range []*nodeProc{procs[0], paused} {
		if code := p.exitCode(20 * time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", p.id, code)
		}
	}
	if leases := heldLeases(t, c, ""); len(leases) != 0 {
		t.Errorf("leases held after every node stopped: %v", leases)
	}
}

// heldLeases returns the group's leases (key -> owner:generation) whose
// owner starts with owner ("" for all).
func heldLeases(t *testing.T, c *redis.Client, owner string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	iter := c.Scan(ctx, 0, procGroup+":*:__lease__", 1000).Iterator()
	for iter.Next(ctx) {
		v, err := c.Get(ctx, iter.Val()).Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if owner == "" || strings.HasPrefix(v, owner+":") {
			out[iter.Val()] = v
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// recordScript is the exec handler of the fault tests: it reads the
// envelope from stdin, takes the sequence number out of it with shell
// builtins only (no fork: the 10,000 calls stay cheap), and appends a
// begin and an end line to $RECORD, naming its node by pid ($PPID: the
// node runs the script directly).
const recordScript = `#!/bin/sh
read -r envelope || true
seq=${envelope#*\"seq\":}
seq=${seq%%[!0-9]*}
echo "B $PPID $PROTCTL_PARTITION $seq $PROTCTL_POSITION $PROTCTL_GENERATION" >> "$RECORD"
if [ -n "$HOLD" ]; then sleep "$HOLD"; fi
echo "E $PPID $PROTCTL_PARTITION $seq $PROTCTL_POSITION $PROTCTL_GENERATION" >> "$RECORD"
`

func writeRecordScript(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "record.sh")
	if err := os.WriteFile(p, []byte(recordScript), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func execHandlerYAML(script, record, hold string) string {
	env := fmt.Sprintf(`{RECORD: "%s"}`, record)
	if hold != "" {
		env = fmt.Sprintf(`{RECORD: "%s", HOLD: "%s"}`, record, hold)
	}
	return fmt.Sprintf("      exec:\n        command: [\"%s\"]\n        timeout: 30s\n        env: %s\n", script, env)
}

func appendLine(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// Acceptance: three `protctl run node` processes with an exec handler
// share 10,000 events over 200 keys on a real redis-server; one is
// SIGKILLed and another SIGSTOPped for longer than the lease TTL mid-run.
// Every event is handled, per-key order holds, and no key is ever inside
// two nodes' handlers at once.
func TestRunNodeFailoverExec(t *testing.T) {
	dir := t.TempDir()
	script := writeRecordScript(t, dir)
	record := filepath.Join(dir, "record.txt")
	runFailover(t, failoverRun{
		handlerYAML: func(string) string { return execHandlerYAML(script, record, "") },
		record:      func() string { return readFile(t, record) },
		// A SIGKILLed node's running handler dies with it (its parent
		// death signal): its open calls end at the K marker.
		mark: func(line string) { appendLine(t, record, line) },
		name: func(p *nodeProc) string { return strconv.Itoa(p.pid()) },
	})
}

// The same with an http handler: the nodes POST to a server in the test
// process, which records the calls (naming each node by a header its
// config adds).
func TestRunNodeFailoverHTTP(t *testing.T) {
	var (
		mu     sync.Mutex
		record strings.Builder
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env struct {
			Data struct {
				Seq int `json:"seq"`
			} `json:"data"`
		}
		if err := json.NewDecoder(r.Body).Decode(&env); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		line := func(kind string) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(&record, "%s %s %s %d %s %s\n", kind, r.Header.Get("X-Node"), r.Header.Get("X-Protctl-Partition"),
				env.Data.Seq, r.Header.Get("X-Protctl-Position"), r.Header.Get("X-Protctl-Generation"))
		}
		line("B")
		line("E")
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	runFailover(t, failoverRun{
		handlerYAML: func(id string) string {
			return fmt.Sprintf("      http:\n        url: \"%s/events\"\n        timeout: 5s\n        headers: {X-Node: %s}\n", srv.URL, id)
		},
		record: func() string {
			mu.Lock()
			defer mu.Unlock()
			return record.String()
		},
		mark: func(l string) {
			mu.Lock()
			defer mu.Unlock()
			record.WriteString(l + "\n")
		},
		name: func(p *nodeProc) string { return p.id },
	})
}

// nodeRecord reads the record and returns the node's B and E events.
func startedAndEnded(events []handlerEvent, node string) (started, ended map[string]bool) {
	started, ended = map[string]bool{}, map[string]bool{}
	for _, e := range events {
		if e.node != node {
			continue
		}
		switch e.kind {
		case 'B':
			started[e.key+" "+e.position] = true
		case 'E':
			ended[e.key+" "+e.position] = true
		}
	}
	return started, ended
}

// pendingOf returns the group's pending entries ("key id") on keys'
// streams whose consumer (the fence token owner:generation) is owner's.
func pendingOf(t *testing.T, c *redis.Client, keys []string, owner string) map[string]bool {
	t.Helper()
	ctx := context.Background()
	out := map[string]bool{}
	for _, k := range keys {
		stream := procCategory + ":" + k
		pend, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: procGroup, Start: "-", End: "+", Count: 1000}).Result()
		if err != nil {
			if strings.Contains(err.Error(), "NOGROUP") {
				continue
			}
			t.Fatal(err)
		}
		for _, p := range pend {
			if strings.HasPrefix(p.Consumer, owner+":") {
				out[k+" "+p.ID] = true
			}
		}
	}
	return out
}

// SIGTERM drains a node: the messages it had started finish and are
// acknowledged, it holds no lease afterwards, it leaves the membership,
// and it exits 0. What it had read but not started stays pending for the
// next owner, which handles it. A second signal exits at once (130), and
// a drain that overruns drain.timeout cancels the handlers and exits 130.
func TestRunNodeSignals(t *testing.T) {
	bin := buildProtctl(t)
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	store := redisstore.New(c)
	ctx := context.Background()

	t.Run("SIGTERM drains", func(t *testing.T) {
		srv.FlushAll(t)
		dir := t.TempDir()
		script := writeRecordScript(t, dir)
		record := filepath.Join(dir, "record.txt")
		keys := keyNames(20)
		if err := <-publishEvents(t, c, keys, 5, 0); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(dir, "node-1.yaml")
		writeFile(t, cfg, nodeYAML(srv.URL(), "node-1", execHandlerYAML(script, record, "0.3"), 20*time.Second))
		p := startNodeProc(t, bin, "node-1", cfg)
		name := strconv.Itoa(p.pid())
		// Wait until handlers are running (begun, not ended).
		testenv.Eventually(t, 2*time.Minute, "handlers in flight", func() (bool, string) {
			started, ended := startedAndEnded(parseEvents(t, readFile(t, record)), name)
			return len(started) >= 5 && len(started) > len(ended), fmt.Sprintf("%d started, %d ended", len(started), len(ended))
		})
		p.signal(syscall.SIGTERM)
		if code := p.exitCode(30 * time.Second); code != 0 {
			t.Fatalf("exit %d after SIGTERM, want 0", code)
		}
		if !strings.Contains(p.logs.String(), "drained: leases released, membership left") {
			t.Errorf("no drain in the log")
		}

		events := parseEvents(t, readFile(t, record))
		started, ended := startedAndEnded(events, name)
		for m := range started {
			if !ended[m] {
				t.Errorf("started %s but did not finish it", m)
			}
		}
		if leases := heldLeases(t, c, "node-1"); len(leases) != 0 {
			t.Errorf("leases still held by node-1 after SIGTERM: %v", leases)
		}
		pending := pendingOf(t, c, keys, "node-1")
		for m := range pending {
			if started[m] {
				t.Errorf("%s was handled but left unacknowledged", m)
			}
		}
		if m, err := store.Members(ctx, procService); err != nil || len(m) != 0 {
			t.Errorf("members after the drain: %v %v", m, err)
		}
		t.Logf("node-1 handled %d messages; %d read but not started stay pending", len(started), len(pending))

		// The next owner handles everything that is left, in order.
		cfg2 := filepath.Join(dir, "node-2.yaml")
		writeFile(t, cfg2, nodeYAML(srv.URL(), "node-2", execHandlerYAML(script, record, ""), 20*time.Second))
		p2 := startNodeProc(t, bin, "node-2", cfg2)
		testenv.Eventually(t, 2*time.Minute, "every event handled", func() (bool, string) {
			done := map[string]bool{}
			for _, e := range parseEvents(t, readFile(t, record)) {
				if e.kind == 'E' {
					done[e.key+"/"+strconv.Itoa(e.seq)] = true
				}
			}
			return len(done) == len(keys)*5, fmt.Sprintf("%d of %d handled", len(done), len(keys)*5)
		})
		checkHandling(t, parseEvents(t, readFile(t, record)), keys, 5)
		p2.signal(syscall.SIGTERM)
		if code := p2.exitCode(30 * time.Second); code != 0 {
			t.Errorf("node-2 exit %d", code)
		}
	})

	// A node whose handler runs for a long time: the first signal starts
	// the drain (the handler keeps running), the second exits at once.
	t.Run("second signal exits at once", func(t *testing.T) {
		srv.FlushAll(t)
		dir := t.TempDir()
		script := writeRecordScript(t, dir)
		record := filepath.Join(dir, "record.txt")
		if err := <-publishEvents(t, c, keyNames(1), 1, 0); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(dir, "node-1.yaml")
		writeFile(t, cfg, nodeYAML(srv.URL(), "node-1", execHandlerYAML(script, record, "30"), time.Minute))
		p := startNodeProc(t, bin, "node-1", cfg)
		testenv.Eventually(t, 2*time.Minute, "the handler running", func() (bool, string) {
			r := readFile(t, record)
			return strings.HasPrefix(r, "B "), fmt.Sprintf("record %q", r)
		})
		p.signal(syscall.SIGTERM)
		testenv.Eventually(t, 30*time.Second, "the drain to start", func() (bool, string) {
			l := p.logs.String()
			return strings.Contains(l, "msg=draining"), "logs:\n" + l
		})
		select {
		case <-p.done:
			t.Fatalf("exited during the drain: %s", p.cmd.ProcessState)
		case <-time.After(300 * time.Millisecond):
		}
		p.signal(syscall.SIGINT)
		if code := p.exitCode(5 * time.Second); code != 130 {
			t.Errorf("exit %d after the second signal, want 130", code)
		}
	})

	// A drain that overruns drain.timeout: the handler's process group is
	// killed, its message stays pending (unacknowledged) for the next
	// owner, and protctl exits 130.
	t.Run("drain deadline", func(t *testing.T) {
		srv.FlushAll(t)
		dir := t.TempDir()
		script := writeRecordScript(t, dir)
		record := filepath.Join(dir, "record.txt")
		keys := keyNames(1)
		if err := <-publishEvents(t, c, keys, 1, 0); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(dir, "node-1.yaml")
		writeFile(t, cfg, nodeYAML(srv.URL(), "node-1", execHandlerYAML(script, record, "30"), time.Second))
		p := startNodeProc(t, bin, "node-1", cfg)
		testenv.Eventually(t, 2*time.Minute, "the handler running", func() (bool, string) {
			r := readFile(t, record)
			return strings.HasPrefix(r, "B "), fmt.Sprintf("record %q", r)
		})
		start := time.Now()
		p.signal(syscall.SIGTERM)
		if code := p.exitCode(15 * time.Second); code != 130 {
			t.Errorf("exit %d after an overrun drain, want 130", code)
		}
		t.Logf("exited %s after SIGTERM (drain.timeout 1s)", time.Since(start).Round(time.Millisecond))
		if strings.Contains(readFile(t, record), "E ") {
			t.Error("the handler finished: it was not cancelled at the deadline")
		}
		if n := len(pendingOf(t, c, keys, "node-1")); n != 1 {
			t.Errorf("%d entries pending for node-1, want the cancelled one", n)
		}
	})
}
