package repair_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
)

const (
	seekCat   = "shop::order"
	seekGroup = "g"
)

// seekEnv is a partition k1 of seekCat with entries 1-0 .. 10-0 on its
// main lane, read by seekGroup up to read and acked up to acked (the
// rest of what was read is pending to an earlier generation's consumer),
// and no lease.
func seekEnv(t *testing.T, read, acked int) (context.Context, *redis.Client, *repair.Repairer) {
	t.Helper()
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	l := broker.ProteanLayout
	stream := l.Stream(seekCat, "k1")
	for i := 1; i <= 10; i++ {
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: fmt.Sprintf("%d-0", i), Values: []string{"data", fmt.Sprintf(`{"n":%d}`, i)}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c.SAdd(ctx, l.IndexKey(seekCat), "k1")
	c.XGroupCreate(ctx, stream, seekGroup, "0")
	c.Set(ctx, l.GenerationKey(seekGroup, "k1"), "1", 0)
	if read > 0 {
		if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: seekGroup, Consumer: "node-1:1", Streams: []string{stream, ">"}, Count: int64(read)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= acked; i++ {
		c.XAck(ctx, stream, seekGroup, fmt.Sprintf("%d-0", i))
	}
	return ctx, c, repair.New(c, redisbroker.New(c))
}

// deliveries reads what the group is handed from now on: its pending
// entries first, then the new ones, as a worker does.
func deliveries(t *testing.T, ctx context.Context, c *redis.Client) []string {
	t.Helper()
	stream := broker.ProteanLayout.Stream(seekCat, "k1")
	var ids []string
	claimed, _, err := c.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: stream, Group: seekGroup, Consumer: "node-1:2", Start: "0", Count: 100}).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range claimed {
		ids = append(ids, m.ID)
	}
	res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: seekGroup, Consumer: "node-1:2", Streams: []string{stream, ">"}, Count: 100, Block: -1}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	for _, s := range res {
		for _, m := range s.Messages {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

func ids(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%d-0", i))
	}
	return out
}

func TestSeekUnownedRewindHandsEntriesBackOnceInOrder(t *testing.T) {
	// Read 1..10, acked 1..2: 3..10 pending. Rewind to 5-0: 3..5 stay
	// pending (never finished, handled first), 6..10 are acked and
	// delivered again by the read from 5-0.
	ctx, c, r := seekEnv(t, 10, 2)
	to, _ := repair.ParseSeekTo("5-0", time.Now())
	p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: to})
	it := one(t, p, err)
	if !it.Allowed || it.Precondition.Seek.Owner != repair.SeekOwnerNone {
		t.Fatalf("item not allowed as unowned: %+v", it)
	}
	ln := it.Precondition.Seek.Lanes[0]
	if ln.Rehandle != 5 || ln.Skip != 0 || ln.Pending != 8 || ln.PendingAcked != 5 || ln.PendingKept != 3 || ln.To != "5-0" {
		t.Fatalf("main lane planned %+v, want 5 handled again, 8 pending (5 acked, 3 kept), to 5-0", ln)
	}
	p = roundTrip(t, p)
	o, err := r.Apply(ctx, p, repair.ApplyOptions{})
	if err != nil || o != repair.OutcomeApplied {
		t.Fatalf("apply: %v %v %+v", o, err, p.Items)
	}
	if got, want := deliveries(t, ctx, c), ids(3, 10); !slices.Equal(got, want) {
		t.Fatalf("after the rewind the group is handed %v, want %v (each once, in order)", got, want)
	}
	if p.Items[0].Precondition.Seek.DoneAt == nil {
		t.Fatal("applied item does not say when it was done")
	}
}

func TestSeekUnownedForwardSkipsThePlannedEntries(t *testing.T) {
	ctx, c, r := seekEnv(t, 3, 2) // 3-0 pending
	to, _ := repair.ParseSeekTo("7-0", time.Now())
	p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Keys: []string{"k1"}, Group: seekGroup, Target: to})
	it := one(t, p, err)
	ln := it.Precondition.Seek.Lanes[0]
	if ln.Skip != 4 || ln.Rehandle != 0 || ln.PendingAcked != 1 {
		t.Fatalf("planned %+v, want 4 skipped (4..7) and 1 pending acked (3)", ln)
	}
	if o, err := r.Apply(ctx, p, repair.ApplyOptions{}); err != nil || o != repair.OutcomeApplied {
		t.Fatalf("apply: %v %v %+v", o, err, p.Items)
	}
	if got, want := deliveries(t, ctx, c), ids(8, 10); !slices.Equal(got, want) {
		t.Fatalf("after the forward seek the group is handed %v, want %v", got, want)
	}
}

func TestSeekShiftBack(t *testing.T) {
	ctx, c, r := seekEnv(t, 10, 10)
	p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: repair.SeekTarget{Kind: repair.SeekShift, Shift: -3}})
	if it := one(t, p, err); it.Precondition.Seek.Lanes[0].To != "7-0" || it.Precondition.Seek.Lanes[0].Rehandle != 3 {
		t.Fatalf("shift -3 planned %+v, want to 7-0, 3 handled again", it.Precondition.Seek.Lanes[0])
	}
	apply(t, env{r: r}, p)
	if got, want := deliveries(t, ctx, c), ids(8, 10); !slices.Equal(got, want) {
		t.Fatalf("handed %v, want %v", got, want)
	}
}

func TestSeekStalePlanConflictsAndChangesNothing(t *testing.T) {
	ctx, c, r := seekEnv(t, 10, 10)
	l := broker.ProteanLayout
	p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: repair.SeekTarget{Kind: repair.SeekToEarliest}})
	one(t, p, err)
	// A node takes the partition after the plan.
	c.Set(ctx, l.GenerationKey(seekGroup, "k1"), "2", 0)
	c.Set(ctx, l.LeaseKey(seekGroup, "k1"), "node-2:2", time.Minute)
	o, err := r.Apply(ctx, p, repair.ApplyOptions{})
	if err != nil || o != repair.OutcomeConflict || o.ExitCode() != clierr.ExitConflict {
		t.Fatalf("apply of a stale plan: %v %v, want conflict (exit 5): %+v", o, err, p.Items)
	}
	if got := deliveries(t, ctx, c); len(got) != 0 {
		t.Fatalf("a conflicting seek moved the group: it is handed %v", got)
	}
}

func TestSeekForeignLeaseNeedsForce(t *testing.T) {
	ctx, c, r := seekEnv(t, 10, 10)
	l := broker.ProteanLayout
	c.Set(ctx, l.GenerationKey(seekGroup, "k1"), "3", 0)
	c.Set(ctx, l.LeaseKey(seekGroup, "k1"), "protean-worker-7:3", time.Minute)
	req := repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: repair.SeekTarget{Kind: repair.SeekToEarliest}}
	p, err := r.PlanSeek(ctx, req)
	it := one(t, p, err)
	if it.Allowed || it.Precondition.Seek.Owner != repair.SeekOwnerForeign {
		t.Fatalf("a foreign lease was not refused: %+v", it)
	}
	if o, _ := r.Apply(ctx, p, repair.ApplyOptions{}); o != repair.OutcomeRefused || o.ExitCode() != clierr.ExitRefused {
		t.Fatalf("apply: %v, want refused (exit 6)", o)
	}
	if got := deliveries(t, ctx, c); len(got) != 0 {
		t.Fatalf("a refused seek moved the group: %v", got)
	}
	req.Force = true
	p, err = r.PlanSeek(ctx, req)
	if it := one(t, p, err); !it.Allowed {
		t.Fatalf("--force not allowed: %+v", it)
	}
	if o, err := r.Apply(ctx, p, repair.ApplyOptions{}); err != nil || o != repair.OutcomeApplied {
		t.Fatalf("forced apply: %v %v %+v", o, err, p.Items)
	}
	if n := c.Exists(ctx, l.LeaseKey(seekGroup, "k1")).Val(); n != 0 {
		t.Fatal("the foreign lease is still there")
	}
	if got, want := deliveries(t, ctx, c), ids(1, 10); !slices.Equal(got, want) {
		t.Fatalf("handed %v, want %v", got, want)
	}
}

// A forced seek of a foreign worker's partition that conflicts (here the
// generation moved under the same lease value) changes nothing: the
// worker keeps its lease, as it would if the lease had moved. Releasing
// the lease before the seek's own check took the partition from it.
func TestSeekForeignConflictKeepsTheLease(t *testing.T) {
	ctx, c, r := seekEnv(t, 10, 10)
	l := broker.ProteanLayout
	c.Set(ctx, l.GenerationKey(seekGroup, "k1"), "3", 0)
	c.Set(ctx, l.LeaseKey(seekGroup, "k1"), "protean-worker-7:3", time.Minute)
	p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: repair.SeekTarget{Kind: repair.SeekToEarliest}, Force: true})
	if it := one(t, p, err); !it.Allowed {
		t.Fatalf("--force not allowed: %+v", it)
	}
	c.Set(ctx, l.GenerationKey(seekGroup, "k1"), "4", 0)
	if o, err := r.Apply(ctx, p, repair.ApplyOptions{}); err != nil || o != repair.OutcomeConflict {
		t.Fatalf("apply: %v %v %+v, want conflict", o, err, p.Items)
	}
	if v := c.Get(ctx, l.LeaseKey(seekGroup, "k1")).Val(); v != "protean-worker-7:3" {
		t.Fatalf("a conflicting forced seek left the lease %q, want protean-worker-7:3", v)
	}
	if got := deliveries(t, ctx, c); len(got) != 0 {
		t.Fatalf("a conflicting seek moved the group: %v", got)
	}
}

func TestSeekBadInput(t *testing.T) {
	ctx, c, r := seekEnv(t, 0, 0)
	if _, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: "nobody", Target: repair.SeekTarget{Kind: repair.SeekToEarliest}}); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("unknown group: %v, want inspect.ErrNotFound", err)
	}
	for _, bad := range []string{"yesterday", "2030-01-01T00:00:00Z", "-5m-ago", "1-2-3"} {
		if _, err := repair.ParseSeekTo(bad, time.Now()); !errors.Is(err, repair.ErrBadSeekTarget) {
			t.Errorf("--to %q: %v, want ErrBadSeekTarget", bad, err)
		}
	}
	c.Set(ctx, broker.ProteanLayout.Stream(seekCat, "k2"), "x", 0)
	c.SAdd(ctx, broker.ProteanLayout.IndexKey(seekCat), "k2")
	_, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Keys: []string{"k2"}, Group: seekGroup, Target: repair.SeekTarget{Kind: repair.SeekToEarliest}})
	if code, _ := clierr.Classify(err); code != clierr.ExitWrongType {
		t.Fatalf("wrong key type: %v (exit %d), want exit 9", err, code)
	}
}

// A plan over many partitions is read several partitions at a time and
// keeps the keys' order, each item planned for its own key, with the
// foreign owner looked up once for all.
func TestSeekPlanOfManyPartitionsKeepsTheirOrder(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	l := broker.ProteanLayout
	var keys []string
	for i := range 100 {
		k := fmt.Sprintf("k%03d", i)
		keys = append(keys, k)
		stream := l.Stream(seekCat, k)
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: "1-0", Values: []string{"data", "{}"}}).Err(); err != nil {
			t.Fatal(err)
		}
		c.SAdd(ctx, l.IndexKey(seekCat), k)
		c.XGroupCreate(ctx, stream, seekGroup, "$")
		if i%3 == 0 {
			c.Set(ctx, l.LeaseKey(seekGroup, k), "other-node:1", time.Minute)
		}
	}
	r := repair.New(c, redisbroker.New(c))
	p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: repair.SeekTarget{Kind: repair.SeekToEarliest}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != len(keys) {
		t.Fatalf("%d items, want %d", len(p.Items), len(keys))
	}
	for i, it := range p.Items {
		if it.Target.Key != keys[i] {
			t.Fatalf("item %d is %q, want %q", i, it.Target.Key, keys[i])
		}
		leased := i%3 == 0
		if got := it.Precondition.Seek.Owner == repair.SeekOwnerForeign; got != leased {
			t.Errorf("%s: owner %q, leased by another node: %v", it.Target.Key, it.Precondition.Seek.Owner, leased)
		}
		if leased == it.Allowed {
			t.Errorf("%s: allowed %v, leased by another node %v (a foreign lease needs --force)", it.Target.Key, it.Allowed, leased)
		}
	}
}

// The planners of one plan look each lease owner up once: for an owner
// that is no protctl node the lookup scans the keyspace, and sixteen
// planners missing the cache together scanned it sixteen times (found by
// a reviewer: 80 SCAN calls where 5 were needed).
func TestSeekPlanLooksEachOwnerUpOnce(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	l := broker.ProteanLayout
	pipe := c.Pipeline()
	for i := range 20_000 {
		pipe.Set(ctx, fmt.Sprintf("filler:%05d", i), "x", 0)
	}
	for i := range 64 {
		k := fmt.Sprintf("k%02d", i)
		stream := l.Stream(seekCat, k)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: "1-0", Values: []string{"data", "{}"}})
		pipe.SAdd(ctx, l.IndexKey(seekCat), k)
		pipe.XGroupCreate(ctx, stream, seekGroup, "$")
		pipe.Set(ctx, l.LeaseKey(seekGroup, k), "foreign-node:1", time.Minute)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	scans := func() int64 {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_scan:calls="); ok {
				n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				return n
			}
		}
		return 0
	}
	r := repair.New(c, redisbroker.New(c))
	one := func(keys ...string) int64 {
		before := scans()
		p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Keys: keys, Target: repair.SeekTarget{Kind: repair.SeekToEarliest}})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			if it.Precondition.Seek.Owner != repair.SeekOwnerForeign {
				t.Fatalf("%s: owner %q, want foreign", it.Target.Key, it.Precondition.Seek.Owner)
			}
		}
		return scans() - before
	}
	single := one("k00")
	var all []string
	for i := range 64 {
		all = append(all, fmt.Sprintf("k%02d", i))
	}
	if got := one(all...); got != single {
		t.Fatalf("planning 64 partitions of one foreign owner ran %d SCAN calls, planning one ran %d: the owner was looked up more than once", got, single)
	}
}

// failedWithdrawal is lostSeekReply whose withdrawals fail too.
type failedWithdrawal struct{ lostSeekReply }

func (b failedWithdrawal) CancelSeekRequest(context.Context, string, string, string) (string, error) {
	return "", errors.New("connection reset")
}

// When a request's call fails and withdrawing it fails as well, the
// request may still be carried out: the error the operator gets says so
// (before, it said only the call's error, and the item "not applied").
func TestSeekRequestWhoseWithdrawalFailsSaysItMayStillRun(t *testing.T) {
	ctx, c, _ := seekEnv(t, 10, 10)
	r := repair.New(c, failedWithdrawal{lostSeekReply{redisbroker.New(c)}})
	protctlOwned(t, ctx, c)
	p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: repair.SeekTarget{Kind: repair.SeekToEarliest}})
	if it := one(t, p, err); !it.Allowed {
		t.Fatalf("not planned: %+v", it)
	}
	_, err = r.Apply(ctx, p, repair.ApplyOptions{SeekWait: time.Hour})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "may still carry it out") {
		t.Fatalf("apply: %v, want context.Canceled saying the owner may still carry it out", err)
	}
}
