package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/placement"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// Subscription is one named consumer a Node runs: a Redis partitioned
// subscription (pkg/runtime/partitioned) or the subscriptions of a Kafka
// topic (pkg/runtime/topic). Implementations must be safe for concurrent
// use.
type Subscription interface {
	// Name is the subscription's name, unique within a node (for Redis,
	// the consumer group).
	Name() string
	// Start starts the subscription's goroutines and returns without
	// waiting for partitions: ownership is settled in the background as
	// host.Members reports the membership. It does no blocking I/O.
	// Starting twice is an error; starting after Stop is an error.
	Start(ctx context.Context, host Host) error
	// Stop finishes the messages in flight, acknowledges them, releases
	// every lease and returns; bounded by ctx (when ctx ends first the
	// handlers' contexts are cancelled and Stop returns ctx's error).
	// Stopping twice, or before Start, is a no-op.
	Stop(ctx context.Context) error
	// Status is a snapshot for the node's status record. It must be fast
	// (no I/O) and safe to call at any time.
	Status() SubscriptionStatus
}

// SubscriptionStatus is one subscription's part of a node's status.
type SubscriptionStatus struct {
	Name   string
	Source source.Kind
	State  SubscriptionState
	// Held are the partitions whose lease the subscription holds now. A
	// Redis partition that is assigned to the node but idle holds no
	// lease (see docs/decisions/0004-idle-partitions.md); Counters
	// "assigned" and "watched" count those.
	Held []HeldPartition
	// BackingOff are the partitions the runtime holds back after a
	// systemic failure; it retries them on its own with a growing wait.
	BackingOff []string
	// Paused are the partitions (a Kafka topic's: the aggregates with
	// records waiting) held by an operator's pause (`protctl pause`,
	// pause.go) until `protctl resume`; never the back-off.
	Paused    []string
	Throttled []string
	Parked    int
	Counters  map[string]int64
	// Err is the fatal error that stopped the subscription, if any.
	Err error
}

// SubscriptionState is where a subscription is in its life.
type SubscriptionState string

// The states, in the words every report uses (the /metrics state label,
// /v1/status; docs/node-config.md lists them). Only running means the
// subscription is handling messages.
const (
	StateNew SubscriptionState = "new"
	// StateJoining: started, taking its share of partitions for the first
	// time, no attempt has failed yet (Kafka topic subscriptions).
	StateJoining SubscriptionState = "joining"
	// StateUnavailable: started, but what it needs cannot be reached, so
	// it handles nothing now: a Kafka topic subscription whose latest join
	// attempt failed (Kafka or Redis down, the topic missing), or one that
	// joined and whose brokers stopped answering since (the source's
	// latest connection attempt or read failed for every broker:
	// kafkasource.Source.Reachable). It keeps retrying and is running
	// again on its own once they answer. internal/admin also reports every
	// subscription unavailable while the node's heartbeats to Redis fail
	// (Node.StoreErr). Its lag is unknown, not 0.
	StateUnavailable SubscriptionState = "unavailable"
	StateRunning     SubscriptionState = "running"
	StateStopping    SubscriptionState = "stopping"
	StateStopped     SubscriptionState = "stopped"
	StateFailed      SubscriptionState = "failed"
)

// Host is what a Node gives the subscriptions it runs (and what a test
// gives a subscription it runs without a node). It is safe for concurrent
// use. The Node's own is not reachable from the Node: only the
// subscription it was given to can report itself failed.
type Host interface {
	Service() string
	NodeID() string
	Clock() clock.Clock
	// Logger is never nil.
	Logger() *slog.Logger
	// Observer may be nil (its methods are nil-safe).
	Observer() *Observer
	// Members returns the live nodes of the service (sorted ids, this node
	// included once it has heartbeated) and a channel that is closed at
	// the next change. nodes is nil until the first membership read.
	Members() (nodes []string, changed <-chan struct{})
	// Fail reports that subscription stopped on a fatal error. It does
	// not block.
	Fail(subscription string, err error)
}

// NodeConfig configures a Node. The zero value of every optional field
// means its default.
type NodeConfig struct {
	// Service groups the nodes that share partitions. Required.
	Service string
	// NodeID names this node in leases (owner:generation) and membership.
	// It must be unique among live nodes of the service. Default:
	// hostname-pid.
	NodeID string
	// AdminAddr is published in the status record for operators.
	AdminAddr string
	// Membership stores heartbeats and status records. Required.
	Membership Membership
	// HeartbeatEvery is the heartbeat (and membership refresh) period.
	// Default: 3s (a 15s lease's renewal period).
	HeartbeatEvery time.Duration
	// MemberTTL is how long a heartbeat keeps the node live. Default:
	// 4 x HeartbeatEvery. Keep MemberTTL + HeartbeatEvery <= lease TTL +
	// renewal period so that a dead node's partitions move within that
	// bound.
	MemberTTL time.Duration
	// Clock is the time source. Default: clock.System().
	Clock clock.Clock
	// JitterSeed seeds the random source the node's subscriptions draw
	// their retry and backoff waits from, so that nodes retrying after a
	// shared outage do not retry in lockstep. Default (0): a seed from
	// crypto/rand, different on every node and every start.
	JitterSeed uint64
	// Logger receives the node's logs. Default: discard.
	Logger *slog.Logger
	// Observer receives events; optional.
	Observer *Observer
}

func (c *NodeConfig) validate() error {
	if c.Service == "" {
		return errors.New("runtime: node config: Service is required")
	}
	if c.Membership == nil {
		return errors.New("runtime: node config: Membership is required")
	}
	if c.NodeID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "node"
		}
		c.NodeID = host + "-" + strconv.Itoa(os.Getpid())
	}
	if c.JitterSeed == 0 {
		c.JitterSeed = backoff.RandomSeed()
	}
	if c.HeartbeatEvery < 0 || c.MemberTTL < 0 {
		return errors.New("runtime: node config: durations must not be negative")
	}
	if c.HeartbeatEvery == 0 {
		c.HeartbeatEvery = 3 * time.Second
	}
	if c.MemberTTL == 0 {
		c.MemberTTL = 4 * c.HeartbeatEvery
	}
	if c.MemberTTL <= c.HeartbeatEvery {
		return fmt.Errorf("runtime: node config: MemberTTL %s must exceed HeartbeatEvery %s", c.MemberTTL, c.HeartbeatEvery)
	}
	if c.Clock == nil {
		c.Clock = clock.System()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Node runs a service's subscriptions on one process: it heartbeats its
// status record through Membership, tells its subscriptions who the live
// members are (they split partitions by rendezvous hashing over them), and
// starts and stops them together.
//
// Life cycle: NewNode does no I/O. Start starts the heartbeat and the
// subscriptions and returns at once (JoinState is joining until the first
// heartbeat succeeds). Stop stops the subscriptions gracefully (their
// leases are released), then leaves the membership so that other nodes
// take over at once. Stop is idempotent and a no-op before Start.
type Node struct {
	cfg  NodeConfig
	subs []Subscription

	startedAt time.Time

	mu        sync.Mutex
	started   bool
	stopped   bool
	stopErr   error
	stopDone  chan struct{}
	join      JoinState
	members   []string
	changed   chan struct{}
	fatal     map[string]error
	lastHBErr error

	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}
	place  nodePlacement // node_placement.go
}

// NewNode returns a node running subs. Subscription names must be
// unique.
func NewNode(cfg NodeConfig, subs ...Subscription) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(subs))
	for _, s := range subs {
		if s == nil {
			return nil, errors.New("runtime: new node: nil subscription")
		}
		if seen[s.Name()] {
			return nil, fmt.Errorf("runtime: new node: duplicate subscription %q", s.Name())
		}
		seen[s.Name()] = true
	}
	return &Node{
		cfg:     cfg,
		subs:    slices.Clone(subs),
		join:    JoinJoining,
		changed: make(chan struct{}),
		fatal:   make(map[string]error),
		kick:    make(chan struct{}, 1),
	}, nil
}

// Service returns the service name.
func (n *Node) Service() string { return n.cfg.Service }

// NodeID returns the node's id.
func (n *Node) NodeID() string { return n.cfg.NodeID }

// nodeHost is the Host a Node gives its subscriptions. It is a type of its
// own, not the Node, so that what only a subscription may do (Fail: report
// itself stopped) is not a method a user of the Node can call.
type nodeHost struct{ n *Node }

var _ Host = nodeHost{}

func (h nodeHost) Service() string      { return h.n.cfg.Service }
func (h nodeHost) NodeID() string       { return h.n.cfg.NodeID }
func (h nodeHost) Clock() clock.Clock   { return h.n.cfg.Clock }
func (h nodeHost) Logger() *slog.Logger { return h.n.cfg.Logger }
func (h nodeHost) Observer() *Observer  { return h.n.cfg.Observer }

// Placement and Mode are the node's (placement.Host): the engines apply
// operators' pins and the node's cordon through them.
func (h nodeHost) Placement() *placement.Snapshot { return h.n.Placement() }
func (h nodeHost) Mode() placement.Mode           { return h.n.Mode() }

// JitterSeed is the seed of the node's backoff jitter
// (NodeConfig.JitterSeed; the engines find it by type assertion).
func (h nodeHost) JitterSeed() uint64 { return h.n.cfg.JitterSeed }

// Members returns the last membership read and a channel closed at the
// next change.
func (h nodeHost) Members() ([]string, <-chan struct{}) {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	return h.n.members, h.n.changed
}

// Fail records a subscription's fatal error; the node keeps running its
// other subscriptions and reports the error in Err and the status record.
func (h nodeHost) Fail(subscription string, err error) {
	n := h.n
	n.mu.Lock()
	if _, dup := n.fatal[subscription]; !dup {
		n.fatal[subscription] = err
	}
	n.mu.Unlock()
	n.cfg.Logger.Error("subscription failed", "subscription", subscription, "err", err)
	n.cfg.Observer.fatal(FatalEvent{Subscription: subscription, Err: err})
	n.poke()
}

// Start starts the heartbeat and every subscription. It returns once
// their goroutines run; ctx bounds only the start itself.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	if n.started {
		n.mu.Unlock()
		return errors.New("runtime: node already started")
	}
	n.started = true
	n.startedAt = n.cfg.Clock.Now()
	n.mu.Unlock()

	// The background context is detached from ctx on purpose: Start's ctx
	// bounds starting, not the node's life; Stop ends it.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	for i, s := range n.subs {
		if err := s.Start(ctx, nodeHost{n}); err != nil {
			for _, started := range n.subs[:i] {
				_ = started.Stop(ctx)
			}
			cancel()
			return fmt.Errorf("runtime: start subscription %q: %w", s.Name(), err)
		}
	}
	n.wg.Add(2)
	go n.heartbeatLoop(runCtx)
	go n.watchPlacement(runCtx)
	return nil
}

// Stop stops the subscriptions (in parallel, each gracefully), then
// removes the node from the membership. It returns the first error, or
// ctx's error when ctx ended first. Calling it again returns the first
// call's result once that call has finished.
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	if !n.started {
		n.mu.Unlock()
		return nil
	}
	if n.stopped {
		done := n.stopDone
		n.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.stopErr
	}
	n.stopped = true
	n.stopDone = make(chan struct{})
	n.join = JoinLeaving
	n.mu.Unlock()
	n.poke() // publish "leaving" early

	errs := make([]error, len(n.subs))
	var wg sync.WaitGroup
	for i, s := range n.subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Stop(ctx)
		}()
	}
	wg.Wait()
	n.cancel()
	n.wg.Wait()

	leaveErr := n.cfg.Membership.Leave(ctx, n.cfg.Service, n.cfg.NodeID)
	if leaveErr != nil {
		leaveErr = fmt.Errorf("runtime: leave membership: %w", leaveErr)
	}
	err := errors.Join(append(errs, leaveErr)...)

	n.mu.Lock()
	n.join = JoinLeft
	n.stopErr = err
	close(n.stopDone)
	n.mu.Unlock()
	return err
}

// JoinState is where the node is in its life.
func (n *Node) JoinState() JoinState {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.join
}

// Err returns the fatal errors of the node's subscriptions, joined; nil
// when none failed.
func (n *Node) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	names := make([]string, 0, len(n.fatal))
	for name := range n.fatal {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		errs = append(errs, fmt.Errorf("subscription %q: %w", name, n.fatal[name]))
	}
	return errors.Join(errs...)
}

// StoreErr is the error of the latest heartbeat when it failed: Redis,
// which holds the leases and the membership, cannot be reached, so no
// subscription of the node can make progress. nil before the first
// failure and again once a heartbeat succeeds.
func (n *Node) StoreErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lastHBErr
}

// Subscriptions returns the node's subscriptions.
func (n *Node) Subscriptions() []Subscription { return slices.Clone(n.subs) }

// Status is the node's status record as it would be heartbeated now.
func (n *Node) Status() NodeStatus {
	n.mu.Lock()
	join := n.join
	if join == JoinJoined && len(n.fatal) == len(n.subs) && len(n.subs) > 0 {
		join = JoinFailed
	}
	n.mu.Unlock()
	st := NodeStatus{
		Service:    n.cfg.Service,
		Node:       n.cfg.NodeID,
		AdminAddr:  n.cfg.AdminAddr,
		JoinState:  join,
		StartedAt:  n.startedAt,
		LastSeen:   n.cfg.Clock.Now(),
		Held:       []HeldPartition{},
		BackingOff: []string{},
		Paused:     []string{},
		Throttled:  []string{},
		Counters:   map[string]int64{},
		Mode:       n.statusMode(),
	}
	for _, s := range n.subs {
		ss := s.Status()
		st.Held = append(st.Held, ss.Held...)
		for _, p := range ss.BackingOff {
			st.BackingOff = append(st.BackingOff, ss.Name+"/"+p)
		}
		for _, p := range ss.Paused {
			st.Paused = append(st.Paused, ss.Name+"/"+p)
		}
		for _, p := range ss.Throttled {
			st.Throttled = append(st.Throttled, ss.Name+"/"+p)
		}
		st.Parked += ss.Parked
		for k, v := range ss.Counters {
			st.Counters[k] += v
		}
	}
	return st
}

func (n *Node) poke() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// heartbeatLoop writes the status record and reads the membership every
// HeartbeatEvery (and at once when poked), until ctx ends.
func (n *Node) heartbeatLoop(ctx context.Context) {
	defer n.wg.Done()
	t := n.cfg.Clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-n.kick:
			t.Stop()
		}
		n.heartbeat(ctx)
		t.Reset(n.cfg.HeartbeatEvery)
	}
}

func (n *Node) heartbeat(ctx context.Context) {
	st := n.Status()
	hbCtx, cancel := context.WithTimeout(ctx, n.cfg.HeartbeatEvery)
	defer cancel()
	if err := n.cfg.Membership.Heartbeat(hbCtx, st, n.cfg.MemberTTL); err != nil {
		n.hbError("heartbeat", err)
		return
	}
	n.mu.Lock()
	if n.join == JoinJoining {
		n.join = JoinJoined
	}
	n.mu.Unlock()
	// Live, not Members: the held partitions, megabytes with thousands
	// of them, are read only for the nodes placement needs them of.
	members, err := n.cfg.Membership.Live(hbCtx, n.cfg.Service)
	if err != nil {
		n.hbError("members", err)
		return
	}
	ids := make([]string, 0, len(members)+1)
	for _, m := range members {
		// A node on its way out keeps heartbeating while it hands its
		// partitions over; the others stop counting it at once so that
		// they take the partitions it releases.
		switch m.JoinState {
		case JoinLeaving, JoinLeft, JoinFailed:
			continue
		}
		ids = append(ids, m.Node)
	}
	// The heartbeat just succeeded, so this node is live even if the read
	// raced its record's expiry; a leaving node drops itself so that the
	// others' view and its own agree during the handover.
	n.mu.Lock()
	leaving := n.join == JoinLeaving
	n.mu.Unlock()
	if !leaving && !slices.Contains(ids, n.cfg.NodeID) {
		ids = append(ids, n.cfg.NodeID)
	}
	if leaving {
		ids = slices.DeleteFunc(ids, func(id string) bool { return id == n.cfg.NodeID })
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	ids, pl, mode := n.readPlacement(hbCtx, members, st.Held, ids)
	n.setMembers(ids, pl, mode)
}

func (n *Node) hbError(op string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	n.mu.Lock()
	first := n.lastHBErr == nil
	n.lastHBErr = err
	n.mu.Unlock()
	if first {
		n.cfg.Logger.Warn("membership unavailable", "op", op, "err", err)
	} else {
		n.cfg.Logger.Debug("membership unavailable", "op", op, "err", err)
	}
	n.cfg.Observer.error(ErrorEvent{Op: op, Err: err})
}

func (n *Node) setMembers(ids []string, pl *placement.Snapshot, mode placement.Mode) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lastHBErr != nil {
		n.cfg.Logger.Info("membership available again")
		n.lastHBErr = nil
	}
	if mode != n.place.mode && (n.place.mode != "" || mode != placement.Active) {
		n.cfg.Logger.Info("node mode changed", "mode", mode)
	}
	n.place.mode = mode
	samePlacement := n.place.pl.Equal(pl)
	n.place.pl = pl
	if slices.Equal(ids, n.members) && n.members != nil && samePlacement {
		return
	}
	n.cfg.Logger.Info("membership changed", "members", ids)
	n.members = ids
	close(n.changed)
	n.changed = make(chan struct{})
}
