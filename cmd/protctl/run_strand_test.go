//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Issue 17, "no entry is ever stranded", through three real `protctl run
// node` processes. Entries are appended the way Protean's RedisBroker
// writes them, with plain commands and no protctl wake-up signal (SADD
// C:__partitions__ K, then XADD C:K * data <envelope>), to 20-50 keys at
// gaps around the idle release (IdleAfter is the renewal period, 400ms
// here), while a random schedule SIGKILLs a node (and starts one again,
// under its id or a new one), SIGSTOPs one past its lease TTL then
// continues it, and kills the nodes' blocked waits and pub/sub
// connections, or all their connections (the waits and watches restart;
// replies in flight are lost). A key's last entry is the one a fault can
// strand (a later entry would rescue it), so most keys get their last
// entry around a fault. The schedule comes from a seed the test logs; the
// same seed replays it (PROTCTL_STRAND_SEED; the processes' own timing is
// not replayed).
//
// The handler is an http server in the test process, so every call's
// begin and end are read from one monotonic clock; a few calls fail
// (retries and systemic pauses race too). Asserted: every appended entry
// is handled (see strandIdle for when one is stranded), and
// testenv.CheckCalls: each key's calls go in stream-id order (a step back
// only when a newer generation replays the unacknowledged tail, at most
// maxInFlight entries, or when an attempt is retried), no two calls of
// one key overlap in time, no call runs under a generation older than
// one already begun. The one exception is a paused owner's call in
// flight across its SIGSTOP: its lease check passed before the stop and
// its request left after the continue, which no lease can prevent (only
// a handler that checks X-Protctl-Generation can refuse it); such calls
// are logged and counted (pausedLate).
//
// PROTCTL_STRAND_ITER=N runs N rounds (seeds seed, seed+1, ...);
// PROTCTL_STRAND_SECONDS sets how long each round appends (default 16).
// pkg/runtime's TestMemNoEntryStranded and TestRedisNoEntryStranded run
// the same in process, with more interleavings per second.
func TestRunNodeNoEntryStranded(t *testing.T) {
	bin := buildProtctl(t)
	iters := envInt(t, "PROTCTL_STRAND_ITER", 1)
	seconds := envInt(t, "PROTCTL_STRAND_SECONDS", 16)
	seed := time.Now().UnixNano()
	if s := os.Getenv("PROTCTL_STRAND_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("PROTCTL_STRAND_SEED: %v", err)
		}
		seed = v
	}
	srv := testenv.StartRedis(t)
	for i := range iters {
		s := seed + int64(i)
		ok := t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			srv.FlushAll(t)
			t.Logf("seed %d (replay: PROTCTL_STRAND_SEED=%d go test -run TestRunNodeNoEntryStranded ./cmd/protctl)", s, s)
			runStrand(t, bin, srv, s, time.Duration(seconds)*time.Second)
		})
		if !ok {
			break
		}
	}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return v
}

// Stranded entries: entries are left and no handler call began for
// strandIdle (nothing works on them any more), or strandTotal passed
// since the last append. Both are generous (a loaded machine; a node
// stopped and continued at the very end; a partition paused by a
// handler's systemic failures) and far below "never" (the issue's
// stranded entry was not handled 90s later); a slow but busy node is not
// mistaken for a stranded entry.
const (
	strandIdle  = 30 * time.Second
	strandTotal = 3 * time.Minute
)

// strandCall is one handler call as the test's http server saw it; times
// are since the round's start, on the test process's monotonic clock.
type strandCall struct {
	node       string
	key        string
	seq        int
	position   string
	gen        int64
	attempt    int
	begin, end time.Duration
	status     int // the reply's HTTP status
}

// strandAppend is one entry the round appended.
type strandAppend struct {
	key string
	seq int
	id  string
	at  time.Duration
}

// strandRound is one round's shared state.
type strandRound struct {
	t    *testing.T
	bin  string
	srv  *testenv.Redis
	c    *redis.Client
	dir  string
	url  string        // the handler's
	t0   time.Time     // the round's clock: times are since t0
	base time.Duration // when the appends began (the nodes had started)
	rng  *rand.Rand    // the schedule's; used by the round's goroutine only
	logs map[string][]*nodeProc

	maxInFlight, workers int
	// ttl is the lease TTL; the renewal period, and so IdleAfter, is a
	// fifth of it.
	ttl time.Duration

	mu      sync.Mutex
	calls   []*strandCall
	appends []strandAppend
	seq     map[string]int // per key, the last seq appended
	holdRng *rand.Rand     // the handler's hold times, under mu
	// stops are, per node id, the [SIGSTOP, SIGCONT] intervals.
	stops map[string][][2]time.Duration
}

func (r *strandRound) now() time.Duration { return time.Since(r.t0) }

// ServeHTTP is the nodes' handler: it records the call's begin, holds it
// for 0-3ms (so that overlapping calls would be seen), and its end. A few
// calls fail, so that retries and pauses are raced too: 2% with 503
// (systemic: the partition pauses for a second or more, keeping its
// lease), 1% with 422 (an aggregate failure: retried at once). Five
// attempts before parking make a park (which would leave its entry to an
// operator) too unlikely to matter.
func (r *strandRound) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var env struct {
		Data struct {
			Seq int `json:"seq"`
		} `json:"data"`
	}
	if err := json.NewDecoder(req.Body).Decode(&env); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	gen, _ := strconv.ParseInt(req.Header.Get("X-Protctl-Generation"), 10, 64)
	attempt, _ := strconv.Atoi(req.Header.Get("X-Protctl-Attempt"))
	c := &strandCall{
		node: req.Header.Get("X-Node"), key: req.Header.Get("X-Protctl-Partition"), seq: env.Data.Seq,
		position: req.Header.Get("X-Protctl-Position"), gen: gen, attempt: attempt,
	}
	r.mu.Lock()
	c.begin = r.now()
	r.calls = append(r.calls, c)
	hold := time.Duration(r.holdRng.IntN(3000)) * time.Microsecond
	c.status = http.StatusNoContent
	switch n := r.holdRng.IntN(100); {
	case n < 2:
		c.status = http.StatusServiceUnavailable
	case n < 3:
		c.status = http.StatusUnprocessableEntity
	}
	r.mu.Unlock()
	time.Sleep(hold)
	r.mu.Lock()
	c.end = r.now()
	r.mu.Unlock()
	w.WriteHeader(c.status)
}

// handledSet returns the key/seq pairs a call handled, and when the last
// call began.
func (r *strandRound) handledSet() (map[string]bool, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	done := make(map[string]bool, len(r.calls))
	var last time.Duration
	for _, c := range r.calls {
		if c.end > 0 && c.status < 300 {
			done[c.key+"/"+strconv.Itoa(c.seq)] = true
		}
		last = max(last, c.begin)
	}
	return done, last
}

func (r *strandRound) startNode(id string) *nodeProc {
	cfg := filepath.Join(r.dir, id+".yaml")
	writeFile(r.t, cfg, fmt.Sprintf(`service: %s
node: %s
redis: {url: "%s"}
admin: {disabled: true}
lease: {ttl: %s, renewEvery: %s}
drain: {timeout: 10s}
subscriptions:
  - name: %s
    redis: {categories: ["%s"]}
    retry: {attempts: 5, backoff: 20ms}
    maxInFlight: %d
    workers: %d
    handler:
      http: {url: "%s/events", timeout: 5s, headers: {X-Node: %s}}
`, procService, id, r.srv.URL(), r.ttl, r.ttl/5, procGroup, procCategory, r.maxInFlight, r.workers, r.url, id))
	p := startNodeProc(r.t, r.bin, id, cfg)
	r.logs[id] = append(r.logs[id], p)
	return p
}

func runStrand(t *testing.T, bin string, srv *testenv.Redis, seed int64, appendFor time.Duration) {
	rng := rand.New(rand.NewPCG(uint64(seed), 17))
	r := &strandRound{
		t: t, bin: bin, srv: srv, dir: t.TempDir(), rng: rng, logs: map[string][]*nodeProc{},
		holdRng: rand.New(rand.NewPCG(uint64(seed), 18)),
		stops:   map[string][][2]time.Duration{}, seq: map[string]int{},
	}
	r.maxInFlight = []int{5, 20, 100}[rng.IntN(3)]
	r.workers = []int{4, 8, 32}[rng.IntN(3)]
	r.ttl = procTTL
	nKeys := 20 + rng.IntN(31)
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("o-%03d", i)
	}
	// Long timeouts: an append that timed out may or may not have
	// happened, and the record would then be wrong; a loaded machine
	// answers slowly, not never.
	r.c = redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute, PoolTimeout: time.Minute})
	defer r.c.Close()
	hs := httptest.NewServer(r)
	defer hs.Close()
	r.url = hs.URL
	t.Logf("%d keys, lease TTL %s, maxInFlight %d, workers %d, appending for %s", nKeys, r.ttl, r.maxInFlight, r.workers, appendFor)

	r.t0 = time.Now()
	// Two keys in three exist before the nodes start (their first entry
	// is appended now); the others are new keys found while entries
	// flow.
	for i, k := range keys {
		if i%3 != 2 {
			if err := r.appendEntry(k); err != nil {
				t.Fatal(err)
			}
		}
	}
	store := redisstore.New(r.c)
	procs := map[string]*nodeProc{}
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		procs[id] = r.startNode(id)
	}
	waitMembers(t, store, 3)
	r.base = r.now()

	// The faults, drawn up front so that the seed alone gives them.
	type fault struct {
		at   time.Duration
		kind string
	}
	var faults []fault
	var faultAt []time.Duration
	span := appendFor - 2*time.Second
	kinds := []string{"kill", "stop"}
	for range 1 + rng.IntN(3) {
		kinds = append(kinds, "connkill")
	}
	if rng.IntN(2) == 0 {
		kinds = append(kinds, "stop")
	}
	for _, k := range kinds {
		at := r.base + time.Second + time.Duration(rng.Int64N(int64(span)))
		faults = append(faults, fault{at, k})
		faultAt = append(faultAt, at)
	}
	until := testenv.LastAppends(rng, keys, faultAt, r.base, appendFor)

	// The appenders: four goroutines, each owning a quarter of the keys
	// (one writer per key keeps each key's order), each with its own
	// seeded source.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for a := range 4 {
		var own []string
		for i, k := range keys {
			if i%4 == a {
				own = append(own, k)
			}
		}
		arng := rand.New(rand.NewPCG(uint64(seed), uint64(100+a)))
		gap := func() time.Duration { return testenv.AppendGap(arng, r.ttl/5) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := testenv.AppendEach(own, until, r.now, gap, stop, r.appendEntry); err != nil {
				errs <- err
			}
		}()
	}

	// Faults run on this goroutine; a stop's continue and a kill's
	// restart are scheduled by the fault and run here too.
	var sched testenv.Schedule
	stopped := map[string]bool{}
	down := map[string]bool{}
	next := 4
	pickUp := func() (string, bool) {
		var ids []string
		for id := range procs {
			if !stopped[id] && !down[id] {
				ids = append(ids, id)
			}
		}
		return testenv.PickNode(rng, ids)
	}
	run := func(kind string) {
		switch kind {
		case "kill":
			id, ok := pickUp()
			if !ok {
				return
			}
			p := procs[id]
			p.signal(syscall.SIGKILL)
			<-p.done
			down[id] = true
			// Start a node again after a while: under the same id (its
			// keys come back to it, its old leases must expire first) or
			// a new one (the survivors keep them).
			after := time.Duration(200+rng.IntN(2800)) * time.Millisecond
			newID := id
			if rng.IntN(2) == 0 {
				newID = fmt.Sprintf("node-%d", next)
				next++
			}
			t.Logf("%s: SIGKILL %s; %s starts %s later", r.now().Round(time.Millisecond), id, newID, after)
			sched.At(r.now()+after, func() {
				delete(procs, id)
				delete(down, id)
				procs[newID] = r.startNode(newID)
			})
		case "stop":
			id, ok := pickUp()
			if !ok {
				return
			}
			p := procs[id]
			p.signal(syscall.SIGSTOP)
			at := r.now() // after the signal: the node ran until it landed
			stopped[id] = true
			d := r.ttl + time.Duration(300+rng.IntN(1700))*time.Millisecond
			t.Logf("%s: SIGSTOP %s for %s", at.Round(time.Millisecond), id, d)
			sched.At(at+d, func() {
				// Read before the signal: the node may run (and call the
				// handler) before signal returns.
				cont := r.now()
				p.signal(syscall.SIGCONT)
				r.mu.Lock()
				r.stops[id] = append(r.stops[id], [2]time.Duration{at, cont})
				r.mu.Unlock()
				delete(stopped, id)
			})
		case "connkill":
			all := rng.IntN(3) == 0
			n := r.killNodeConns(all)
			what := "blocked or pub/sub"
			if all {
				what = "every"
			}
			t.Logf("%s: killed %d connections (%s node connection)", r.now().Round(time.Millisecond), n, what)
		}
	}
	for _, f := range faults {
		sched.At(f.at, func() { run(f.kind) })
	}
	sched.Run(r.now)
	if d := r.base + appendFor - r.now(); d > 0 {
		time.Sleep(d)
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("append: %v", err)
	default:
	}
	lastAppend := r.now()

	r.mu.Lock()
	appends := slices.Clone(r.appends)
	r.mu.Unlock()
	t.Logf("%d entries appended, the last at %s", len(appends), lastAppend.Round(time.Millisecond))
	for {
		done, lastBegin := r.handledSet()
		var missing []strandAppend
		for _, a := range appends {
			if !done[a.key+"/"+strconv.Itoa(a.seq)] {
				missing = append(missing, a)
			}
		}
		if len(missing) == 0 {
			break
		}
		if now := r.now(); now-max(lastBegin, lastAppend) > strandIdle || now-lastAppend > strandTotal {
			r.stranded(missing)
			t.FailNow()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("every entry handled %s after the last append", (r.now() - lastAppend).Round(time.Millisecond))
	r.check(appends)
}

// appendEntry appends key's next entry as Protean does and records it.
func (r *strandRound) appendEntry(k string) error {
	ctx := context.Background()
	l := broker.ProteanLayout
	r.mu.Lock()
	seq := r.seq[k] + 1
	r.mu.Unlock()
	env := fmt.Sprintf(`{"data":{"key":"%s","seq":%d},"metadata":{"headers":{"id":"%s-%d","type":"OrderChanged"}}}`, k, seq, k, seq)
	// Two round trips, as Protean sends them: the key is in the index
	// before its stream has the entry.
	if err := r.c.SAdd(ctx, l.IndexKey(procCategory), k).Err(); err != nil {
		return err
	}
	id, err := r.c.XAdd(ctx, &redis.XAddArgs{Stream: l.Stream(procCategory, k), Values: []any{broker.DataField, env}}).Result()
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq[k] = seq
	r.appends = append(r.appends, strandAppend{key: k, seq: seq, id: id, at: r.now()})
	return nil
}

// killNodeConns kills the nodes' connections blocked in a wait (XREAD)
// and their pub/sub connections: the waits and the watches restart. With
// all, it kills every node connection: replies in flight are lost too (a
// fenced read whose reply never came, a renewal that may or may not have
// happened).
func (r *strandRound) killNodeConns(all bool) int {
	ctx := context.Background()
	list, err := r.c.ClientList(ctx).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if f["name"] != "protctl-node" {
			continue
		}
		switch f["cmd"] {
		case "xread", "subscribe", "psubscribe", "ssubscribe":
		default:
			if !all {
				continue
			}
		}
		if err := r.c.ClientKillByFilter(ctx, "ID", f["id"]).Err(); err == nil {
			n++
		}
	}
	return n
}

// stranded reports entries not handled within the bound, with what
// Redis says about their partitions.
func (r *strandRound) stranded(missing []strandAppend) {
	t := r.t
	ctx := context.Background()
	byKey := map[string][]strandAppend{}
	for _, a := range missing {
		byKey[a.key] = append(byKey[a.key], a)
	}
	t.Errorf("%d entries of %d keys stranded: not handled %s after the last append, no handler call begun for %s",
		len(missing), len(byKey), strandTotal, strandIdle)
	l := broker.ProteanLayout
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ms := byKey[k]
		var ids []string
		for _, a := range ms {
			ids = append(ids, fmt.Sprintf("seq %d id %s at %s", a.seq, a.id, a.at.Round(time.Millisecond)))
		}
		stream := l.Stream(procCategory, k)
		lease, _ := r.c.Get(ctx, l.LeaseKey(procGroup, k)).Result()
		ttl, _ := r.c.PTTL(ctx, l.LeaseKey(procGroup, k)).Result()
		gen, _ := r.c.Get(ctx, l.GenerationKey(procGroup, k)).Result()
		groups, _ := r.c.XInfoGroups(ctx, stream).Result()
		pend, _ := r.c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: procGroup, Start: "-", End: "+", Count: 20}).Result()
		last, _ := r.c.XRevRangeN(ctx, stream, "+", "-", 1).Result()
		t.Errorf("key %s: not handled: %s\n  lease %q (pttl %s), generation %s, last entry %v\n  groups %+v\n  pending %+v",
			k, strings.Join(ids, "; "), lease, ttl, gen, last, groups, pend)
		r.mu.Lock()
		var calls []string
		for _, c := range r.calls {
			if c.key == k {
				calls = append(calls, fmt.Sprintf("%s seq %d %s gen %d attempt %d [%s, %s] %d", c.node, c.seq, c.position, c.gen,
					c.attempt, c.begin.Round(time.Millisecond), c.end.Round(time.Millisecond), c.status))
			}
		}
		r.mu.Unlock()
		if len(calls) > 12 {
			calls = calls[len(calls)-12:]
		}
		t.Logf("key %s: last calls:\n  %s", k, strings.Join(calls, "\n  "))
	}
	for id, ps := range r.logs {
		for _, p := range ps {
			var lines []string
			for _, line := range strings.Split(p.logs.String(), "\n") {
				for _, k := range keys {
					if strings.Contains(line, "key="+k+" ") || strings.Contains(line, "membership") || strings.Contains(line, "level=WARN") {
						lines = append(lines, line)
						break
					}
				}
			}
			if len(lines) > 60 {
				lines = lines[len(lines)-60:]
			}
			t.Logf("%s (pid %d), lines about the stranded keys, membership and warnings:\n%s", id, p.pid(), strings.Join(lines, "\n"))
		}
	}
}

// pausedLate reports whether c is a paused owner's call in flight across
// its pause: its node was SIGSTOPped and continued; c began within 5s of
// the continue (a loaded machine may run it late) and is the node's first
// call of the key since; its generation is older than the key's newest
// but no newer one had begun before the stop (the node may have held it
// then, its first call included). The in-process tests, where no time
// passes between a lease check and the call, allow no such call.
func (r *strandRound) pausedLate(c testenv.HandlerCall, earlier []testenv.HandlerCall) bool {
	var newest int64
	for _, e := range earlier {
		newest = max(newest, e.Gen)
	}
	if c.Gen >= newest {
		return false
	}
	for _, s := range r.stops[c.Node] {
		if c.Begin < s[1] || c.Begin > s[1]+5*time.Second {
			continue
		}
		held := true
		for _, e := range earlier {
			if e.Begin < s[0] && e.Gen > c.Gen {
				held = false // a newer generation began before the stop
			}
			if e.Node == c.Node && e.Begin >= s[1] {
				held = false // not the node's first call since the continue
			}
		}
		if held {
			overlaps := 0
			for _, e := range earlier {
				if e.Node != c.Node && (e.End == 0 || e.End > c.Begin) {
					overlaps++
				}
			}
			r.t.Logf("key %s: %s's call of seq %d (generation %d, newest %d) began %s, %s after its SIGCONT, overlapping %d earlier call(s) of other nodes: a paused owner's call in flight across its pause",
				c.Key, c.Node, c.Seq, c.Gen, newest, c.Begin.Round(time.Millisecond), (c.Begin - s[1]).Round(time.Millisecond), overlaps)
			return true
		}
	}
	return false
}

// check asserts order, exclusion and fencing on the record
// (testenv.CheckCalls) and logs how long entries waited.
func (r *strandRound) check(appends []strandAppend) {
	t := r.t
	seqOf := map[string]int{} // key/id -> seq
	at := map[string]time.Duration{}
	for _, a := range appends {
		seqOf[a.key+"/"+a.id] = a.seq
		at[a.key+"/"+a.id] = a.at
	}
	r.mu.Lock()
	calls := make([]testenv.HandlerCall, 0, len(r.calls))
	first := map[string]time.Duration{}
	for _, c := range r.calls {
		// Entries are appended one writer per key, so seq order is
		// stream-id order; the position must be the seq's entry.
		if seq, ok := seqOf[c.key+"/"+c.position]; !ok || seq != c.seq {
			t.Errorf("key %s: %s handled position %s carrying seq %d; the test appended seq %d there", c.key, c.node, c.position, c.seq, seq)
		}
		if b, ok := first[c.key+"/"+c.position]; !ok || c.begin < b {
			first[c.key+"/"+c.position] = c.begin
		}
		calls = append(calls, testenv.HandlerCall{Node: c.node, Key: c.key, Seq: c.seq, Gen: c.gen, Attempt: c.attempt, Begin: c.begin, End: c.end})
	}
	r.mu.Unlock()
	st := testenv.CheckCalls(t, calls, testenv.CallRules{MaxInFlight: r.maxInFlight, Exempt: r.pausedLate})
	for _, k := range st.Failed {
		var lines []string
		for _, c := range calls {
			if c.Key == k {
				lines = append(lines, fmt.Sprintf("%s seq %d gen %d attempt %d [%s, %s]", c.Node, c.Seq, c.Gen, c.Attempt,
					c.Begin.Round(time.Microsecond), c.End.Round(time.Microsecond)))
			}
		}
		t.Logf("key %s: calls in order of begin (stops %v):\n  %s", k, r.stops, strings.Join(lines, "\n  "))
	}
	var latencies []time.Duration
	for k, b := range first {
		if at[k] >= r.base { // not the keys made before the nodes started
			latencies = append(latencies, b-at[k])
		}
	}
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		t.Logf("append to first handler call: p50 %s, p99 %s, max %s; %d calls for %d entries, %d replays, %d paused owners' late calls",
			latencies[n/2].Round(time.Millisecond), latencies[n*99/100].Round(time.Millisecond), latencies[n-1].Round(time.Millisecond),
			st.Calls, len(appends), st.Replays, st.Exempt)
	}
}
