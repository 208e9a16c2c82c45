package main

import (
	"context"
	"testing"

	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// The dashboard's topic seek (W on a topics-view row, then the target)
// applies `topics seek`'s plan for that subscription and partition: the
// dialog shows the equivalent command, the apply is audited as that
// command, and the checkpoint ends where the command leaves it (the free
// partition set backwards, its generation bumped, the other untouched).
func TestTUITopicSeekAppliesTheCLIsPlan(t *testing.T) {
	ctx := context.Background()
	cl, c := topicSeekCLI(t)
	d := newDashboardEnv(t, cl.env, func(o *tuiOptions) {
		o.Services, o.View = []string{"shop"}, "topics"
	})
	d.wantView("orders", "ledger", "W seek")
	d.keys("/")
	d.typeText("orders 1 ") // the row of partition 1 only
	d.keys("enter")
	d.keys("W")
	d.typeText("earliest")
	d.keys("enter")
	want := "protctl topics seek orders --service shop --subscription ledger --partition 1 --to earliest"
	d.wantView("Seek ledger on orders/1 (service shop) to earliest", want, "Apply 1 change?")
	wantCheckpoints(t, c, "1", "2") // planning changed nothing
	d.keys("y")
	d.wantView("Result: 1 applied")
	wantCheckpoints(t, c, "1", "0")
	if gen, _ := c.Get(ctx, redisstore.TopicLeaseGroup("shop", "orders").GenerationKey(1)).Result(); gen != "4" {
		t.Fatalf("generation of partition 1 is %q after the seek, want 4", gen)
	}
	entries, err := audit.List(ctx, c, audit.ListOptions{Limit: 1})
	if err != nil || len(entries) != 1 || entries[0].CommandLine != want || entries[0].Actions[0] != "topic-seek" {
		t.Fatalf("audit %+v: %v, want the command %q", entries, err, want)
	}
}

// A malformed target in the topics view's seek prompt plans nothing and
// says why; the checkpoints stay.
func TestTUITopicSeekBadTargetPlansNothing(t *testing.T) {
	cl, c := topicSeekCLI(t)
	d := newDashboardEnv(t, cl.env, func(o *tuiOptions) {
		o.Services, o.View = []string{"shop"}, "topics"
	})
	d.keys("W")
	d.typeText("yesterday")
	d.keys("enter")
	d.wantView(`seek: broker: seek: invalid --to "yesterday"`)
	wantCheckpoints(t, c, "1", "2")
}
