package topic_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

const (
	topicService = "shop"
	topicName    = "orders"
	topicSub     = "ledger-sync"
)

// topicStore is what the runtime keeps in Redis (or in memory).
type topicStore interface {
	runtime.Checkpoints
	ledger.Ledger
	runtime.Membership
}

// memberCluster is the membership the test hosts share: the test decides
// who is live, at once (a killed node's heartbeat "expires" when the test
// removes it).
type memberCluster struct {
	mu      sync.Mutex
	members []string
	changed chan struct{}
}

func newMemberCluster() *memberCluster { return &memberCluster{changed: make(chan struct{})} }

func (c *memberCluster) update(f func([]string) []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := f(slices.Clone(c.members))
	if next == nil {
		next = []string{}
	}
	slices.Sort(next)
	next = slices.Compact(next)
	if slices.Equal(next, c.members) && c.members != nil {
		return
	}
	c.members = next
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *memberCluster) add(id string) {
	c.update(func(m []string) []string { return append(m, id) })
}

func (c *memberCluster) remove(id string) {
	c.update(func(m []string) []string { return slices.DeleteFunc(m, func(s string) bool { return s == id }) })
}

// testHost is a Host whose membership the test controls.
type testHost struct {
	cluster *memberCluster
	id      string
	log     *slog.Logger
	obs     *runtime.Observer
	clk     clock.Clock

	mu    sync.Mutex
	fails []error
}

func (h *testHost) Service() string             { return topicService }
func (h *testHost) NodeID() string              { return h.id }
func (h *testHost) Clock() clock.Clock          { return h.clk }
func (h *testHost) Logger() *slog.Logger        { return h.log }
func (h *testHost) Observer() *runtime.Observer { return h.obs }
func (h *testHost) Members() ([]string, <-chan struct{}) {
	h.cluster.mu.Lock()
	defer h.cluster.mu.Unlock()
	return slices.Clone(h.cluster.members), h.cluster.changed
}
func (h *testHost) Fail(_ string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fails = append(h.fails, err)
}

func (h *testHost) failures() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.fails)
}

// testLogger discards unless PROTCTL_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("PROTCTL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// topicEnv is a topic on kfake with the runtime's stores on memory or on
// a real redis-server.
type topicEnv struct {
	t       *testing.T
	k       *testenv.Kafka
	prod    *kgo.Client
	src     *kafkasource.Source
	leases  broker.LeaseManager
	store   topicStore
	raw     redis.UniversalClient // nil on memory
	mem     *memorybroker.Broker  // nil on Redis
	cluster *memberCluster
	parts   int32
	clk     clock.Clock // the nodes' clock; default the system's

	mu    sync.Mutex
	nodes map[string]*topicNode
}

type topicNode struct {
	id   string
	ts   *topic.Consumer
	host *testHost
}

type storeKind string

const (
	onMemory storeKind = "memory"
	onRedis  storeKind = "redis"
)

func newTopicEnv(t *testing.T, kind storeKind, parts int32) *topicEnv {
	t.Helper()
	e := &topicEnv{t: t, parts: parts, cluster: newMemberCluster(), nodes: map[string]*topicNode{}}
	if parts > 0 {
		e.k = testenv.StartKafka(t, parts, topicName)
	} else {
		e.k = testenv.StartKafka(t, 0)
	}
	e.prod = e.k.Client(t)
	src, err := kafkasource.New(e.k.Brokers, kafkasource.WithFetchMaxWait(50*time.Millisecond), kafkasource.WithRetry(3, 3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	e.src = src
	switch kind {
	case onMemory:
		e.mem = memorybroker.New()
		e.leases = e.mem
		e.store = memstore.New(e.mem.Faults())
	case onRedis:
		r := testenv.StartRedis(t)
		c := r.Client(t)
		e.raw = c
		e.leases = redisbroker.New(c)
		e.store = redisstore.New(c)
	}
	return e
}

func (e *topicEnv) leaseGroup() redisstore.LeaseGroup {
	return redisstore.TopicLeaseGroup(topicService, topicName)
}

// config is a fast configuration: short TTLs and periods.
func (e *topicEnv) config(subs ...topic.Subscription) topic.Config {
	return topic.Config{
		Topic:              topicName,
		Subscriptions:      subs,
		Source:             topic.Kafka(e.src),
		Leases:             e.leases,
		Checkpoints:        e.store,
		Ledger:             e.store,
		LeaseTTL:           2 * time.Second,
		RenewEvery:         300 * time.Millisecond,
		CheckpointEvery:    100 * time.Millisecond,
		HandoffTimeout:     2 * time.Second,
		RefreshEvery:       200 * time.Millisecond,
		LedgerPollEvery:    200 * time.Millisecond,
		OpTimeout:          time.Second,
		JoinBackoff:        20 * time.Millisecond,
		JoinMaxBackoff:     100 * time.Millisecond,
		SystemicBackoff:    20 * time.Millisecond,
		SystemicMaxBackoff: 100 * time.Millisecond,
	}
}

// start makes node id live and starts its topic subscriptions.
func (e *topicEnv) start(id string, cfg topic.Config, obs *runtime.Observer) *topicNode {
	e.t.Helper()
	ts, err := topic.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	clk := e.clk
	if clk == nil {
		clk = clock.System()
	}
	h := &testHost{cluster: e.cluster, id: id, log: testLogger().With("node", id), obs: obs, clk: clk}
	e.cluster.add(id)
	if err := ts.Start(context.Background(), h); err != nil {
		e.t.Fatal(err)
	}
	n := &topicNode{id: id, ts: ts, host: h}
	e.mu.Lock()
	e.nodes[id] = n
	e.mu.Unlock()
	return n
}

// stop leaves the membership, then stops gracefully (as a Node does).
func (e *topicEnv) stop(n *topicNode) {
	e.t.Helper()
	e.cluster.remove(n.id)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.ts.Stop(ctx); err != nil {
		e.t.Errorf("stop %s: %v", n.id, err)
	}
	e.mu.Lock()
	delete(e.nodes, n.id)
	e.mu.Unlock()
}

// kill abandons a node: no handoff, no save, no release; its heartbeat
// "expires" at once, its leases only after their TTL.
func (e *topicEnv) kill(n *topicNode) {
	e.t.Helper()
	topic.Abandon(n.ts)
	e.cluster.remove(n.id)
	e.mu.Lock()
	delete(e.nodes, n.id)
	e.mu.Unlock()
}

func (e *topicEnv) stopAll() {
	e.mu.Lock()
	nodes := make([]*topicNode, 0, len(e.nodes))
	for _, n := range e.nodes {
		nodes = append(nodes, n)
	}
	e.mu.Unlock()
	for _, n := range nodes {
		e.stop(n)
	}
}

func (e *topicEnv) live() []*topicNode {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*topicNode, 0, len(e.nodes))
	for _, n := range e.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// aggName and aggPartition place aggregate i on partition i % parts.
func aggName(i int) string { return fmt.Sprintf("a%04d", i) }

func (e *topicEnv) aggPartition(agg string) int32 {
	i, _ := strconv.Atoi(strings.TrimPrefix(agg, "a"))
	return int32(i) % e.parts
}

// record is one small record of agg with its sequence number in a header
// and an id header (its identity).
func (e *topicEnv) record(agg string, seq int) *kgo.Record {
	s := strconv.Itoa(seq)
	return &kgo.Record{
		Topic: topicName, Partition: e.aggPartition(agg), Key: []byte(agg), Value: []byte(`{"n":` + s + `}`),
		Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(agg + "-" + s)}, {Key: "seq", Value: []byte(s)}},
	}
}

// produce writes seq from..to of every aggregate, seq-major.
func (e *topicEnv) produce(aggs []string, from, to int) []*kgo.Record {
	e.t.Helper()
	var out []*kgo.Record
	batch := make([]*kgo.Record, 0, 5000)
	flush := func() {
		if len(batch) > 0 {
			out = append(out, e.k.Produce(e.t, e.prod, batch...)...)
			batch = batch[:0]
		}
	}
	for seq := from; seq <= to; seq++ {
		for _, a := range aggs {
			batch = append(batch, e.record(a, seq))
			if len(batch) == cap(batch) {
				flush()
			}
		}
	}
	flush()
	return out
}

func aggNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = aggName(i)
	}
	return out
}

// createPartitions grows the topic to total partitions.
func (e *topicEnv) createPartitions(total int32) {
	e.t.Helper()
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic = topicName
	rt.Count = total
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 5000
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, e.prod)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range resp.Topics {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			e.t.Fatalf("create partitions: %v", err)
		}
	}
	e.parts = total
}

// createTopic creates the topic (for tests that start without it).
func (e *topicEnv) createTopic(parts int32) {
	e.t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topicName
	rt.NumPartitions = parts
	rt.ReplicationFactor = 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 5000
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, e.prod)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range resp.Topics {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			e.t.Fatalf("create topic: %v", err)
		}
	}
	e.parts = parts
}

// checkpoint loads a stored checkpoint.
func (e *topicEnv) checkpoint(sub string, p int32) (int64, bool) {
	e.t.Helper()
	next, ok, err := e.store.Load(context.Background(), e.leaseGroup().String(), sub, p)
	if err != nil {
		e.t.Fatal(err)
	}
	return next, ok
}

// heads returns every partition's head.
func (e *topicEnv) heads() map[int32]int64 {
	e.t.Helper()
	wm, err := e.src.Watermarks(context.Background(), topicName)
	if err != nil {
		e.t.Fatal(err)
	}
	out := make(map[int32]int64, len(wm))
	for p, w := range wm {
		out[p] = w.Head
	}
	return out
}

// topicRecorder is a test handler: per aggregate the sequence numbers it
// handled, per partition the offsets handled, and a check that no two
// calls are inside one aggregate at once.
type topicRecorder struct {
	t testing.TB

	mu      sync.Mutex
	seqs    map[string][]int           // sub/agg -> seqs handled, in order
	nodes   map[string][]string        // sub/agg -> node per handled seq
	offsets map[string]*handledOffsets // sub/partition -> offsets handled
	inside  map[string]*atomic.Int32
	overlap atomic.Int32
	calls   atomic.Int64

	fail atomic.Pointer[func(m runtime.Message) error]
	hold atomic.Pointer[func(ctx context.Context, m runtime.Message)]
}

// handledOffsets tracks which offsets of a partition were handled and
// the contiguous prefix: every offset below low was handled.
type handledOffsets struct {
	low  int64
	seen map[int64]bool
}

func (h *handledOffsets) add(off int64) {
	h.seen[off] = true
	for h.seen[h.low] {
		delete(h.seen, h.low)
		h.low++
	}
}

func newTopicRecorder(t testing.TB) *topicRecorder {
	return &topicRecorder{t: t, seqs: map[string][]int{}, nodes: map[string][]string{},
		offsets: map[string]*handledOffsets{}, inside: map[string]*atomic.Int32{}}
}

func (r *topicRecorder) handler(node string) runtime.Handler {
	return runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
		r.calls.Add(1)
		key := m.Subscription + "/" + m.Aggregate
		r.mu.Lock()
		in := r.inside[key]
		if in == nil {
			in = new(atomic.Int32)
			r.inside[key] = in
		}
		r.mu.Unlock()
		if in.Add(1) > 1 {
			r.overlap.Add(1)
			r.t.Errorf("two handlers inside %s at once (node %s, offset %s)", key, node, m.Position)
		}
		defer in.Add(-1)
		if h := r.hold.Load(); h != nil {
			(*h)(ctx, m)
		}
		if f := r.fail.Load(); f != nil {
			if err := (*f)(m); err != nil {
				return err
			}
		}
		seq, err := strconv.Atoi(m.Headers.Get("seq"))
		if err != nil {
			r.t.Errorf("record without a seq header: %v", m.Headers)
		}
		off, _ := strconv.ParseInt(m.Position, 10, 64)
		r.mu.Lock()
		r.seqs[key] = append(r.seqs[key], seq)
		r.nodes[key] = append(r.nodes[key], node)
		pk := m.Subscription + "/" + strconv.Itoa(int(m.Partition))
		ho := r.offsets[pk]
		if ho == nil {
			ho = &handledOffsets{seen: map[int64]bool{}}
			r.offsets[pk] = ho
		}
		ho.add(off)
		r.mu.Unlock()
		return nil
	})
}

func (r *topicRecorder) setFail(f func(m runtime.Message) error) {
	if f == nil {
		r.fail.Store(nil)
		return
	}
	r.fail.Store(&f)
}

func (r *topicRecorder) setHold(f func(ctx context.Context, m runtime.Message)) {
	if f == nil {
		r.hold.Store(nil)
		return
	}
	r.hold.Store(&f)
}

func (r *topicRecorder) handled(sub, agg string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs[sub+"/"+agg])
}

// handledBelow is the contiguous prefix of offsets handled.
func (r *topicRecorder) handledBelow(sub string, p int32) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ho := r.offsets[sub+"/"+strconv.Itoa(int(p))]; ho != nil {
		return ho.low
	}
	return 0
}

// complete reports whether every aggregate of sub handled 1..n.
func (r *topicRecorder) complete(sub string, aggs []string, n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range aggs {
		s := r.seqs[sub+"/"+a]
		if len(s) == 0 || slices.Max(s) < n {
			return false
		}
	}
	return true
}

// checkOrder fails t unless each aggregate's handled sequence is 1..n in
// order, allowing only replays (a step back followed by consecutive
// numbers), never a gap.
func (r *topicRecorder) checkOrder(t testing.TB, sub string, aggs []string, n int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	bad := 0
	for _, a := range aggs {
		if err := seqOrderErr(r.seqs[sub+"/"+a], n); err != nil {
			if bad++; bad <= 5 {
				t.Errorf("aggregate %s: %v (handled %v by %v)", a, err, r.seqs[sub+"/"+a], r.nodes[sub+"/"+a])
			}
		}
	}
	if bad > 5 {
		t.Errorf("... and %d more aggregates out of order", bad-5)
	}
	if n := r.overlap.Load(); n > 0 {
		t.Errorf("%d overlapping handler calls", n)
	}
}

// auditedCheckpoints checks every checkpoint save against the recorder
// before it reaches the store: a save whose offset is past a record not
// handled yet is a violation if the store accepts it.
type auditedCheckpoints struct {
	runtime.Checkpoints
	rec *topicRecorder

	mu         sync.Mutex
	saves      int
	violations []string
}

func (a *auditedCheckpoints) Save(ctx context.Context, f broker.Fence, leaseGroup, subscription string, partition int32, next int64) error {
	low := a.rec.handledBelow(subscription, partition)
	err := a.Checkpoints.Save(ctx, f, leaseGroup, subscription, partition, next)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		a.saves++
		if next > low {
			a.violations = append(a.violations, fmt.Sprintf("%s/%d saved %d but only offsets below %d were handled (fence %s)",
				subscription, partition, next, low, f.Token))
		}
	}
	return err
}

func (a *auditedCheckpoints) report() (int, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.saves, slices.Clone(a.violations)
}

// flakyLeases is a lease manager the test can make unreachable, at once
// (down) or after some acquires succeeded (upFor).
type flakyLeases struct {
	broker.LeaseManager
	down  atomic.Bool
	upFor atomic.Int32 // when > 0, acquires left before going down
}

var errLeaseStoreDown = errors.New("lease store unreachable (test)")

func (f *flakyLeases) AcquirePartitionLease(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration) (broker.Lease, bool, error) {
	if f.upFor.Load() > 0 && f.upFor.Add(-1) == 0 {
		f.down.Store(true)
	}
	if f.down.Load() {
		return broker.Lease{}, false, errLeaseStoreDown
	}
	return f.LeaseManager.AcquirePartitionLease(ctx, leaseKey, generationKey, owner, ttl)
}

// waitFor polls cond every 10ms until it holds or d passes; explain, if
// given, says what was seen instead.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool, explain ...func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			if len(explain) > 0 {
				t.Fatalf("timed out after %s waiting for %s: %s", d, what, explain[0]())
			}
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// noTopicGoroutines fails t when goroutines of topic subscriptions
// outlive their Stop: the package's leak check.
func noTopicGoroutines(t testing.TB) {
	t.Helper()
	var last string
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:goruntime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "topic.(*Consumer)") || strings.Contains(g, "topic.(*topicPart)") ||
				strings.Contains(g, "topic.(*subPart)") || strings.Contains(g, "topic.(*topicCoord)") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return
		}
		last = strings.Join(leaked, "\n\n")
		if time.Now().After(deadline) {
			t.Fatalf("goroutines of topic subscriptions outlived Stop:\n%s", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tsub(name string, h runtime.Handler) topic.Subscription {
	return topic.Subscription{Name: name, Handler: h, Retry: runtime.RetryPolicy{Attempts: 1}}
}

// seqOrderErr says what is wrong with a handled sequence that should be
// 1..n with replays (steps back) allowed and gaps not.
func seqOrderErr(seqs []int, n int) error {
	if len(seqs) == 0 {
		if n == 0 {
			return nil
		}
		return fmt.Errorf("nothing handled, want 1..%d", n)
	}
	if seqs[0] != 1 {
		return fmt.Errorf("first handled is %d, want 1", seqs[0])
	}
	top := seqs[0]
	for i := 1; i < len(seqs); i++ {
		if seqs[i] > seqs[i-1]+1 {
			return fmt.Errorf("gap: %d after %d", seqs[i], seqs[i-1])
		}
		top = max(top, seqs[i])
	}
	if top != n {
		return fmt.Errorf("handled up to %d, want %d", top, n)
	}
	return nil
}
