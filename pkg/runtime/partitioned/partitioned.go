package partitioned

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// Subscription is a Redis partitioned subscription: the consumer side of
// Protean's sequential_by. Each partition key (with its streams in every
// category of the subscription) is processed by exactly one node at a
// time, in order, under a fenced lease; keys are spread over the live
// nodes of the service by rendezvous hashing. See New for the
// life of a partition and docs/decisions/0004-idle-partitions.md for why
// idle partitions hold no lease.
type Subscription struct {
	cfg    Config
	layout broker.Layout

	// Optional broker capabilities, found by type assertion.
	waiter       broker.EntryWaiter // nil unless the broker also tails streams
	tailer       broker.StreamTailer
	pwatch       broker.PartitionWatcher
	batchRenewer broker.BatchRenewer
	ackReader    broker.AckReader
	pinner       broker.ReaderPinner
	// waitReader, with waiter, lets a held, drained partition wait and
	// read in one round trip (blocked.go); blocked bounds how many do
	// at once (Workers).
	waitReader broker.WaitReader
	blocked    chan struct{}
	// readers are the free pinned readers (pinner set), one per worker
	// slot at most (reader.go).
	readers chan *slotReader
	// counter and appends find keys other publishers add (nil: the
	// discovery scan every DiscoverEvery does).
	counter broker.PartitionCounter
	appends broker.AppendWatcher
	// appendEvents is set while append events arrive (AppendWatcher):
	// the index poll then slows down.
	appendEvents atomic.Bool
	// announced says whether every category's appends are announced
	// (nil without an AppendWatcher); with checker, the wait loops then
	// check rather than wait (announce.go).
	announced *announceState
	checker   broker.EntryChecker
	// indexAtAcquire names the categories whose announced new keys this
	// node takes on with an acquisition that checks the index, rather
	// than after a check of their own (evCandidates).
	indexAtAcquire map[string]bool
	// appendBatches numbers the batches of announced names, across
	// categories (evSignal.batch).
	appendBatches atomic.Uint64
	// lastScanned is the number of keys the last complete scan found,
	// which spaces the scans a changed index brings forward.
	lastScanned atomic.Int64

	// Set by Start.
	host runtime.Host
	clk  clock.Clock
	log  *slog.Logger
	obs  *runtime.Observer
	node string
	jit  *backoff.Jitter // the waits' random source, seeded per node

	mu        sync.Mutex
	state     runtime.SubscriptionState
	fatalErr  error
	stopOnce  sync.Once
	stopping  chan struct{} // closed when a graceful stop begins
	coordDone chan struct{} // closed when the coordinator (and so every worker) is done

	runCtx    context.Context // parent of the workers' contexts; cancelled by a hard stop
	runCancel context.CancelFunc
	bgCtx     context.Context // background loops; cancelled when the coordinator exits
	bgCancel  context.CancelFunc
	wg        sync.WaitGroup

	events chan event
	sem    chan struct{} // the worker limit
	// live is the live path (live.go), nil when the broker
	// cannot batch; ahead bounds the partitions on it.
	live  *liveIO
	ahead chan struct{}
	// slotWaiters counts workers waiting for a slot: a worker that keeps
	// finding entries gives its slot up between two rounds while any
	// waits, so that Workers hot partitions cannot starve the others.
	slotWaiters atomic.Int64
	// rediscover asks the discovery loop for a scan now (a wake-up
	// subscription was just (re)established: signals may have been lost).
	rediscover chan struct{}

	// ledgerReads numbers the ledger polls' ListParked calls, each taken
	// before the call starts: the logical clock ledgerList judges a
	// list's age by (part.ledgerSeen).
	ledgerReads atomic.Int64

	leases     leaseTable
	assigned   assignedSet
	watch      *watchLanes
	backingOff backingOffSet
	pauses     *pauseState // operators' pauses (pause.go)
	c          partCounters

	// seeker and seeks carry out operators' seek requests
	// (seek.go); seeker is nil when the broker cannot.
	seeker broker.PartitionSeeker
	seeks  seekMarks

	// renewGate, when set (tests only, see export_test.go), is called by
	// the renewer before every renewal round; blocking in it stalls
	// renewals.
	renewGate func(ctx context.Context)
}

var _ runtime.Subscription = (*Subscription)(nil)

// New returns a partitioned subscription. It does no I/O.
//
// The life of a partition key K on a node, once HRW gives K to the node:
//
//	         acquire lease (new generation), check the ledger,
//	watched ─────reclaim earlier generations' pending────────▶ active
//	(no lease)◀──────── idle for IdleAfter: release ───────── (leased)
//	   ▲  │                                                    │  │
//	   │  │ operator retry/skip                       N failed │  │ HRW gives K
//	   │  ▼                                          attempts  │  │ to another node
//	 parked ◀────────────── park (fenced), release ────────────┘  ▼
//	(no lease)                                         finish in flight, ack,
//	                                                   release, forget K
//
// While active, the worker reads pending entries before new ones and the
// main lanes before the backfill lanes, in batches of BatchSize, calls
// the handler one message at a time, and acks each batch once, all fenced.
// A watched partition costs nothing: the node waits on all watched
// streams at once (broker.EntryWaiter) and on publish signals
// (broker.PartitionWatcher).
func New(cfg Config) (*Subscription, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Subscription{
		cfg:       cfg,
		layout:    cfg.Broker.Layout(),
		state:     runtime.StateNew,
		stopping:  make(chan struct{}),
		coordDone: make(chan struct{}),
		events:    make(chan event, 64),
		sem:       make(chan struct{}, cfg.Workers),

		rediscover: make(chan struct{}, 1),
		pauses:     newPauseState(),
	}
	p.watch = newWatchLanes(p.cfg.WaitShards, p.isBackfill)
	w, wok := cfg.Broker.(broker.EntryWaiter)
	t, tok := cfg.Broker.(broker.StreamTailer)
	if wok && tok {
		p.waiter, p.tailer = w, t
		if wr, ok := cfg.Broker.(broker.WaitReader); ok {
			p.waitReader = wr
			p.blocked = make(chan struct{}, cfg.Workers)
		}
	}
	if pw, ok := cfg.Broker.(broker.PartitionWatcher); ok {
		p.pwatch = pw
	}
	if br, ok := cfg.Broker.(broker.BatchRenewer); ok {
		p.batchRenewer = br
	}
	p.seeker, _ = cfg.Broker.(broker.PartitionSeeker)
	p.counter, _ = cfg.Broker.(broker.PartitionCounter)
	p.appends, _ = cfg.Broker.(broker.AppendWatcher)
	if p.appends != nil {
		p.announced = newAnnounceState(cfg.Categories)
		p.checker, _ = cfg.Broker.(broker.EntryChecker)
	}
	if p.live = newLiveIO(cfg.Broker); p.live != nil {
		p.ahead = make(chan struct{}, aheadPerWorker*cfg.Workers)
		if ic, ok := cfg.Broker.(broker.IndexCheckingAcquirer); ok && p.appends != nil {
			p.indexAtAcquire = make(map[string]bool)
			for _, cat := range cfg.Categories {
				p.indexAtAcquire[cat] = ic.AcquireChecksIndex(cat)
			}
		}
	}
	if ar, ok := cfg.Broker.(broker.AckReader); ok {
		p.ackReader = ar
		if rp, ok := cfg.Broker.(broker.ReaderPinner); ok {
			p.pinner = rp
			p.readers = make(chan *slotReader, cfg.Workers)
		}
	}
	return p, nil
}

// Name returns the subscription's name (the consumer group).
func (p *Subscription) Name() string { return p.cfg.Name }

// Config returns the validated configuration, defaults filled in.
func (p *Subscription) Config() Config { return p.cfg }

// Start starts the subscription's goroutines and returns once they run;
// it does no I/O. In the background the subscription first registers its
// group on every category (RegisterGroup, retried with backoff while
// Redis is unreachable: no partition is read before it succeeds, so a
// reap always keeps what the group has not read), then takes partitions
// as the host reports the membership.
func (p *Subscription) Start(ctx context.Context, host runtime.Host) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != runtime.StateNew {
		return errors.New("runtime: partitioned subscription already started")
	}
	p.host = host
	p.clk = host.Clock()
	p.log = host.Logger()
	p.obs = host.Observer()
	p.node = host.NodeID()
	p.jit = backoff.NewJitter(host, p.cfg.Name)
	base := context.WithoutCancel(ctx)
	p.runCtx, p.runCancel = context.WithCancel(base)
	p.bgCtx, p.bgCancel = context.WithCancel(base)
	p.state = runtime.StateRunning

	p.leases.wake = make(chan struct{}, 1) // before any worker adds a lease
	c := newCoordinator(p)
	p.wg.Add(1)
	go c.run()
	p.wg.Add(1)
	go p.registerLoop(p.bgCtx)
	p.wg.Add(1)
	go p.renewLoop(p.bgCtx)
	if p.seeker != nil {
		p.wg.Add(1)
		go p.seekLoop(p.bgCtx)
	}
	p.wg.Add(1)
	go p.trustLoop(p.bgCtx)
	p.wg.Add(1)
	go p.discoverLoop(p.bgCtx)
	p.wg.Add(1)
	go p.ledgerLoop(p.bgCtx)
	p.wg.Add(1)
	go p.pauseLoop(p.bgCtx)
	if p.live != nil {
		for range liveFlushers {
			p.wg.Add(1)
			go p.liveLoop(p.bgCtx)
		}
	}
	if p.waiter != nil {
		// The main lanes' shards share one budget: sharding makes each
		// issue cheaper, not the issues' sum larger.
		var budget, restarts waitBudget
		for _, ws := range p.watch.main {
			p.wg.Add(1)
			go p.waitLoop(p.bgCtx, ws, &budget, &restarts)
		}
		p.wg.Add(1)
		go p.waitLoop(p.bgCtx, p.watch.backfill, new(waitBudget), new(waitBudget))
	}
	if p.pwatch != nil {
		for _, cat := range p.cfg.Categories {
			p.wg.Add(1)
			go p.signalLoop(p.bgCtx, cat)
		}
	}
	if p.counter != nil {
		p.wg.Add(1)
		go p.indexPollLoop(p.bgCtx)
	}
	if p.appends != nil {
		for _, cat := range p.cfg.Categories {
			p.wg.Add(1)
			go p.appendLoop(p.bgCtx, cat)
		}
	}
	warnMissingCapabilities(p.log, p.cfg.Name, p.cfg.Broker)
	p.log.Info("subscription started", "subscription", p.cfg.Name, "categories", p.cfg.Categories,
		"entryWaiter", p.waiter != nil, "partitionWatcher", p.pwatch != nil, "batchRenewer", p.batchRenewer != nil)
	return nil
}

// registerLoop registers the group on every category, retrying with
// backoff, then tells the coordinator that partitions may be read.
func (p *Subscription) registerLoop(ctx context.Context) {
	defer p.wg.Done()
	backoff := backoff.New(100*time.Millisecond, p.cfg.RenewEvery, p.jit)
	for _, cat := range p.cfg.Categories {
		for {
			err := p.cfg.Broker.RegisterGroup(ctx, cat, p.cfg.Name)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			p.log.Warn("registering the group failed; retrying", "subscription", p.cfg.Name, "category", cat, "err", err)
			observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "register group", Err: err})
			if !p.sleep(ctx, backoff.Next()) {
				return
			}
		}
	}
	p.send(evRegistered{})
}

// Stop stops the subscription gracefully: no new message is started,
// in-flight handlers finish, their batches are acked and every lease is
// released. When ctx ends first, the handlers' contexts are cancelled
// (their messages stay pending for the next owner) and Stop returns
// ctx's error once the goroutines have returned. It is idempotent and a
// no-op before Start.
func (p *Subscription) Stop(ctx context.Context) error {
	p.mu.Lock()
	if p.state == runtime.StateNew {
		p.mu.Unlock()
		return nil
	}
	if p.state == runtime.StateRunning {
		p.state = runtime.StateStopping
	}
	p.mu.Unlock()
	p.beginStop()

	var err error
	select {
	case <-p.coordDone:
	case <-ctx.Done():
		err = ctx.Err()
		p.runCancel()
		<-p.coordDone
	}
	p.bgCancel()
	p.wg.Wait()
	p.runCancel()

	p.mu.Lock()
	if p.state == runtime.StateStopping {
		p.state = runtime.StateStopped
	}
	p.mu.Unlock()
	return err
}

func (p *Subscription) beginStop() {
	p.stopOnce.Do(func() { close(p.stopping) })
}

// fail stops the subscription after a fatal handler error.
func (p *Subscription) fail(err error) {
	p.mu.Lock()
	first := p.fatalErr == nil
	if first {
		p.fatalErr = err
		p.state = runtime.StateFailed
	}
	p.mu.Unlock()
	if first {
		p.host.Fail(p.cfg.Name, err)
	}
	p.beginStop()
}

// Err returns the fatal error that stopped the subscription, or nil.
func (p *Subscription) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fatalErr
}

// Status is a snapshot of the subscription (no I/O).
func (p *Subscription) Status() runtime.SubscriptionStatus {
	p.mu.Lock()
	st := runtime.SubscriptionStatus{Name: p.cfg.Name, Source: source.Redis, State: p.state, Err: p.fatalErr}
	p.mu.Unlock()
	st.Held = p.leases.held(p.cfg.Name, p.cfg.Categories)
	st.BackingOff = p.backingOff.list()
	st.Paused = p.pauses.held()
	st.Throttled = []string{}
	st.Parked = int(p.c.parkedNow.Load())
	st.Counters = p.c.snapshot()
	return st
}

// Assigned returns the partition keys rendezvous hashing currently gives
// this node, sorted: the leased ones and the idle ones it watches.
func (p *Subscription) Assigned() []string { return p.assigned.list() }

// assignedSet mirrors the coordinator's assigned keys for readers on
// other goroutines.
type assignedSet struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (s *assignedSet) set(key string, mine bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !mine {
		delete(s.m, key)
		return
	}
	if s.m == nil {
		s.m = make(map[string]struct{})
	}
	s.m[key] = struct{}{}
}

func (s *assignedSet) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return keysOf(s.m)
}

// partCounters are a subscription's counters (see the Counter* names).
type partCounters struct {
	processed, failed, parked, resolved, deadLetters, missing   observe.Counter
	acquired, released, leaseLost, untrusted, contested, reaped observe.Counter
	reads, acks, renewals                                       observe.Counter
	assigned, watched, active, parkedNow                        observe.Counter
}

func (c *partCounters) snapshot() map[string]int64 {
	return map[string]int64{
		runtime.CounterProcessed:   c.processed.Load(),
		runtime.CounterFailed:      c.failed.Load(),
		runtime.CounterParked:      c.parked.Load(),
		runtime.CounterResolved:    c.resolved.Load(),
		runtime.CounterDeadLetters: c.deadLetters.Load(),
		runtime.CounterMissing:     c.missing.Load(),
		runtime.CounterAcquired:    c.acquired.Load(),
		runtime.CounterReleased:    c.released.Load(),
		runtime.CounterLeaseLost:   c.leaseLost.Load(),
		runtime.CounterUntrusted:   c.untrusted.Load(),
		runtime.CounterContested:   c.contested.Load(),
		runtime.CounterReaped:      c.reaped.Load(),
		runtime.CounterReads:       c.reads.Load(),
		runtime.CounterAcks:        c.acks.Load(),
		runtime.CounterRenewals:    c.renewals.Load(),
		runtime.CounterAssigned:    c.assigned.Load(),
		runtime.CounterWatched:     c.watched.Load(),
		runtime.CounterActive:      c.active.Load(),
	}
}

// backingOffSet holds the keys backing off after a systemic failure
// (not an operator's pause, which is pauseState).
type backingOffSet struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (s *backingOffSet) set(key string, on bool) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, was := s.m[key]
	if on == was {
		return false
	}
	if on {
		if s.m == nil {
			s.m = make(map[string]struct{})
		}
		s.m[key] = struct{}{}
	} else {
		delete(s.m, key)
	}
	return true
}

func (s *backingOffSet) list() []string {
	s.mu.Lock()
	out := make([]string, 0, len(s.m))
	for k := range s.m {
		out = append(out, k)
	}
	s.mu.Unlock()
	sort.Strings(out)
	return out
}

// lane is one stream of a partition unit.
type lane struct {
	category string
	stream   string
	backfill bool
}

// lanesOf returns key's streams: the main lanes of every category in
// configuration order, then the backfill lanes.
func (p *Subscription) lanesOf(key string) []lane {
	out := make([]lane, 0, 2*len(p.cfg.Categories))
	for _, c := range p.cfg.Categories {
		out = append(out, lane{category: c, stream: p.layout.Stream(c, key)})
	}
	for _, c := range p.cfg.Categories {
		out = append(out, lane{category: c, stream: p.layout.LaneStream(c, key, p.cfg.BackfillSuffix), backfill: true})
	}
	return out
}

// isBackfill says whether stream is one of key's backfill lanes.
func (p *Subscription) isBackfill(key, stream string) bool {
	for _, c := range p.cfg.Categories {
		if stream == p.layout.LaneStream(c, key, p.cfg.BackfillSuffix) {
			return true
		}
	}
	return false
}

// send delivers an event to the coordinator, or drops it when the
// background loops are stopping (the coordinator is gone then).
func (p *Subscription) send(ev event) bool {
	select {
	case p.events <- ev:
		return true
	case <-p.bgCtx.Done():
		return false
	}
}

func keysOf[M ~map[string]V, V any](m M) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
