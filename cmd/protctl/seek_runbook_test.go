package main

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// seekRunbookDefs defines the "replay since a bad deploy" runbook of
// docs/operations.md (TestRunbooks runs it): partitions o-1 and o-2 of
// shop::order hold an entry a minute from 2023-11-14T22:13:20Z
// (1700000000000-0) to 22:18:20, all handled and acked by
// app.OrderProjector, whose nodes are idle (no lease).
func seekRunbookDefs() map[string]runbookDef {
	const (
		cat, group = "shop::order", "app.OrderProjector"
		target     = "1700000099999-18446744073709551615"
	)
	l := broker.ProteanLayout
	position := func(rb *rbEnv, key string) string {
		rb.t.Helper()
		for _, g := range rb.c.XInfoGroups(rb.ctx(), l.Stream(cat, key)).Val() {
			if g.Name == group {
				return g.LastDeliveredID
			}
		}
		return ""
	}
	return map[string]runbookDef{
		"replay-deploy": {
			setup: func(t *testing.T) *rbEnv {
				srv := testenv.StartRedis(t)
				c := srv.Client(t)
				ctx := t.Context()
				for _, k := range []string{"o-1", "o-2"} {
					stream := l.Stream(cat, k)
					for i := range 6 {
						c.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: fmt.Sprintf("%d-0", 1700000000000+int64(i)*60000), Values: []string{"data", fmt.Sprintf(`{"data":{"n":%d}}`, i)}})
					}
					c.SAdd(ctx, l.IndexKey(cat), k)
					c.SAdd(ctx, l.GroupsKey(cat), group)
					c.XGroupCreate(ctx, stream, group, "0")
					c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "node-1:1", Streams: []string{stream, ">"}, Count: 10})
					for i := range 6 {
						c.XAck(ctx, stream, group, fmt.Sprintf("%d-0", 1700000000000+int64(i)*60000))
					}
					c.Set(ctx, l.GenerationKey(group, k), "1", 0)
				}
				e := &opsEnv{t: t, srv: srv, c: c}
				return &rbEnv{opsEnv: e, t: t, dir: t.TempDir(), env: map[string]string{"PROTCTL_REDIS": srv.URL()}}
			},
			steps: []rbStep{
				{cmd: "protctl partitions seek shop::order --group app.OrderProjector --to 2023-11-14T22:15:00Z --dry-run", check: func(rb *rbEnv, r result) {
					for _, k := range []string{"o-1", "o-2"} {
						rb.wantRow(r, "seek", regexp.QuoteMeta(group+" on "+cat+"/"+k), regexp.QuoteMeta("main 1700000300000-0 -> "+target+"; lease released (none held since generation 1)"), "yes",
							"no lease is held: seek in one step .*4 entries handled again, 0 skipped, 0 pending acked")
						if position(rb, k) != "1700000300000-0" {
							rb.t.Errorf("the dry run moved %s", k)
						}
					}
				}},
				{cmd: "protctl partitions seek shop::order --group app.OrderProjector --to 2023-11-14T22:15:00Z --dry-run -o json > seek.json"},
				{cmd: "protctl apply -f seek.json --yes", check: func(rb *rbEnv, r result) {
					for _, k := range []string{"o-1", "o-2"} {
						rb.wantRow(r, "seek", regexp.QuoteMeta(group+" on "+cat+"/"+k), ".*", "yes", "applied", "sought at .* under generation 1: .*")
						if got := position(rb, k); got != target {
							rb.t.Errorf("%s: the group is at %s, want %s", k, got, target)
						}
					}
				}},
				{cmd: "protctl partitions show shop::order o-1", out: []string{"lagging"}},
			},
		},
	}
}
