package repair_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// TestSeekFreeBatchKeepsEachItemsCheck: an unpaced apply runs the free
// seeks of many partitions in pipelined batches, and each one still
// proves its own precondition: of 1,200 free partitions (three batches),
// the one leased and the one moved since the plan are conflicts that
// change nothing, every other one is applied, results and OnItem calls
// come in the plan's order, and every applied key is woken.
func TestSeekFreeBatchKeepsEachItemsCheck(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	l := broker.ProteanLayout
	const n = 1200
	key := func(i int) string { return fmt.Sprintf("k%04d", i) }
	p := c.Pipeline()
	for i := range n {
		s := l.Stream(seekCat, key(i))
		p.SAdd(ctx, l.IndexKey(seekCat), key(i))
		for e := 1; e <= 3; e++ {
			p.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: fmt.Sprintf("%d-0", e), Values: []string{"data", "{}"}})
		}
		p.XGroupCreate(ctx, s, seekGroup, "$")
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	r := repair.New(c, redisbroker.New(c))
	plan, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: repair.SeekTarget{Kind: repair.SeekToEarliest}})
	if err != nil {
		t.Fatal(err)
	}
	const leased, moved = 7, 801
	c.Set(ctx, l.LeaseKey(seekGroup, key(leased)), "w:1", time.Minute)
	c.XGroupSetID(ctx, l.Stream(seekCat, key(moved)), seekGroup, "2-0")
	var order []int
	out, err := r.Apply(ctx, plan, repair.ApplyOptions{OnItem: func(i int, _ repair.Item) { order = append(order, i) }})
	if err != nil || out != repair.OutcomePartial && out != repair.OutcomeConflict {
		t.Fatalf("apply: %s, %v", out, err)
	}
	for i, j := range order {
		if len(order) != n || j != i {
			t.Fatalf("OnItem called %d times, call %d for item %d", len(order), i, j)
		}
	}
	for i := range n {
		it := plan.Items[i]
		pos := c.XInfoGroups(ctx, l.Stream(seekCat, key(i))).Val()[0].LastDeliveredID
		switch i {
		case leased:
			if it.Result != repair.ResultConflict || !strings.Contains(it.Detail, "lease appeared") || pos != "3-0" {
				t.Errorf("leased %s: %s %q at %s", key(i), it.Result, it.Detail, pos)
			}
		case moved:
			if it.Result != repair.ResultConflict || !strings.Contains(it.Detail, "moved since the plan") || pos != "2-0" {
				t.Errorf("moved %s: %s %q at %s", key(i), it.Result, it.Detail, pos)
			}
		default:
			if it.Result != repair.ResultApplied || pos != "0-0" || it.Precondition.Seek.DoneAt == nil {
				t.Fatalf("%s: %s %q at %s", key(i), it.Result, it.Detail, pos)
			}
		}
	}
	wakes := c.SMembers(ctx, redisbroker.SeekRequestsKey(seekGroup)).Val()
	if len(wakes) != n-2 {
		t.Fatalf("%d wake members, want %d", len(wakes), n-2)
	}
}
