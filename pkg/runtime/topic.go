package runtime

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
	"sync/atomic"
	"time"

	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
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

// TopicSubscriptions runs the subscriptions of one Kafka topic on one
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
type TopicSubscriptions struct {
	cfg  TopicConfig
	name string
	subs []*SubscriptionRuntime

	// Derived from cfg: the aggregate is the record key, and the identity
	// headers (kafkasource.IdentityFrom's defaults filled in).
	keyAggregate            bool
	idHeader, versionHeader string
	idPathKey               []byte // `"<first key of the id path>"`

	// Set by Start.
	host   Host
	clk    clock.Clock
	log    *slog.Logger
	obs    *Observer
	node   string
	jit    *jitter // the waits' random source, seeded per node
	reader *kafkasource.Reader

	mu           sync.Mutex
	state        SubscriptionState
	join         JoinState
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
	// renewGate, when set (tests only), is called before every renewal
	// round; blocking in it stalls renewals.
	renewGate func(ctx context.Context)
}

var _ Subscription = (*TopicSubscriptions)(nil)

// SubscriptionRuntime is one subscription of a topic on this node: its
// handler, dedup memory, counters and fatal error.
type SubscriptionRuntime struct {
	t   *TopicSubscriptions
	cfg TopicSubscription

	failed atomic.Bool
	mu     sync.Mutex
	err    error
	dedup  map[int32]*dedupMemory
	// ledgerReads counts the ledger polls' ListParked calls, each taking
	// its number before it starts: the logical clock reconcile judges a
	// list's age by (see parkState.seen).
	ledgerReads atomic.Int64
	// dedupGen is the lease generation each partition's dedup memory was
	// last used under (dedupFor).
	dedupGen map[int32]int64

	c subCounters

	// pause is the subscription's operators' pauses (topic_pause.go).
	pause topicPause
}

// NewTopicSubscriptions returns the subscriptions of cfg.Topic for one
// node. It does no I/O.
func NewTopicSubscriptions(cfg TopicConfig) (*TopicSubscriptions, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := &TopicSubscriptions{
		cfg:       cfg,
		name:      "topic:" + cfg.Topic,
		state:     StateNew,
		join:      JoinJoining,
		started:   make(chan struct{}),
		stopping:  make(chan struct{}),
		coordDone: make(chan struct{}),
		parts:     make(map[int32]*topicPart),
		acquired:  make(map[int32]*topicLease),
		events:    make(chan topicEvent, 64),
	}
	for _, sc := range cfg.Subscriptions {
		t.subs = append(t.subs, &SubscriptionRuntime{t: t, cfg: sc, dedup: make(map[int32]*dedupMemory), dedupGen: make(map[int32]int64)})
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
func (t *TopicSubscriptions) Name() string { return t.name }

// Topic is the topic read.
func (t *TopicSubscriptions) Topic() string { return t.cfg.Topic }

// Config returns the validated configuration, defaults filled in.
func (t *TopicSubscriptions) Config() TopicConfig { return t.cfg }

// Subscription returns the runtime of the named subscription, or nil.
func (t *TopicSubscriptions) Subscription(name string) *SubscriptionRuntime {
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
func (t *TopicSubscriptions) Start(ctx context.Context, host Host) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != StateNew {
		return errors.New("runtime: topic subscriptions already started")
	}
	if want := host.Service() + "|topic:" + t.cfg.Topic; t.cfg.LeaseGroup.String() != want {
		return fmt.Errorf("runtime: topic %q: lease group %q is not the service's %q", t.cfg.Topic, t.cfg.LeaseGroup.String(), want)
	}
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
	t.jit = newJitter(host, t.name)
	base := context.WithoutCancel(ctx)
	t.runCtx, t.runCancel = context.WithCancelCause(base)
	t.bgCtx, t.bgCancel = context.WithCancel(base)
	t.state = StateRunning

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
	t.log.Info("topic subscriptions started", "subscriptions", t.subNames())
	return nil
}

func (t *TopicSubscriptions) subNames() []string {
	out := make([]string, len(t.subs))
	for i, s := range t.subs {
		out[i] = s.cfg.Name
	}
	return out
}

// AwaitStarted waits until the subscriptions have joined. It returns
// ctx's error when ctx ends first (the join goes on), and ErrTopicStopped
// when Stop was called before the join succeeded.
func (t *TopicSubscriptions) AwaitStarted(ctx context.Context) error {
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
func (t *TopicSubscriptions) Stop(ctx context.Context) error {
	t.mu.Lock()
	switch t.state {
	case StateNew, StateStopped:
		t.mu.Unlock()
		return nil
	case StateRunning, StateFailed:
		t.state = StateStopping
	}
	if t.join != JoinFailed {
		t.join = JoinLeaving
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
	if t.state == StateStopping {
		t.state = StateStopped
		t.stopErr = err
		if t.join != JoinFailed {
			t.join = JoinLeft
		}
	}
	t.mu.Unlock()
	return err
}

// abandon stops everything at once without handing anything off, saving
// or releasing: what a crash leaves behind (tests only).
func (t *TopicSubscriptions) abandon() {
	t.mu.Lock()
	if t.state != StateRunning && t.state != StateFailed {
		t.mu.Unlock()
		return
	}
	t.state = StateStopping
	t.mu.Unlock()
	t.runCancel(errAbandoned)
	t.stopOnce.Do(func() { close(t.stopping) })
	<-t.coordDone
	t.bgCancel()
	t.wg.Wait()
	t.reader.Close()
	t.mu.Lock()
	t.state = StateStopped
	t.join = JoinLeft
	t.mu.Unlock()
}

// JoinState is where the subscriptions are in their life.
func (t *TopicSubscriptions) JoinState() JoinState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.join
}

// JoinFailures counts the failed join attempts so far.
func (t *TopicSubscriptions) JoinFailures() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.joinFailures
}

// LastJoinError is the error of the latest failed join attempt (nil
// before any failed); it is kept after the join succeeds.
func (t *TopicSubscriptions) LastJoinError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastJoinErr
}

// Err returns the fatal errors of the subscriptions, joined; nil when
// none failed.
func (t *TopicSubscriptions) Err() error {
	var errs []error
	for _, s := range t.subs {
		if err := s.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Held returns the partitions held now with their lease generations.
func (t *TopicSubscriptions) Held() map[int32]int64 {
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

// Paused returns the (subscription, partition) pairs paused by a
// systemic failure, as "subscription/partition", sorted.
func (t *TopicSubscriptions) Paused() []string {
	var out []string
	for _, tp := range t.heldParts() {
		tp.mu.Lock()
		for _, sp := range tp.subs {
			if sp.paused {
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
func (t *TopicSubscriptions) Throttled() []int32 {
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
func (t *TopicSubscriptions) heldParts() []*topicPart {
	t.partsMu.RLock()
	out := make([]*topicPart, 0, len(t.parts))
	for _, tp := range t.parts {
		out = append(out, tp)
	}
	t.partsMu.RUnlock()
	slices.SortFunc(out, func(a, b *topicPart) int { return int(a.p) - int(b.p) })
	return out
}

func (t *TopicSubscriptions) heldPart(p int32) *topicPart {
	t.partsMu.RLock()
	defer t.partsMu.RUnlock()
	return t.parts[p]
}

// Status is a snapshot for the node's status record (no I/O). Held lists
// every subscription of every held partition (they share its lease);
// Paused entries are "subscription/partition", Throttled entries partition
// numbers.
func (t *TopicSubscriptions) Status() SubscriptionStatus {
	t.mu.Lock()
	st := SubscriptionStatus{Name: t.name, Source: SourceKafka, State: t.stateLocked(), Err: t.fatalErr}
	t.mu.Unlock()
	st.Held = []HeldPartition{}
	parked := 0
	for _, tp := range t.heldParts() {
		if tp.lease.lost.Load() {
			continue
		}
		tp.mu.Lock()
		for _, sp := range tp.subs {
			st.Held = append(st.Held, HeldPartition{Subscription: sp.sr.cfg.Name, Source: SourceKafka, Topic: t.cfg.Topic,
				Partition: strconv.Itoa(int(tp.p)), Generation: tp.lease.gen})
			parked += len(sp.parked)
		}
		tp.mu.Unlock()
	}
	st.Paused = t.Paused()
	if st.Paused == nil {
		st.Paused = []string{}
	}
	st.Throttled = []string{}
	for _, p := range t.Throttled() {
		st.Throttled = append(st.Throttled, strconv.Itoa(int(p)))
	}
	st.Parked = parked
	st.OperatorPaused = []string{} // "subscription/aggregate" (topic_pause.go)
	for _, s := range t.subs {
		for _, agg := range s.OperatorPaused() {
			st.OperatorPaused = append(st.OperatorPaused, s.cfg.Name+"/"+agg)
		}
	}
	st.Counters = t.Counters()
	return st
}

// stateLocked is the reported state: running only once joined, since
// before that nothing is handled, and while the brokers answer (t.mu
// held).
func (t *TopicSubscriptions) stateLocked() SubscriptionState {
	if t.state != StateRunning {
		return t.state
	}
	if t.join == JoinJoining {
		if t.lastJoinErr != nil {
			return StateUnavailable
		}
		return StateJoining
	}
	if r, ok := t.cfg.Source.(reachability); ok && r.Reachable() != nil {
		return StateUnavailable
	}
	return StateRunning
}

// reachability is a TopicSource that can tell, without I/O, whether its
// brokers answer (*kafkasource.Source.Reachable): after the join, an
// outage shows only in the reader's traffic (Poll keeps waiting), and a
// subscription that cannot fetch is not running.
type reachability interface {
	Reachable() error
}

// Members is the status of each subscription of the topic under its own
// name, in configuration order: its held partitions (shared with the
// others), its paused partitions (numbers), its parked aggregates, its
// counters, and the topic's state, or failed when that subscription
// stopped on a fatal error. Operators name subscriptions as configured,
// so reports per subscription (the node's metrics) read these rather
// than Status's single "topic:<topic>" entry.
func (t *TopicSubscriptions) Members() []SubscriptionStatus {
	t.mu.Lock()
	state := t.stateLocked()
	t.mu.Unlock()
	throttled := []string{}
	for _, p := range t.Throttled() {
		throttled = append(throttled, strconv.Itoa(int(p)))
	}
	out := make([]SubscriptionStatus, len(t.subs))
	index := make(map[*SubscriptionRuntime]int, len(t.subs))
	for i, s := range t.subs {
		index[s] = i
		counters := t.c.snapshot() // the topic's own (assigned, joins): shared
		for k, v := range s.Counters() {
			counters[k] += v
		}
		out[i] = SubscriptionStatus{Name: s.cfg.Name, Source: SourceKafka, State: state,
			Held: []HeldPartition{}, Paused: []string{}, Throttled: throttled, Counters: counters}
		out[i].OperatorPaused = s.OperatorPaused() // aggregates (topic_pause.go)
		if err := s.Err(); err != nil {
			out[i].State, out[i].Err = StateFailed, err
		}
	}
	for _, tp := range t.heldParts() {
		if tp.lease.lost.Load() {
			continue
		}
		tp.mu.Lock()
		for _, sp := range tp.subs {
			m := &out[index[sp.sr]]
			m.Held = append(m.Held, HeldPartition{Subscription: sp.sr.cfg.Name, Source: SourceKafka, Topic: t.cfg.Topic,
				Partition: tp.pstr, Generation: tp.lease.gen})
			m.Parked += len(sp.parked)
			if sp.paused {
				m.Paused = append(m.Paused, tp.pstr)
			}
		}
		tp.mu.Unlock()
	}
	return out
}

// Counters returns the counters of every subscription, summed, with the
// topic's own.
func (t *TopicSubscriptions) Counters() map[string]int64 {
	m := t.c.snapshot()
	for _, s := range t.subs {
		for k, v := range s.Counters() {
			m[k] += v
		}
	}
	return m
}

// Retry asks for the parked aggregate of subscription sub to be handled
// again from its parked offset: the partition is re-scanned from there
// for the aggregate's records, which are handled in order before its
// later ones. When this node holds the aggregate's partition it does so
// itself and returns once the records are queued (ErrUnrecoverable,
// wrapped, when the topic no longer retains the parked offset: the entry
// is then marked unrecoverable and only Skip resolves it). Otherwise it
// records the request in the ledger for whichever node holds (or will
// hold) the partition. An aggregate parked on several partitions (an
// aggregate from a header or a JSON path) has an entry on each: Retry
// acts on every one, and returns their errors joined. ErrNotParked when
// there is no such entry.
func (t *TopicSubscriptions) Retry(ctx context.Context, sub, aggregate string) error {
	return t.operate(ctx, ActionRetry, sub, aggregate)
}

// Skip resolves the parked aggregate of subscription sub without handling
// its parked records; its later records are handled again. Like Retry it
// acts at once when this node holds the partition and otherwise records
// the request for the owner, on every partition the aggregate is parked
// on. ErrNotParked when there is no such entry.
func (t *TopicSubscriptions) Skip(ctx context.Context, sub, aggregate string) error {
	return t.operate(ctx, ActionSkip, sub, aggregate)
}

func (t *TopicSubscriptions) operate(ctx context.Context, action Action, sub, aggregate string) error {
	sr := t.Subscription(sub)
	if sr == nil {
		return fmt.Errorf("%w: %q on topic %q", ErrUnknownSubscription, sub, t.cfg.Topic)
	}
	t.mu.Lock()
	state := t.state
	t.mu.Unlock()
	if state != StateRunning {
		return ErrTopicStopped
	}
	entries, err := t.entriesOf(ctx, sub, aggregate)
	if err != nil {
		return err
	}
	// An aggregate parked on several partitions has an entry (a parked
	// head) on each: the action is carried out on every one.
	var errs []error
	for _, e := range entries {
		if err := t.operateOn(ctx, sr, action, e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// entriesOf reads the entries of aggregate: its only one, or one per
// partition it is parked on. ErrNotParked when there is none.
func (t *TopicSubscriptions) entriesOf(ctx context.Context, sub, aggregate string) ([]Parked, error) {
	e, err := t.cfg.Ledger.GetParked(ctx, sub, "", aggregate)
	var amb *AmbiguousParkedError
	if !errors.As(err, &amb) {
		if err != nil {
			return nil, err
		}
		return []Parked{e}, nil
	}
	var out []Parked
	for _, p := range amb.Partitions {
		e, err := t.cfg.Ledger.GetParked(ctx, sub, p, aggregate)
		if errors.Is(err, ErrNotParked) {
			continue // resolved meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("runtime: %q of %q: %w", aggregate, sub, ErrNotParked)
	}
	return out, nil
}

// operateOn carries out action on entry e: here when this node holds its
// partition, otherwise by recording the request for the owner.
func (t *TopicSubscriptions) operateOn(ctx context.Context, sr *SubscriptionRuntime, action Action, e Parked) error {
	if e.Source != SourceKafka || e.Topic != t.cfg.Topic {
		return fmt.Errorf("runtime: %s %q of %q: the entry is not of topic %q (source %s, topic %q)",
			action, e.Aggregate, e.Subscription, t.cfg.Topic, e.Source, e.Topic)
	}
	if p, perr := strconv.ParseInt(e.Partition, 10, 32); perr == nil {
		if tp := t.heldPart(int32(p)); tp != nil {
			if err, handled := tp.operate(ctx, sr, action, e); handled {
				return err
			}
		}
	}
	// Not ours (or not any more): the owner acts on the request.
	if action == ActionRetry {
		return t.cfg.Ledger.RequestRetry(ctx, e.Subscription, e.Partition, e.Aggregate, t.node)
	}
	return t.cfg.Ledger.RequestSkip(ctx, e.Subscription, e.Partition, e.Aggregate, "", t.node)
}

// Name is the subscription's name.
func (s *SubscriptionRuntime) Name() string { return s.cfg.Name }

// Err is the fatal error that stopped the subscription, or nil.
func (s *SubscriptionRuntime) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Counters returns the subscription's counters (see the Counter* names).
func (s *SubscriptionRuntime) Counters() map[string]int64 { return s.c.snapshot() }

// fail stops the subscription on a fatal handler error and reports it to
// the node. Other subscriptions of the topic go on.
func (s *SubscriptionRuntime) fail(err error) {
	s.mu.Lock()
	first := s.err == nil
	if first {
		s.err = err
	}
	s.mu.Unlock()
	if !first {
		return
	}
	s.failed.Store(true)
	t := s.t
	t.log.Error("fatal handler failure: stopping the subscription", "subscription", s.cfg.Name, "err", err)
	all := true
	for _, o := range t.subs {
		all = all && o.failed.Load()
	}
	t.mu.Lock()
	if t.fatalErr == nil {
		t.fatalErr = err
	}
	if all {
		t.join = JoinFailed
		if t.state == StateRunning {
			t.state = StateFailed
		}
	}
	t.mu.Unlock()
	t.host.Fail(t.name, fmt.Errorf("subscription %q: %w", s.cfg.Name, err))
	// Wake the partitions so that lanes blocked on this subscription let
	// the shared reader move on for the others.
	for _, tp := range t.heldParts() {
		tp.mu.Lock()
		tp.cond.Broadcast()
		tp.mu.Unlock()
		tp.kickFetch()
	}
}

// dedupOf returns the subscription's dedup memory of partition p. It
// outlives the partition's lease, so a partition that comes back to this
// node drops what it handled before.
// dedupFor readies partition p's dedup memory for a lease of generation
// gen. When another node held the partition since this node last did
// (gen is not the next generation), the memory starts empty: the other
// owner may have read the partition again from a checkpoint below what
// this node handled (a handoff leaves the records it did not start, and
// a checkpoint at their low watermark), and dropping the records this
// node remembers would then skip them after that replay, a gap in the
// aggregate's order.
func (s *SubscriptionRuntime) dedupFor(p int32, gen int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.dedupGen[p]; ok && last != gen-1 {
		delete(s.dedup, p)
	}
	s.dedupGen[p] = gen
}

func (s *SubscriptionRuntime) dedupOf(p int32) *dedupMemory {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dedup[p]
	if d == nil {
		d = newDedupMemory(s.t.cfg.DedupSize)
		s.dedup[p] = d
	}
	return d
}

// subCounters are one subscription's counters.
type subCounters struct {
	processed, failed, parked, resolved, duplicates, skipped, lost, catchUps counter
}

func (c *subCounters) snapshot() map[string]int64 {
	return map[string]int64{
		CounterProcessed:  c.processed.Load(),
		CounterFailed:     c.failed.Load(),
		CounterParked:     c.parked.Load(),
		CounterResolved:   c.resolved.Load(),
		CounterDuplicates: c.duplicates.Load(),
		CounterSkipped:    c.skipped.Load(),
		CounterLost:       c.lost.Load(),
		CounterCatchUps:   c.catchUps.Load(),
	}
}

// topicCounters are the topic's own counters (leases, checkpoints).
type topicCounters struct {
	acquired, released, leaseLost, untrusted, contested, renewals counter
	checkpoints, joinFailures, assigned, held                     counter
}

func (c *topicCounters) snapshot() map[string]int64 {
	return map[string]int64{
		CounterAcquired:     c.acquired.Load(),
		CounterReleased:     c.released.Load(),
		CounterLeaseLost:    c.leaseLost.Load(),
		CounterUntrusted:    c.untrusted.Load(),
		CounterContested:    c.contested.Load(),
		CounterRenewals:     c.renewals.Load(),
		CounterCheckpoints:  c.checkpoints.Load(),
		CounterJoinFailures: c.joinFailures.Load(),
		CounterAssigned:     c.assigned.Load(),
		CounterHeld:         c.held.Load(),
	}
}

// sleep waits d on the clock; false when ctx ended first.
func (t *TopicSubscriptions) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := t.clk.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C():
		return true
	}
}

// Causes the partitions' contexts end with.
var (
	errHandoff   = errors.New("runtime: partition handed off")
	errHardStop  = errors.New("runtime: stop deadline passed")
	errAbandoned = errors.New("runtime: abandoned")
)
