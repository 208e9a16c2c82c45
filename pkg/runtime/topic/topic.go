package topic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// Errors of topic subscriptions.
var (
	// ErrTopicStopped is returned by AwaitStarted when the subscriptions
	// stopped before they joined, and by Retry and Skip after Stop.
	ErrTopicStopped = errors.New("runtime: topic subscriptions stopped")
	// ErrNoPartitions is the join error (LastJoinError) while the topic
	// exists but has no partitions yet.
	ErrNoPartitions = errors.New("runtime: topic has no partitions yet")
	// ErrNoMembership is the join error (LastJoinError) while the node has
	// not read the service's membership yet (its heartbeat has not
	// succeeded: the membership store may be unreachable).
	ErrNoMembership = errors.New("runtime: service membership not known yet")
	// ErrUnknownSubscription is returned by Retry and Skip for a name that
	// is not one of the topic's subscriptions.
	ErrUnknownSubscription = errors.New("runtime: unknown topic subscription")
)

// Counter names of topic subscriptions, in addition to the shared ones
// (CounterProcessed, ...). They are part of the CLI's JSON output: add
// names, do not rename them.
const (
	CounterDuplicates   = "duplicates"   // records dropped as already handled (dedup)
	CounterSkipped      = "skipped"      // records of parked aggregates skipped (a retry handles them)
	CounterLost         = "lost"         // offsets lost to retention before they were handled
	CounterCatchUps     = "catchUps"     // catch-up reads of a subscription far behind
	CounterCheckpoints  = "checkpoints"  // checkpoints saved
	CounterJoinFailures = "joinFailures" // failed join attempts
	CounterHeld         = "held"         // gauge: partitions held
)

// Consumer runs the subscriptions of one Kafka topic on one
// node: the topic's partitions are leased in the lease group (service,
// "topic:<topic>") and spread over the service's live nodes by rendezvous
// hashing; each held partition is read once, by one reader per (node,
// topic), and its records are fanned out to every subscription, each with
// its own checkpoint, lanes, dedup and failure ledger entries.
//
// It is a Subscription: give it to NewNode. Its life:
//
//	         Start
//	           │  (returns at once)
//	           ▼
//	┌───── joining ◀────────────┐ list partitions (wait while there are
//	│          │                │ none), read the membership, acquire
//	│          │ join ok        │ the HRW share, load checkpoints and
//	│          ▼                │ parked entries; a failure is undone
//	│       joined              │ (leases released) and retried with
//	│          │                │ backoff: JoinFailures, LastJoinError
//	│          │ Stop           └── join failed
//	└──Stop──▶ leaving: hand off every partition (stop reading, drain
//	           │        the lanes up to HandoffTimeout, save checkpoints,
//	           ▼        release the lease)
//	          left
//
// failed is reported when every subscription stopped on a fatal error.
//
// The life of a partition P on a node, once HRW gives P to it:
//
//	acquire lease (generation g), load each subscription's checkpoint and
//	parked aggregates, assign P on the shared reader at the lowest
//	checkpoint (subscriptions far behind catch up on their own reader)
//	  │
//	  ▼
//	held: records fan out to each subscription's lanes (one record at a
//	time per aggregate); the low watermark of the records done is saved
//	every CheckpointEvery, fenced by g
//	  │                                     │
//	  │ HRW gives P away / Stop             │ renewal refused, trust window
//	  ▼                                     ▼ passed, or a fenced write refused
//	handoff: unassign, drain lanes         lost: unassign, cancel handlers,
//	up to HandoffTimeout, save, release    save nothing (it would be refused)
type Consumer struct {
	cfg  Config
	name string
	subs []*Runtime

	// Derived from cfg: the aggregate is the record key, and the identity
	// headers (kafkasource.IdentityFrom's defaults filled in).
	keyAggregate            bool
	idHeader, versionHeader string
	idPathKey               []byte // `"<first key of the id path>"`

	// Set by Start.
	group  string // the lease group "<service>|topic:<topic>"
	host   runtime.Host
	clk    clock.Clock
	log    *slog.Logger
	obs    *runtime.Observer
	node   string
	jit    *backoff.Jitter // the waits' random source, seeded per node
	reader Reader

	mu           sync.Mutex
	state        runtime.SubscriptionState
	join         runtime.JoinState
	joinFailures int
	lastJoinErr  error
	fatalErr     error
	started      chan struct{} // closed when joined
	stopping     chan struct{} // closed when Stop begins
	stopOnce     sync.Once
	coordDone    chan struct{} // closed when the coordinator returns
	stopErr      error

	runCtx    context.Context // parent of the partitions' contexts
	runCancel context.CancelCauseFunc
	bgCtx     context.Context // background loops
	bgCancel  context.CancelFunc
	wg        sync.WaitGroup

	partsMu sync.RWMutex
	parts   map[int32]*topicPart // held partitions (started)
	// acquired holds the leases taken and not started yet: a join (or a
	// round of acquireDue) takes hundreds of partitions one after another
	// before it starts any, and the renewer keeps these alive meanwhile.
	acquired map[int32]*topicLease

	events chan topicEvent
	c      topicCounters

	// handoffHook, when set (tests only), is called when a partition's
	// handoff begins, after no record may start any more.
	handoffHook func(p int32)
	// seekHook, when set (tests only), is called when a partition's
	// online seek begins, after no record of the subscription may start
	// any more.
	seekHook func(p int32)
	// renewGate, when set (tests only), is called before every renewal
	// round; blocking in it stalls renewals.
	renewGate func(ctx context.Context)
}

var _ runtime.Subscription = (*Consumer)(nil)

// New returns the subscriptions of cfg.Topic for one
// node. It does no I/O.
func New(cfg Config) (*Consumer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := &Consumer{
		cfg:       cfg,
		name:      "topic:" + cfg.Topic,
		state:     runtime.StateNew,
		join:      runtime.JoinJoining,
		started:   make(chan struct{}),
		stopping:  make(chan struct{}),
		coordDone: make(chan struct{}),
		parts:     make(map[int32]*topicPart),
		acquired:  make(map[int32]*topicLease),
		events:    make(chan topicEvent, 64),
	}
	for _, sc := range cfg.Subscriptions {
		t.subs = append(t.subs, &Runtime{t: t, cfg: sc, dedup: make(map[int32]*dedupMemory), dedupGen: make(map[int32]int64)})
	}
	t.keyAggregate = cfg.Aggregate.Header == "" && cfg.Aggregate.JSONPath == ""
	t.idHeader, t.versionHeader = cfg.Identity.IDHeader, cfg.Identity.VersionHeader
	if t.idHeader == "" {
		t.idHeader = kafkasource.DefaultIdentity.IDHeader
	}
	if t.versionHeader == "" {
		t.versionHeader = kafkasource.DefaultIdentity.VersionHeader
	}
	idPath := cfg.Identity.IDPath
	if idPath == "" {
		idPath = kafkasource.DefaultIdentity.IDPath
	}
	first, _, _ := strings.Cut(idPath, ".")
	t.idPathKey = []byte(strconv.Quote(first))
	return t, nil
}

// Name is "topic:<topic>", the subscription's name in the node.
func (t *Consumer) Name() string { return t.name }

// Topic is the topic read.
func (t *Consumer) Topic() string { return t.cfg.Topic }

// Config returns the validated configuration, defaults filled in.
func (t *Consumer) Config() Config { return t.cfg }

// Subscription returns the runtime of the named subscription, or nil.
func (t *Consumer) Subscription(name string) *Runtime {
	for _, s := range t.subs {
		if s.cfg.Name == name {
			return s
		}
	}
	return nil
}

// Start starts the background join and returns at once: the topic may not
// exist or have partitions yet, and the stores may be unreachable; the
// join retries with backoff until it succeeds (AwaitStarted, JoinState).
// It does no I/O. Starting twice, or after Stop, is an error.
func (t *Consumer) Start(ctx context.Context, host runtime.Host) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != runtime.StateNew {
		return errors.New("runtime: topic subscriptions already started")
	}
	// The lease group is the service's: (service, "topic:<topic>"), so
	// two services reading one topic never share (or fight over) leases.
	t.group = host.Service() + "|topic:" + t.cfg.Topic
	reader, err := t.cfg.Source.NewReader(t.cfg.Topic)
	if err != nil {
		return fmt.Errorf("runtime: topic %q: new reader: %w", t.cfg.Topic, err)
	}
	t.reader = reader
	t.host = host
	t.clk = t.cfg.Clock
	if t.clk == nil {
		t.clk = host.Clock()
	}
	t.log = t.cfg.Logger
	if t.log == nil {
		t.log = host.Logger()
	}
	t.log = t.log.With("topic", t.cfg.Topic)
	t.obs = t.cfg.Observer
	if t.obs == nil {
		t.obs = host.Observer()
	}
	t.node = host.NodeID()
	t.jit = backoff.NewJitter(host, t.name)
	base := context.WithoutCancel(ctx)
	t.runCtx, t.runCancel = context.WithCancelCause(base)
	t.bgCtx, t.bgCancel = context.WithCancel(base)
	t.state = runtime.StateRunning

	c := newTopicCoord(t)
	t.wg.Add(5)
	go c.run()
	go t.pollLoop(t.bgCtx)
	go t.renewLoop(t.bgCtx)
	go t.checkpointLoop(t.bgCtx)
	go t.refreshLoop(t.bgCtx)
	t.wg.Add(1)
	go t.seekLoop(t.bgCtx)
	for _, s := range t.subs {
		t.wg.Add(1)
		go t.pauseLoop(t.bgCtx, s)
	}
	for _, s := range t.subs {
		t.wg.Add(1)
		go t.ledgerLoop(t.bgCtx, s)
	}
	if _, ok := t.cfg.Leases.(broker.BatchRenewer); !ok {
		t.log.Warn("broker lacks optional capabilities", "subscription", t.name, "missing", "broker.BatchRenewer",
			"costs", "broker.BatchRenewer: one round trip per held lease every RenewEvery instead of one for all")
	}
	t.log.Info("topic subscriptions started", "subscriptions", t.subNames())
	return nil
}

func (t *Consumer) subNames() []string {
	out := make([]string, len(t.subs))
	for i, s := range t.subs {
		out[i] = s.cfg.Name
	}
	return out
}

// AwaitStarted waits until the subscriptions have joined. It returns
// ctx's error when ctx ends first (the join goes on), and ErrTopicStopped
// when Stop was called before the join succeeded.
func (t *Consumer) AwaitStarted(ctx context.Context) error {
	select {
	case <-t.started:
		return nil
	case <-t.stopping:
		select {
		case <-t.started:
			return nil
		default:
			return ErrTopicStopped
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop hands off every held partition: it stops reading, drains the
// lanes (up to HandoffTimeout), saves every checkpoint and releases the
// lease. When ctx ends first the handlers are cancelled, nothing more is
// saved (leases then expire) and Stop returns ctx's error once the
// goroutines have returned. Stopping twice, or before Start, does nothing.
func (t *Consumer) Stop(ctx context.Context) error {
	t.mu.Lock()
	switch t.state {
	case runtime.StateNew, runtime.StateStopped:
		t.mu.Unlock()
		return nil
	case runtime.StateRunning, runtime.StateFailed:
		t.state = runtime.StateStopping
	}
	if t.join != runtime.JoinFailed {
		t.join = runtime.JoinLeaving
	}
	t.mu.Unlock()
	t.stopOnce.Do(func() { close(t.stopping) })

	var err error
	select {
	case <-t.coordDone:
	case <-ctx.Done():
		err = ctx.Err()
		t.runCancel(errHardStop)
		<-t.coordDone
	}
	t.bgCancel()
	t.wg.Wait()
	t.runCancel(errHardStop)
	t.reader.Close()

	t.mu.Lock()
	if t.state == runtime.StateStopping {
		t.state = runtime.StateStopped
		t.stopErr = err
		if t.join != runtime.JoinFailed {
			t.join = runtime.JoinLeft
		}
	}
	t.mu.Unlock()
	return err
}

// abandon stops everything at once without handing anything off, saving
// or releasing: what a crash leaves behind (tests only).
func (t *Consumer) abandon() {
	t.mu.Lock()
	if t.state != runtime.StateRunning && t.state != runtime.StateFailed {
		t.mu.Unlock()
		return
	}
	t.state = runtime.StateStopping
	t.mu.Unlock()
	t.runCancel(errAbandoned)
	t.stopOnce.Do(func() { close(t.stopping) })
	<-t.coordDone
	t.bgCancel()
	t.wg.Wait()
	t.reader.Close()
	t.mu.Lock()
	t.state = runtime.StateStopped
	t.join = runtime.JoinLeft
	t.mu.Unlock()
}

// JoinState is where the subscriptions are in their life.
func (t *Consumer) JoinState() runtime.JoinState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.join
}

// JoinFailures counts the failed join attempts so far.
func (t *Consumer) JoinFailures() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.joinFailures
}

// LastJoinError is the error of the latest failed join attempt (nil
// before any failed); it is kept after the join succeeds.
func (t *Consumer) LastJoinError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastJoinErr
}

// Err returns the fatal errors of the subscriptions, joined; nil when
// none failed.
func (t *Consumer) Err() error {
	var errs []error
	for _, s := range t.subs {
		if err := s.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Held returns the partitions held now with their lease generations.
func (t *Consumer) Held() map[int32]int64 {
	t.partsMu.RLock()
	defer t.partsMu.RUnlock()
	out := make(map[int32]int64, len(t.parts))
	for p, tp := range t.parts {
		if !tp.lease.lost.Load() {
			out[p] = tp.lease.gen
		}
	}
	return out
}

// BackingOff returns the (subscription, partition) pairs backing off
// after a systemic failure, as "subscription/partition", sorted.
func (t *Consumer) BackingOff() []string {
	var out []string
	for _, tp := range t.heldParts() {
		tp.mu.Lock()
		for _, sp := range tp.subs {
			if sp.backingOff {
				out = append(out, sp.sr.cfg.Name+"/"+strconv.Itoa(int(tp.p)))
			}
		}
		tp.mu.Unlock()
	}
	sort.Strings(out)
	return out
}

// Throttled returns the partitions whose fetching is stopped because the
// in-flight windows of the subscriptions reading them are full, ascending.
func (t *Consumer) Throttled() []int32 {
	var out []int32
	for _, tp := range t.heldParts() {
		tp.mu.Lock()
		if tp.fetchPaused && !tp.closed {
			out = append(out, tp.p)
		}
		tp.mu.Unlock()
	}
	slices.Sort(out)
	return out
}

// heldParts snapshots the held partitions in ascending order.
func (t *Consumer) heldParts() []*topicPart {
	t.partsMu.RLock()
	out := make([]*topicPart, 0, len(t.parts))
	for _, tp := range t.parts {
		out = append(out, tp)
	}
	t.partsMu.RUnlock()
	slices.SortFunc(out, func(a, b *topicPart) int { return int(a.p) - int(b.p) })
	return out
}

func (t *Consumer) heldPart(p int32) *topicPart {
	t.partsMu.RLock()
	defer t.partsMu.RUnlock()
	return t.parts[p]
}

// Status is a snapshot for the node's status record (no I/O). Held lists
// every subscription of every held partition (they share its lease);
// BackingOff entries are "subscription/partition", Paused (an operator's)
// "subscription/aggregate", Throttled entries partition numbers.
func (t *Consumer) Status() runtime.SubscriptionStatus {
	t.mu.Lock()
	st := runtime.SubscriptionStatus{Name: t.name, Source: source.Kafka, State: t.stateLocked(), Err: t.fatalErr}
	t.mu.Unlock()
	st.Held = []runtime.HeldPartition{}
	parked := 0
	for _, tp := range t.heldParts() {
		if tp.lease.lost.Load() {
			continue
		}
		tp.mu.Lock()
		for _, sp := range tp.subs {
			st.Held = append(st.Held, runtime.HeldPartition{Subscription: sp.sr.cfg.Name, Source: source.Kafka, Topic: t.cfg.Topic,
				Partition: strconv.Itoa(int(tp.p)), Generation: tp.lease.gen})
			parked += len(sp.parked)
		}
		tp.mu.Unlock()
	}
	st.BackingOff = t.BackingOff()
	if st.BackingOff == nil {
		st.BackingOff = []string{}
	}
	st.Throttled = []string{}
	for _, p := range t.Throttled() {
		st.Throttled = append(st.Throttled, strconv.Itoa(int(p)))
	}
	st.Parked = parked
	st.Paused = []string{} // "subscription/aggregate" (pause.go)
	for _, s := range t.subs {
		for _, agg := range s.Paused() {
			st.Paused = append(st.Paused, s.cfg.Name+"/"+agg)
		}
	}
	st.Counters = t.Counters()
	return st
}

// stateLocked is the reported state: running only once joined, since
// before that nothing is handled, and while the brokers answer (t.mu
// held).
func (t *Consumer) stateLocked() runtime.SubscriptionState {
	if t.state != runtime.StateRunning {
		return t.state
	}
	if t.join == runtime.JoinJoining {
		if t.lastJoinErr != nil {
			return runtime.StateUnavailable
		}
		return runtime.StateJoining
	}
	if r, ok := t.cfg.Source.(reachability); ok && r.Reachable() != nil {
		return runtime.StateUnavailable
	}
	return runtime.StateRunning
}

// reachability is a Source that can tell, without I/O, whether its
// brokers answer (*kafkasource.Source.Reachable): after the join, an
// outage shows only in the reader's traffic (Poll keeps waiting), and a
// subscription that cannot fetch is not running.
type reachability interface {
	Reachable() error
}

// Members is the status of each subscription of the topic under its own
// name, in configuration order: its held partitions (shared with the
// others), its partitions backing off (numbers), the aggregates an
// operator's pause holds (Paused), its parked aggregates, its
// counters, and the topic's state, or failed when that subscription
// stopped on a fatal error. Operators name subscriptions as configured,
// so reports per subscription (the node's metrics) read these rather
// than Status's single "topic:<topic>" entry.
func (t *Consumer) Members() []runtime.SubscriptionStatus {
	t.mu.Lock()
	state := t.stateLocked()
	t.mu.Unlock()
	throttled := []string{}
	for _, p := range t.Throttled() {
		throttled = append(throttled, strconv.Itoa(int(p)))
	}
	out := make([]runtime.SubscriptionStatus, len(t.subs))
	index := make(map[*Runtime]int, len(t.subs))
	for i, s := range t.subs {
		index[s] = i
		counters := t.c.snapshot() // the topic's own (assigned, joins): shared
		for k, v := range s.Counters() {
			counters[k] += v
		}
		out[i] = runtime.SubscriptionStatus{Name: s.cfg.Name, Source: source.Kafka, State: state,
			Held: []runtime.HeldPartition{}, BackingOff: []string{}, Throttled: throttled, Counters: counters}
		out[i].Paused = s.Paused() // aggregates (pause.go)
		if err := s.Err(); err != nil {
			out[i].State, out[i].Err = runtime.StateFailed, err
		}
	}
	for _, tp := range t.heldParts() {
		if tp.lease.lost.Load() {
			continue
		}
		tp.mu.Lock()
		for _, sp := range tp.subs {
			m := &out[index[sp.sr]]
			m.Held = append(m.Held, runtime.HeldPartition{Subscription: sp.sr.cfg.Name, Source: source.Kafka, Topic: t.cfg.Topic,
				Partition: tp.pstr, Generation: tp.lease.gen})
			m.Parked += len(sp.parked)
			if sp.backingOff {
				m.BackingOff = append(m.BackingOff, tp.pstr)
			}
		}
		tp.mu.Unlock()
	}
	return out
}

// Counters returns the counters of every subscription, summed, with the
// topic's own.
func (t *Consumer) Counters() map[string]int64 {
	m := t.c.snapshot()
	for _, s := range t.subs {
		for k, v := range s.Counters() {
			m[k] += v
		}
	}
	return m
}

// sleep waits d on the clock; false when ctx ended first.
func (t *Consumer) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	return clock.Sleep(ctx, t.clk, d)
}

// Causes the partitions' contexts end with.
var (
	errHandoff   = errors.New("runtime: partition handed off")
	errHardStop  = errors.New("runtime: stop deadline passed")
	errAbandoned = errors.New("runtime: abandoned")
)
