package tui

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// fixedNow is the clock of every test frame.
var fixedNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func i64(v int64) *int64   { return &v }
func str(s string) *string { return &s }
func yes() *bool           { b := true; return &b }
func no() *bool            { b := false; return &b }

func lease(owner string, gen, ttl int64) *inspect.LeaseInfo {
	return &inspect.LeaseInfo{Owner: owner, Generation: gen, TTLMs: i64(ttl), Token: fmt.Sprintf("%s:%d", owner, gen)}
}

func lane(stream string, n int64, last string) inspect.Lane {
	l := inspect.Lane{Name: "main", Stream: stream, Exists: true, Length: n}
	if last != "" {
		l.LastEntryID = str(last)
	}
	return l
}

// scenario lays the Protean standard scenario (internal/testenv's
// ProteanStandard) out as snapshots: a healthy, a lagging, a backfilling,
// a halted (poison head), a cold and a never-read partition of
// shop::order, and billing::payment with two groups.
func scenario() *MemorySource {
	const g = "app.OrderProjector"
	src := NewMemorySource(0)
	order := func(key string, length int64, idle int64, lanes []inspect.Lane, groups ...inspect.Group) inspect.Partition {
		last := lanes[0].LastEntryID
		for i := range groups {
			groups[i].LeaseState = inspect.LeaseStateOf(&groups[i])
		}
		return inspect.Partition{Category: "shop::order", Key: key, Stream: "shop::order:" + key, Length: length,
			LastEntryID: last, IdleMs: i64(idle), Lanes: lanes, Groups: groups}
	}
	src.SetPartitions("shop::order", []inspect.Partition{
		order("o-healthy", 10, 4_000, []inspect.Lane{lane("shop::order:o-healthy", 10, "1772366396000-0")},
			inspect.Group{Name: g, Lag: i64(0), Generation: i64(3), Lease: lease("node-a", 3, 28_500), Parked: no(), Created: true}),
		order("o-lagging", 8, 65_000, []inspect.Lane{lane("shop::order:o-lagging", 8, "1772366335000-0")},
			inspect.Group{Name: g, Lag: i64(5), Generation: i64(2), Parked: no(), Created: true}),
		order("o-backfill", 6, 12_000, []inspect.Lane{lane("shop::order:o-backfill", 2, "1772366388000-0"),
			{Name: "backfill", Stream: "shop::order:o-backfill:backfill", Exists: true, Length: 4, LastEntryID: str("1772366388001-0")}},
			inspect.Group{Name: g, Pending: 1, Lag: i64(3), Generation: i64(1), Lease: lease("node-b", 1, 29_100), Parked: no(), Created: true}),
		order("o-halted", 5, 180_000, []inspect.Lane{lane("shop::order:o-halted", 5, "1772366220000-4")},
			inspect.Group{Name: g, Pending: 1, Lag: i64(4), Generation: i64(5), Lease: lease("worker-1", 5, 54_000), Parked: yes(), Created: true}),
		order("o-cold", 3, 86_400_000, []inspect.Lane{lane("shop::order:o-cold", 3, "1772280000000-2")},
			inspect.Group{Name: g, Lag: i64(0), Parked: no(), Created: true}),
		order("o-never", 2, 30_000, []inspect.Lane{lane("shop::order:o-never", 2, "1772366370000-1")}),
	})
	src.SetPartitions("billing::payment", []inspect.Partition{
		{Category: "billing::payment", Key: "p-1", Stream: "billing::payment:p-1", Length: 6,
			LastEntryID: str("1772366390000-5"), IdleMs: i64(10_000),
			Lanes: []inspect.Lane{lane("billing::payment:p-1", 6, "1772366390000-5")},
			Groups: []inspect.Group{
				{Name: "audit", Pending: 1, Lag: i64(4), Parked: no(), Created: true, LeaseState: inspect.LeaseFree},
				{Name: "ledger-sync", Lag: i64(0), Parked: no(), Created: true, LeaseState: inspect.LeaseFree},
			}},
		{Category: "billing::payment", Key: "p-ghost", Stream: "billing::payment:p-ghost",
			Lanes: []inspect.Lane{{Name: "main", Stream: "billing::payment:p-ghost"}}},
	})
	src.SetDetail(inspect.PartitionDetail{
		Category: "shop::order", Key: "o-halted", Stream: "shop::order:o-halted", Length: 5,
		LastEntryID: str("1772366220000-4"), IdleMs: i64(180_000),
		Lanes:   []inspect.Lane{lane("shop::order:o-halted", 5, "1772366220000-4")},
		Indexed: true,
		Groups: []inspect.GroupDetail{{
			Group: inspect.Group{Name: g, Pending: 1, Lag: i64(4), LastDeliveredID: str("1772366220000-0"),
				Generation: i64(5), Lease: lease("worker-1", 5, 54_000), Parked: yes(), Created: true, LeaseState: inspect.LeaseHeld},
			Head: &inspect.Entry{Stream: "shop::order:o-halted", ID: "1772366220000-0", Type: "test.OrderPlaced.v1", EventID: "evt-o-halted-1",
				Envelope: &broker.Envelope{Metadata: broker.Metadata{Headers: broker.Headers{ID: "evt-o-halted-1", Type: "test.OrderPlaced.v1"}}}},
			HeadPending: &inspect.PendingEntry{Stream: "shop::order:o-halted", ID: "1772366220000-0", Consumer: "worker-1:5",
				IdleMs: 180_000, Deliveries: 7},
			PendingEntries: []inspect.PendingEntry{{Stream: "shop::order:o-halted", ID: "1772366220000-0", Consumer: "worker-1:5",
				IdleMs: 180_000, Deliveries: 7}},
			Verdict: inspect.Verdict{State: inspect.StateStuck, Group: g,
				Reason: "halted on a poison message: head 1772366220000-0 delivered 7 times, pending 3m0s to consumer worker-1:5 whose lease is held"},
		}},
		Verdict: inspect.Verdict{State: inspect.StateStuck, Group: g,
			Reason: "halted on a poison message: head 1772366220000-0 delivered 7 times, pending 3m0s to consumer worker-1:5 whose lease is held"},
		ServerTime: fixedNow,
	})
	src.SetLeases([]inspect.Lease{
		{Category: str("shop::order"), Group: g, Key: "o-backfill", Owner: str("node-b"), Generation: i64(1), TTLMs: i64(29_100),
			State: inspect.LeaseHeld, Token: str("node-b:1"), Counter: i64(1), LeaseKey: g + ":o-backfill:__lease__"},
		{Category: str("shop::order"), Group: g, Key: "o-cold", State: inspect.LeaseFree, LeaseKey: g + ":o-cold:__lease__"},
		{Category: str("shop::order"), Group: g, Key: "o-halted", Owner: str("worker-1"), Generation: i64(5), TTLMs: i64(54_000),
			State: inspect.LeaseHeld, Token: str("worker-1:5"), Counter: i64(5), LeaseKey: g + ":o-halted:__lease__"},
		{Category: str("shop::order"), Group: g, Key: "o-healthy", Owner: str("node-a"), Generation: i64(3), TTLMs: i64(28_500),
			State: inspect.LeaseHeld, Token: str("node-a:3"), Counter: i64(3), LeaseKey: g + ":o-healthy:__lease__"},
		{Category: str("shop::order"), Group: g, Key: "o-lagging", Generation: i64(2), State: inspect.LeaseExpired, Counter: i64(2),
			LeaseKey: g + ":o-lagging:__lease__"},
	})
	src.SetParked([]ledger.Parked{
		{Subscription: g, Source: source.Redis, Aggregate: "o-halted", Category: "shop::order", Partition: "o-halted",
			Position: "1772366220000-0", Stream: "shop::order:o-halted", Error: "handler: amount must be positive (got -5)\ntraceback …",
			Attempts: 7, ParkedAt: fixedNow.Add(-3 * time.Minute), LastAttemptAt: fixedNow.Add(-time.Minute),
			Status: ledger.StatusParked, Owner: "worker-1", Generation: 5},
		{Subscription: "ledger-sync", Source: source.Kafka, Aggregate: "acct-42", Topic: "payments", Partition: "3",
			Position: "1284", Error: "http 422: unknown account", Attempts: 3, ParkedAt: fixedNow.Add(-42 * time.Minute),
			Status: ledger.StatusRetrying, Owner: "node-b", Generation: 9,
			Request: &ledger.Request{Action: ledger.ActionRetry, By: "protctl:alice", RequestedAt: fixedNow.Add(-10 * time.Second)}},
	})
	src.SetNodes([]runtime.NodeStatus{
		{Service: "shop", Node: "node-a", AdminAddr: "127.0.0.1:7070", JoinState: runtime.JoinJoined,
			StartedAt: fixedNow.Add(-2 * time.Hour), LastSeen: fixedNow.Add(-1 * time.Second),
			Held: []runtime.HeldPartition{
				{Subscription: g, Source: source.Redis, Category: "shop::order", Partition: "o-healthy", Generation: 3},
				{Subscription: "topic:payments", Source: source.Kafka, Topic: "payments", Partition: "0", Generation: 4},
			}},
		{Service: "shop", Node: "node-b", AdminAddr: "127.0.0.1:7071", JoinState: runtime.JoinJoined,
			StartedAt: fixedNow.Add(-2 * time.Hour), LastSeen: fixedNow.Add(-2 * time.Second),
			Held: []runtime.HeldPartition{
				{Subscription: g, Source: source.Redis, Category: "shop::order", Partition: "o-backfill", Generation: 1},
				{Subscription: "topic:payments", Source: source.Kafka, Topic: "payments", Partition: "3", Generation: 9},
			},
			Paused: []string{"payments/a7"}, Throttled: []string{"payments/3"}, Parked: 1},
		{Service: "shop", Node: "node-c", JoinState: runtime.JoinJoining, StartedAt: fixedNow.Add(-5 * time.Second),
			LastSeen: fixedNow.Add(-3 * time.Second), BackingOff: []string{"payments/1"}},
	})
	src.SetTopics([]TopicPartition{
		{Service: "shop", Topic: "payments", Partition: 0, Owner: str("node-a"), Generation: i64(4), TTLMs: i64(12_000), Head: i64(5120),
			Subscriptions: []TopicSubscription{{Name: "ledger-sync", Checkpoint: i64(5120), Lag: i64(0)}, {Name: "fraud-check", Checkpoint: i64(5002), Lag: i64(118)}}},
		{Service: "shop", Topic: "payments", Partition: 1, Head: i64(4988),
			Subscriptions: []TopicSubscription{{Name: "ledger-sync", Checkpoint: i64(4900), Lag: i64(88)}, {Name: "fraud-check"}}},
		{Service: "shop", Topic: "payments", Partition: 3, Owner: str("node-b"), Generation: i64(9), TTLMs: i64(9_000), Head: i64(1400),
			Subscriptions: []TopicSubscription{{Name: "ledger-sync", Checkpoint: i64(1284), Lag: i64(116)}}},
	})
	return src
}

// fakeActions records what the dashboard asks for and answers with a
// one-item plan; Apply marks the items applied.
type fakeActions struct {
	mu      sync.Mutex
	planned []ActionRequest
	applied []*repair.Plan
	planErr error
	// seen, when set, is the state every planned item saw.
	seen *repair.Precondition
}

func (f *fakeActions) Plan(_ context.Context, req ActionRequest) (*repair.Plan, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.planned = append(f.planned, req)
	if f.planErr != nil {
		return nil, f.planErr
	}
	it := repair.Item{Action: req.Action, Allowed: true, Reason: "the lease is held by worker-1:5; --force releases it"}
	switch req.Action {
	case repair.ActionRelease:
		it.Target = repair.Target{Category: req.Category, Key: req.Key, Group: req.Group}
		it.Precondition = repair.Precondition{Lease: str("worker-1:5"), Generation: i64(5)}
		it.Params.Force = req.Force
	case repair.ActionReap:
		it.Target = repair.Target{Category: req.Category, Key: req.Key}
		it.Reason = "every group delivered and acked everything; idle 24h"
	default:
		it.Target = repair.Target{Subscription: req.Subscription, Aggregate: req.Aggregate, Stream: req.Stream}
		it.Reason = "ok"
	}
	if f.seen != nil {
		it.Precondition = *f.seen
	}
	return &repair.Plan{APIVersion: repair.APIVersion, Kind: repair.PlanKind, Layout: "protean", CreatedAt: fixedNow, Items: []repair.Item{it}}, nil
}

func (f *fakeActions) Apply(_ context.Context, p *repair.Plan, _ string) (repair.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range p.Items {
		p.Items[i].Result, p.Items[i].Detail = repair.ResultApplied, "released worker-1:5"
	}
	f.applied = append(f.applied, p)
	return repair.OutcomeApplied, nil
}

func (f *fakeActions) requests() []ActionRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ActionRequest(nil), f.planned...)
}
