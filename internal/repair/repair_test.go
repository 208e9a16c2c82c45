package repair_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

type env struct {
	c     *redis.Client
	s     testenv.ProteanScenario
	r     *repair.Repairer
	store *redisstore.Store
	l     broker.Layout
}

func setup(t *testing.T) env {
	t.Helper()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	s := testenv.ProteanStandard(t, c)
	store := redisstore.New(c)
	r := repair.New(c, redisbroker.New(c), repair.WithLedger(store))
	return env{c: c, s: s, r: r, store: store, l: broker.ProteanLayout}
}

// roundTrip encodes p as the CLI's --dry-run -o json would and loads it
// back as `protctl apply -f` does.
func roundTrip(t *testing.T, p *repair.Plan) *repair.Plan {
	t.Helper()
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	q, err := repair.ParsePlan(b)
	if err != nil {
		t.Fatalf("plan does not load back: %v\n%s", err, b)
	}
	b2, _ := json.MarshalIndent(q, "", "  ")
	if string(b) != string(b2) {
		t.Fatalf("plan changed in a round trip:\n%s\n---\n%s", b, b2)
	}
	return q
}

func apply(t *testing.T, e env, p *repair.Plan) repair.Outcome {
	t.Helper()
	o, err := e.r.Apply(context.Background(), p, repair.ApplyOptions{})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return o
}

func one(t *testing.T, p *repair.Plan, err error) repair.Item {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 1 {
		t.Fatalf("plan has %d items, want 1: %+v", len(p.Items), p.Items)
	}
	return p.Items[0]
}

func get(t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func pendingIDs(t *testing.T, c *redis.Client, stream, group string) []string {
	t.Helper()
	ps, err := c.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: 100}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	return ids
}

// The runbook of a Protean partition halted on a poison message, with
// protctl alone: show it, dead-letter the head, release the lease. Each
// step goes through a JSON plan, as `--dry-run -o json` and `apply -f`.
func TestHaltedPartitionRunbook(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	s := e.s
	stream := e.l.Stream(s.Orders, s.Halted)
	leaseKey := e.l.LeaseKey(s.Projector, s.Halted)

	// 1. show: the poison head and its delivery count.
	d, err := e.r.Inspector().Partition(ctx, s.Orders, s.Halted, inspect.ExplainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Verdict.State != inspect.StateStuck || !strings.Contains(d.Verdict.Reason, "head "+s.HaltedIDs[0]+" delivered 7 times") {
		t.Fatalf("verdict %s", d.Verdict)
	}

	// 2. dead-letter the head, fenced on the lease seen in the plan.
	p, err := e.r.PlanDeadLetter(ctx, repair.DeadLetterRequest{Category: s.Orders, Key: s.Halted, Group: s.Projector, Reason: "poison"})
	it := one(t, p, err)
	if !it.Allowed || it.Target.ID != s.HaltedIDs[0] || *it.Precondition.Lease != s.HaltedToken ||
		it.Precondition.Pending.Deliveries != s.PoisonDeliveries || it.Params.DLQStream != stream+":dlq" {
		t.Fatalf("dead-letter item %+v", it)
	}
	if p.Predicted() != repair.OutcomeApplied {
		t.Fatalf("predicted %s", p.Predicted())
	}
	p = roundTrip(t, p)
	if o := apply(t, e, p); o != repair.OutcomeApplied || o.ExitCode() != 0 || p.Items[0].Result != repair.ResultApplied {
		t.Fatalf("outcome %s, item %+v", o, p.Items[0])
	}
	dlq, err := e.c.XRange(ctx, stream+":dlq", "-", "+").Result()
	if err != nil || len(dlq) != 1 {
		t.Fatalf("dlq %+v %v", dlq, err)
	}
	if d := broker.ParseDeadLetter(map[string]string{"data": dlq[0].Values["data"].(string)}); d.OriginalID != s.HaltedIDs[0] ||
		d.FailureReason != "poison" || d.ConsumerGroup != s.Projector || d.Consumer != s.HaltedToken ||
		d.RetryCount == nil || *d.RetryCount != s.PoisonDeliveries || !strings.Contains(string(d.Payload), `"metadata"`) {
		t.Fatalf("dead letter %+v", d)
	}
	if ids := pendingIDs(t, e.c, stream, s.Projector); len(ids) != 0 {
		t.Fatalf("head still pending: %v", ids)
	}
	if n := e.c.XLen(ctx, stream).Val(); n != 5 {
		t.Fatalf("the stream lost entries: %d", n)
	}

	// 3. release the lease, fenced on the token seen in the plan.
	p, err = e.r.PlanRelease(ctx, repair.ReleaseRequest{Category: s.Orders, Group: s.Projector, Key: s.Halted, Force: true})
	it = one(t, p, err)
	if !it.Allowed || *it.Precondition.Lease != s.HaltedToken || *it.Precondition.Generation != 5 {
		t.Fatalf("release item %+v", it)
	}
	p = roundTrip(t, p)
	if o := apply(t, e, p); o != repair.OutcomeApplied {
		t.Fatalf("release outcome %s: %+v", o, p.Items[0])
	}
	if v := get(t, e.c, leaseKey); v != "<none>" {
		t.Fatalf("lease %q after release", v)
	}
	if v := get(t, e.c, e.l.GenerationKey(s.Projector, s.Halted)); v != "5" {
		t.Fatalf("generation %q: it must stay", v)
	}
	// The instance re-acquires with a greater generation.
	lease, ok, err := redisbroker.New(e.c).AcquirePartitionLease(ctx, leaseKey, e.l.GenerationKey(s.Projector, s.Halted), "worker-1", time.Minute)
	if err != nil || !ok || lease.Generation != 6 {
		t.Fatalf("re-acquire %+v %v %v", lease, ok, err)
	}
}

// A lease that changes between plan and apply makes every fenced step a
// conflict (exit 5) that changes nothing.
func TestLeaseChangedBetweenPlanAndApplyIsAConflict(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	s := e.s
	stream := e.l.Stream(s.Orders, s.Halted)
	leaseKey := e.l.LeaseKey(s.Projector, s.Halted)

	dl, err := e.r.PlanDeadLetter(ctx, repair.DeadLetterRequest{Category: s.Orders, Key: s.Halted, Group: s.Projector})
	one(t, dl, err)
	rel, err := e.r.PlanRelease(ctx, repair.ReleaseRequest{Group: s.Projector, Key: s.Halted, Force: true})
	one(t, rel, err)
	dl, rel = roundTrip(t, dl), roundTrip(t, rel)

	// The instance's lease expires and another takes the partition.
	e.c.Set(ctx, leaseKey, "worker-2:6", time.Minute)
	e.c.Set(ctx, e.l.GenerationKey(s.Projector, s.Halted), 6, 0)

	for name, p := range map[string]*repair.Plan{"dead-letter": dl, "release": rel} {
		o := apply(t, e, p)
		if o != repair.OutcomeConflict || o.ExitCode() != clierr.ExitConflict || p.Items[0].Result != repair.ResultConflict {
			t.Errorf("%s: outcome %s item %+v", name, o, p.Items[0])
		}
		if !strings.Contains(p.Items[0].Detail, "worker-2:6") {
			t.Errorf("%s: detail %q should name the new lease", name, p.Items[0].Detail)
		}
		code, kind := clierr.Classify(o.Err(p))
		if code != 5 || kind != clierr.Conflict {
			t.Errorf("%s: Err classifies as %d %s", name, code, kind)
		}
	}
	if v := get(t, e.c, leaseKey); v != "worker-2:6" {
		t.Errorf("lease %q", v)
	}
	if n := e.c.Exists(ctx, stream+":dlq").Val(); n != 0 {
		t.Errorf("dlq written")
	}
	if ids := pendingIDs(t, e.c, stream, s.Projector); len(ids) != 1 || ids[0] != s.HaltedIDs[0] {
		t.Errorf("pending %v", ids)
	}
}

func TestDeadLetterWithoutLeaseTakesAnOperatorLease(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	c := e.c
	cat := testenv.Protean(t, c).Category("shop::order")
	cat.Partition("o-dead").Entries(3).Group("g").Consumer("gone:2").Read(1).Deliveries(4, time.Minute).ExpiredLease(2)
	cat.Partition("o-raced").Entries(3).Group("g").Consumer("gone:2").Read(1).Deliveries(4, time.Minute).ExpiredLease(2)
	b := redisbroker.New(c)

	p, err := e.r.PlanDeadLetter(ctx, repair.DeadLetterRequest{Category: "shop::order", Key: "o-dead", Group: "g"})
	it := one(t, p, err)
	if !it.Allowed || it.Precondition.Lease != nil || *it.Precondition.Generation != 2 || !strings.Contains(it.Reason, "operator lease") {
		t.Fatalf("item %+v", it)
	}
	if o := apply(t, e, roundTrip(t, p)); o != repair.OutcomeApplied {
		t.Fatalf("outcome %s", o)
	}
	if get(t, c, "g:o-dead:__lease__") != "<none>" || get(t, c, "g:o-dead:__generation__") != "3" {
		t.Fatalf("operator lease not given back: lease %s gen %s", get(t, c, "g:o-dead:__lease__"), get(t, c, "g:o-dead:__generation__"))
	}
	if ids := pendingIDs(t, c, "shop::order:o-dead", "g"); len(ids) != 0 {
		t.Fatalf("pending %v", ids)
	}

	// Someone leases and releases the partition between plan and apply:
	// the generation moved, so the plan's "no owner" no longer holds.
	p, err = e.r.PlanDeadLetter(ctx, repair.DeadLetterRequest{Category: "shop::order", Key: "o-raced", Group: "g"})
	one(t, p, err)
	l, ok, err := b.AcquirePartitionLease(ctx, "g:o-raced:__lease__", "g:o-raced:__generation__", "node-x", time.Minute)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, err := b.ReleasePartitionLease(ctx, l.Fence); err != nil {
		t.Fatal(err)
	}
	if o := apply(t, e, p); o != repair.OutcomeConflict {
		t.Fatalf("outcome %s: %+v", o, p.Items[0])
	}
	if ids := pendingIDs(t, c, "shop::order:o-raced", "g"); len(ids) != 1 {
		t.Fatalf("pending %v", ids)
	}
	if c.Exists(ctx, "shop::order:o-raced:dlq").Val() != 0 || get(t, c, "g:o-raced:__lease__") != "<none>" {
		t.Fatal("a conflicting dead-letter changed something")
	}

	// A lease taken (and kept) since the plan: conflict too.
	p, err = e.r.PlanDeadLetter(ctx, repair.DeadLetterRequest{Category: "shop::order", Key: "o-raced", Group: "g"})
	one(t, p, err)
	if _, _, err := b.AcquirePartitionLease(ctx, "g:o-raced:__lease__", "g:o-raced:__generation__", "node-y", time.Minute); err != nil {
		t.Fatal(err)
	}
	if o := apply(t, e, p); o != repair.OutcomeConflict || !strings.Contains(p.Items[0].Detail, "node-y") {
		t.Fatalf("outcome %s: %+v", o, p.Items[0])
	}
}

// A skip-head planned on a free partition whose generation moved since
// (leased and released, or set by hand) is a conflict that changes
// nothing: not the pending entry, not the dead-letter stream, and not the
// generation counter, which an operator lease taken before the check
// would have bumped.
func TestDeadLetterConflictLeavesTheGenerationAlone(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	c := e.c
	cat := testenv.Protean(t, c).Category("shop::order")
	cat.Partition("o-3").Entries(3).Group("g").Consumer("gone:6").Read(1).Deliveries(4, time.Minute).ExpiredLease(6)

	p, err := e.r.PlanDeadLetter(ctx, repair.DeadLetterRequest{Category: "shop::order", Key: "o-3", Group: "g"})
	it := one(t, p, err)
	if !it.Allowed || it.Precondition.Lease != nil || *it.Precondition.Generation != 6 {
		t.Fatalf("item %+v", it)
	}
	p = roundTrip(t, p)
	c.Set(ctx, "g:o-3:__generation__", 9, 0)
	if o := apply(t, e, p); o != repair.OutcomeConflict || !strings.Contains(p.Items[0].Detail, "generation 9") {
		t.Fatalf("outcome %s: %+v", o, p.Items[0])
	}
	if g := get(t, c, "g:o-3:__generation__"); g != "9" {
		t.Fatalf("generation %s after a conflict, want 9 (unchanged)", g)
	}
	if get(t, c, "g:o-3:__lease__") != "<none>" || c.Exists(ctx, "shop::order:o-3:dlq").Val() != 0 {
		t.Fatal("a conflicting dead-letter changed something")
	}
	if ids := pendingIDs(t, c, "shop::order:o-3", "g"); len(ids) != 1 {
		t.Fatalf("pending %v", ids)
	}
}

func TestDeadLetterGuards(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	s := e.s
	// The backfill partition's pending entry was delivered once: its owner
	// may be handling it.
	p, err := e.r.PlanDeadLetter(ctx, repair.DeadLetterRequest{Category: s.Orders, Key: s.Backfill, Group: s.Projector})
	it := one(t, p, err)
	if it.Allowed || !strings.Contains(it.Reason, "delivered 1 times") || p.Predicted() != repair.OutcomeRefused {
		t.Fatalf("item %+v", it)
	}
	if o := apply(t, e, p); o != repair.OutcomeRefused || o.ExitCode() != 6 || p.Items[0].Result != repair.ResultRefused {
		t.Fatalf("outcome %s %+v", o, p.Items[0])
	}
	if ids := pendingIDs(t, e.c, e.l.LaneStream(s.Orders, s.Backfill, "backfill"), s.Projector); len(ids) != 1 {
		t.Fatalf("refused item changed state: %v", ids)
	}
	// With force it is allowed, and it targets the backfill lane.
	p, err = e.r.PlanDeadLetter(ctx, repair.DeadLetterRequest{Category: s.Orders, Key: s.Backfill, Group: s.Projector, Force: true})
	it = one(t, p, err)
	if !it.Allowed || it.Target.Stream != e.l.LaneStream(s.Orders, s.Backfill, "backfill") {
		t.Fatalf("forced item %+v", it)
	}
	// Nothing pending: skipped (exit 0).
	p, err = e.r.PlanDeadLetter(ctx, repair.DeadLetterRequest{Category: s.Orders, Key: s.Healthy, Group: s.Projector})
	it = one(t, p, err)
	if it.Result != repair.ResultSkipped || apply(t, e, p) != repair.OutcomeApplied {
		t.Fatalf("healthy item %+v", p.Items[0])
	}
	// The head was acked since the plan: conflict.
	p, err = e.r.PlanDeadLetter(ctx, repair.DeadLetterRequest{Category: s.Orders, Key: s.Halted, Group: s.Projector})
	one(t, p, err)
	e.c.XAck(ctx, e.l.Stream(s.Orders, s.Halted), s.Projector, s.HaltedIDs[0])
	if o := apply(t, e, p); o != repair.OutcomeConflict {
		t.Fatalf("acked head: %s %+v", o, p.Items[0])
	}
	if e.c.Exists(ctx, e.l.DLQStream(s.Orders, s.Halted)).Val() != 0 {
		t.Fatal("dead-lettered an acked entry")
	}
}

func TestReleaseGuards(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	s := e.s
	p, err := e.r.PlanRelease(ctx, repair.ReleaseRequest{Group: s.Projector, Key: s.Healthy})
	it := one(t, p, err)
	if it.Allowed || !strings.Contains(it.Reason, "use --force") {
		t.Fatalf("item %+v", it)
	}
	if o := apply(t, e, p); o != repair.OutcomeRefused {
		t.Fatalf("outcome %s", o)
	}
	if get(t, e.c, e.l.LeaseKey(s.Projector, s.Healthy)) != s.HealthyToken {
		t.Fatal("refused release changed the lease")
	}
	p, err = e.r.PlanRelease(ctx, repair.ReleaseRequest{Category: s.Orders, Group: s.Projector, Key: s.Lagging})
	it = one(t, p, err)
	if it.Result != repair.ResultSkipped || !strings.Contains(it.Reason, "expired") || apply(t, e, p) != repair.OutcomeApplied {
		t.Fatalf("expired lease item %+v", p.Items[0])
	}
}

func TestPartialOutcome(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	s := e.s
	a, err := e.r.PlanRelease(ctx, repair.ReleaseRequest{Group: s.Projector, Key: s.Healthy, Force: true})
	one(t, a, err)
	b, err := e.r.PlanRelease(ctx, repair.ReleaseRequest{Group: s.Projector, Key: s.Backfill, Force: true})
	one(t, b, err)
	a.Items = append(a.Items, b.Items...)
	e.c.Set(ctx, e.l.LeaseKey(s.Projector, s.Backfill), "node-z:9", time.Minute)
	var seen []repair.Result
	o, err := e.r.Apply(ctx, a, repair.ApplyOptions{OnItem: func(i int, it repair.Item) { seen = append(seen, it.Result) }})
	if err != nil || o != repair.OutcomePartial || o.ExitCode() != clierr.ExitPartial {
		t.Fatalf("outcome %s %v", o, err)
	}
	if len(seen) != 2 || seen[0] != repair.ResultApplied || seen[1] != repair.ResultConflict {
		t.Fatalf("results %v", seen)
	}
	if a.Summary() != "1 applied, 1 conflict" {
		t.Fatalf("summary %q", a.Summary())
	}
}

func TestReapPlansSayWhichGroupAndWhy(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	s := e.s
	// A partition every group has read, but a registered group never did.
	testenv.Protean(t, e.c).Category(s.Orders).RegisterGroup(s.Projector).Fixture().Category("other").
		RegisterGroup("late").Partition("x").At(s.ColdEntriesAt).Entries(2).Group("early").Read(2).Ack(2)

	tests := []struct {
		category, key string
		minIdle       time.Duration
		allowed       bool
		reason        string
	}{
		{s.Orders, s.Lagging, time.Hour, false, `group "app.OrderProjector" has been delivered up to `},
		{s.Orders, s.Halted, time.Hour, false, `group "app.OrderProjector" has 1 pending entries on "shop::order:o-halted"`},
		{s.Orders, s.Backfill, 0, false, `group "app.OrderProjector" has 1 pending entries on "shop::order:o-backfill:backfill"`},
		{s.Orders, s.Never, time.Hour, false, `"shop::order:o-never" has 2 entries but no consumer group`},
		{"other", "x", time.Hour, false, `registered group "late" has never read "other:x"`},
		{s.Orders, s.Healthy, time.Hour, false, `the newest entry of "shop::order:o-healthy" is `},
		{s.Orders, s.Cold, time.Hour, true, "every group has read and acked all 3 entries"},
		{s.Payments, s.Ghost, 0, true, "no stream"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			p, err := e.r.PlanReap(ctx, repair.ReapRequest{Category: tt.category, Keys: []string{tt.key}, MinIdle: tt.minIdle})
			it := one(t, p, err)
			if it.Allowed != tt.allowed || !strings.Contains(it.Reason, tt.reason) {
				t.Fatalf("allowed %v reason %q, want %v %q", it.Allowed, it.Reason, tt.allowed, tt.reason)
			}
			if !tt.allowed {
				// The broker agrees: its own check refuses too.
				res, err := redisbroker.New(e.c).ReapPartition(ctx, tt.category, tt.key, tt.minIdle, "")
				if err != nil || res.Reaped {
					t.Fatalf("broker reaped what the plan refused: %+v %v", res, err)
				}
				if o := apply(t, e, p); o != repair.OutcomeRefused {
					t.Fatalf("outcome %s", o)
				}
			}
		})
	}

	all, err := e.r.PlanReap(ctx, repair.ReapRequest{Category: s.Orders, AllCold: true, MinIdle: time.Hour})
	if err != nil || len(all.Items) != 1 || all.Items[0].Target.Key != s.Cold {
		t.Fatalf("all cold: %+v %v", all, err)
	}
	if o := apply(t, e, roundTrip(t, all)); o != repair.OutcomeApplied {
		t.Fatalf("reap cold: %s %+v", o, all.Items[0])
	}
	if e.c.Exists(ctx, e.l.Stream(s.Orders, s.Cold)).Val() != 0 || e.c.SIsMember(ctx, e.l.IndexKey(s.Orders), s.Cold).Val() {
		t.Fatal("cold partition not reaped")
	}
}

func TestReapConflictWhenAnEntryArrives(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	s := e.s
	p, err := e.r.PlanReap(ctx, repair.ReapRequest{Category: s.Orders, Keys: []string{s.Cold}, MinIdle: time.Hour})
	if it := one(t, p, err); !it.Allowed {
		t.Fatalf("%+v", it)
	}
	// A publish, read and acked by the group: still safe to reap by the
	// broker's rules, but not the state the operator approved.
	testenv.Protean(t, e.c).Category(s.Orders).Partition(s.Cold).At(s.ColdEntriesAt.Add(time.Second)).Entries(1).Group(s.Projector).Read(1).Ack(1)
	if o := apply(t, e, p); o != repair.OutcomeConflict || !strings.Contains(p.Items[0].Detail, "newest entry") {
		t.Fatalf("outcome %s %+v", o, p.Items[0])
	}
	if e.c.XLen(ctx, e.l.Stream(s.Orders, s.Cold)).Val() != 4 {
		t.Fatal("a conflicting reap deleted the partition")
	}
}

func TestTrimKeepsUnackedAndNamesThePinningGroup(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	s := e.s
	stream := e.l.Stream(s.Payments, s.Pay1)
	p, err := e.r.PlanTrim(ctx, repair.TrimRequest{Stream: stream, MaxLen: 1})
	it := one(t, p, err)
	if !it.Allowed || it.Precondition.Trim.PinnedBy == nil || *it.Precondition.Trim.PinnedBy != s.Audit || it.Precondition.Trim.Removes != 1 ||
		*it.Precondition.Trim.Floor != s.Pay1IDs[1] || !strings.Contains(it.Reason, `pinned by group "audit"`) {
		t.Fatalf("trim item %+v / %+v", it, it.Precondition.Trim)
	}
	p = roundTrip(t, p)
	if o := apply(t, e, p); o != repair.OutcomeApplied || p.Items[0].Detail != "removed 1 entries (the plan expected 1)" {
		t.Fatalf("outcome %s %q", o, p.Items[0].Detail)
	}
	ids, _ := e.c.XRange(ctx, stream, "-", "+").Result()
	if len(ids) != 5 || ids[0].ID != s.Pay1IDs[1] {
		t.Fatalf("after trim %v", ids)
	}
	if pend := pendingIDs(t, e.c, stream, s.Audit); len(pend) != 1 || pend[0] != s.Pay1IDs[1] {
		t.Fatalf("unacked entry lost: %v", pend)
	}
	// The same plan applied again removes nothing: skipped, not applied.
	if o := apply(t, e, p); o != repair.OutcomeApplied || p.Items[0].Result != repair.ResultSkipped ||
		p.Items[0].Detail != "nothing to remove now (the plan expected 1)" {
		t.Fatalf("re-applied trim: outcome %s, item %s %q", o, p.Items[0].Result, p.Items[0].Detail)
	}
	// Again: nothing may go; skipped, naming the group.
	p, err = e.r.PlanTrim(ctx, repair.TrimRequest{Stream: stream, MaxLen: 1})
	it = one(t, p, err)
	if it.Result != repair.ResultSkipped || !strings.Contains(it.Reason, `"audit"`) {
		t.Fatalf("second trim %+v", it)
	}
	// A group created between plan and apply: conflict, nothing removed.
	testenv.Protean(t, e.c).Category(s.Payments).Partition(s.Pay1).Entries(2).Group(s.Audit).Read(6).Ack(6)
	p, err = e.r.PlanTrim(ctx, repair.TrimRequest{Stream: stream, MaxLen: 2})
	if it := one(t, p, err); !it.Allowed {
		t.Fatalf("%+v", it)
	}
	if err := e.c.XGroupCreate(ctx, stream, "newcomer", "0").Err(); err != nil {
		t.Fatal(err)
	}
	before := e.c.XLen(ctx, stream).Val()
	if o := apply(t, e, p); o != repair.OutcomeConflict || e.c.XLen(ctx, stream).Val() != before {
		t.Fatalf("outcome %s %+v %+v", o, p.Items[0], p.Items[0].Precondition.Trim)
	}
}

func TestParkedRetryAndSkip(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	s := e.s
	f := broker.Fence{LeaseKey: e.l.LeaseKey(s.Projector, s.Halted), Token: s.HaltedToken}
	park := func(status ledger.Status) {
		t.Helper()
		err := e.store.Park(ctx, f, ledger.Parked{Subscription: s.Projector, Source: source.Redis, Aggregate: s.Halted,
			Category: s.Orders, Partition: s.Halted, Position: s.HaltedIDs[0], Error: "boom", Attempts: 7, Status: status})
		if err != nil {
			t.Fatal(err)
		}
	}
	park(ledger.StatusParked)

	p, err := e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionRetry, Subscription: s.Projector, Aggregate: s.Halted, By: "alice"})
	it := one(t, p, err)
	if !it.Allowed || it.Precondition.Parked.Position != s.HaltedIDs[0] || it.Target.Key != s.Halted {
		t.Fatalf("retry item %+v", it)
	}
	if o := apply(t, e, roundTrip(t, p)); o != repair.OutcomeApplied {
		t.Fatalf("retry: %s %+v", o, p.Items[0])
	}
	got, _ := e.store.GetParked(ctx, s.Projector, "", s.Halted)
	if got.Request == nil || got.Request.Action != ledger.ActionRetry || got.Request.By != "alice" {
		t.Fatalf("request %+v", got.Request)
	}
	// Asking again: already requested.
	p, err = e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionRetry, Subscription: s.Projector, Aggregate: s.Halted})
	if it := one(t, p, err); it.Result != repair.ResultSkipped {
		t.Fatalf("%+v", it)
	}

	if _, err := e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionSkip, Subscription: s.Projector, Aggregate: s.Halted}); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Fatalf("skip without reason: %v", err)
	}
	p, err = e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionSkip, All: true, Reason: "poison", By: "alice"})
	one(t, p, err)
	// Resolved by its owner before the apply: conflict.
	if err := e.store.Resolve(ctx, f, s.Projector, s.Halted); err != nil {
		t.Fatal(err)
	}
	if o := apply(t, e, p); o != repair.OutcomeConflict {
		t.Fatalf("skip after resolve: %s", o)
	}

	park(ledger.StatusUnrecoverable)
	p, err = e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionRetry, Subscription: s.Projector, Aggregate: s.Halted})
	if it := one(t, p, err); it.Allowed || !strings.Contains(it.Reason, "only a skip") {
		t.Fatalf("unrecoverable retry %+v", it)
	}
	if _, err := e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionRetry, Subscription: s.Projector, Aggregate: "nope"}); !errors.Is(err, ledger.ErrNotParked) {
		t.Fatalf("missing entry: %v", err)
	}
}

// TestParkedKafkaAggregateOnTwoPartitions: each partition's entry of an
// aggregate is its own plan item, carrying its partition, and applying
// it requests that entry only; naming the aggregate without a partition
// is ErrAmbiguousParked (issue 16 item 2).
func TestParkedKafkaAggregateOnTwoPartitions(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	lg := redisstore.TopicLeaseGroup("shop", "orders")
	const sub, agg = "ledger-sync", "x"
	for _, p := range []int32{0, 1} {
		f := broker.Fence{LeaseKey: lg.LeaseKey(p), Token: "node-a:1"}
		if err := e.c.Set(ctx, f.LeaseKey, f.Token, 0).Err(); err != nil {
			t.Fatal(err)
		}
		part := strconv.Itoa(int(p))
		if err := e.store.Park(ctx, f, ledger.Parked{Subscription: sub, Source: source.Kafka, Aggregate: agg,
			Topic: "orders", Partition: part, Position: "1" + part, Error: "boom", Attempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionRetry, Subscription: sub, Aggregate: agg}); !errors.Is(err, ledger.ErrAmbiguousParked) {
		t.Fatalf("plan without a partition: %v, want ErrAmbiguousParked", err)
	}
	p, err := e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionRetry, Subscription: sub, All: true})
	if err != nil || len(p.Items) != 2 || p.Items[0].Target.Partition == p.Items[1].Target.Partition {
		t.Fatalf("plan of all: %+v %v, want one item per partition", p, err)
	}
	p, err = e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionRetry, Subscription: sub, Aggregate: agg, Partition: "1", By: "alice"})
	it := one(t, p, err)
	if it.Target.Partition != "1" || it.Precondition.Parked.Position != "11" {
		t.Fatalf("item %+v", it)
	}
	if o := apply(t, e, roundTrip(t, p)); o != repair.OutcomeApplied {
		t.Fatalf("retry: %s %+v", o, p.Items[0])
	}
	p0, _ := e.store.GetParked(ctx, sub, "0", agg)
	p1, _ := e.store.GetParked(ctx, sub, "1", agg)
	if p0.Request != nil || p1.Request == nil || p1.Request.By != "alice" {
		t.Fatalf("requests: partition 0 %+v, partition 1 %+v; want partition 1's only", p0.Request, p1.Request)
	}
}

func TestParsePlanRejectsMalformedPlans(t *testing.T) {
	valid := `{"apiVersion":"protctl.dev/v1","kind":"Plan","layout":"protean","createdAt":"2024-01-01T00:00:00Z","items":[
	 {"action":"release","target":{"group":"g","key":"k"},"precondition":{"lease":"a:1","generation":1,"lastEntryId":null},
	  "params":{"force":true},"allowed":true,"reason":"r","result":null}]}`
	if _, err := repair.ParsePlan([]byte(valid)); err != nil {
		t.Fatalf("valid plan: %v", err)
	}
	tests := map[string]string{
		"not json":        `{"apiVersion":`,
		"unknown field":   strings.Replace(valid, `"allowed":true`, `"allowed":true,"extra":1`, 1),
		"unknown action":  strings.Replace(valid, `"action":"release"`, `"action":"drop"`, 1),
		"api version":     strings.Replace(valid, `protctl.dev/v1`, `protctl.dev/v2`, 1),
		"kind":            strings.Replace(valid, `"kind":"Plan"`, `"kind":"PartitionList"`, 1),
		"layout":          strings.Replace(valid, `"layout":"protean"`, `"layout":"kafka"`, 1),
		"missing target":  strings.Replace(valid, `"key":"k"`, `"key":""`, 1),
		"missing lease":   strings.Replace(valid, `"lease":"a:1"`, `"lease":null`, 1),
		"unknown result":  strings.Replace(valid, `"result":null`, `"result":"finished"`, 1),
		"trailing data":   valid + ` {}`,
		"wrong type":      strings.Replace(valid, `"allowed":true`, `"allowed":"yes"`, 1),
		"unknown precond": strings.Replace(valid, `"generation":1`, `"generation":1,"owner":"a"`, 1),
		"negative min idle": strings.Replace(strings.Replace(strings.Replace(valid, `"action":"release"`, `"action":"reap"`, 1),
			`"group":"g","key":"k"`, `"category":"c","key":"k"`, 1), `"force":true`, `"minIdleMs":-1`, 1),
		"trim without max": strings.Replace(strings.Replace(valid, `"action":"release"`, `"action":"trim"`, 1), `"group":"g","key":"k"`, `"stream":"s"`, 1),
	}
	for name, doc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := repair.ParsePlan([]byte(doc))
			if !errors.Is(err, repair.ErrInvalidPlan) {
				t.Fatalf("err %v, want ErrInvalidPlan", err)
			}
		})
	}
}

func TestApplyRefusesAPlanOfAnotherLayout(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	p, err := e.r.PlanRelease(ctx, repair.ReleaseRequest{Group: e.s.Projector, Key: e.s.Healthy, Force: true})
	one(t, p, err)
	p.Layout = "cluster"
	if _, err := e.r.Apply(ctx, p, repair.ApplyOptions{}); !errors.Is(err, repair.ErrInvalidPlan) {
		t.Fatalf("err %v", err)
	}
	if get(t, e.c, e.l.LeaseKey(e.s.Projector, e.s.Healthy)) != e.s.HealthyToken {
		t.Fatal("lease changed")
	}
}
