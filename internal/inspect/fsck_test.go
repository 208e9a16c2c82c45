package inspect_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// A category's own streams under the layout's reserved names (Protean's
// category dead-letter stream C:dlq, C:<backfill> and its C:<backfill>:dlq,
// a C:__x__) and a partition's C:K:dlq are no partitions: fsck neither
// reports them as unindexed nor counts them, in either layout.
func TestFsckLeavesReservedStreamsOut(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	for _, l := range []broker.Layout{broker.ProteanLayout, broker.ClusterLayout} {
		t.Run(l.String(), func(t *testing.T) {
			srv.FlushAll(t)
			f := testenv.Protean(t, c).WithLayout(l)
			cat := f.Category("shop::order")
			cat.Partition("o-1").Entries(2).Group("g").Read(2)
			cat.DeadLetter(testenv.ProteanDeadLetter{Group: "g", RetryCount: 3})
			for _, k := range []string{"shop::order:backfill", "shop::order:backfill:dlq", "shop::order:__other__", l.DLQStream("shop::order", "o-1")} {
				if err := c.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []string{"data", "{}"}}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := inspect.New(c, l).Fsck(ctx, "shop::order", inspect.ScanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Orphans) != 0 || rep.Streams != 1 || rep.Indexed != 1 {
				t.Fatalf("fsck %+v, want no orphans, 1 stream, 1 indexed", rep)
			}
		})
	}
}
