package inspect_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// A listing reads a group's lease in the first round trip when it knows
// the group before reading the lanes (registered, the filter, or found on
// an earlier chunk), in the second when the group is new on the main
// lane, and in a third when it is only on the backfill lane. Whichever
// round trip reads it, every group gets its own lease, generation and
// TTL. The partitions mix every case, in chunks of 1, 3 and all, so that
// groups are learned between chunks or not at all. For a known group a
// PTTL is asked only where a lease exists.
func TestPartitionsReadEveryGroupsLeaseWhereverItIsFound(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	cat := testenv.Protean(t, c).Category("mix").RegisterGroup("reg")
	type want struct {
		token string // "" for no lease
		gen   int64  // 0 for no generation key
	}
	wants := map[string]map[string]want{} // key -> group -> want
	for i := 0; i < 20; i++ {
		key := "k" + strconv.Itoa(i)
		p := cat.Partition(key).Entries(2)
		w := map[string]want{}
		// A registered group everywhere, leased on every other key.
		p.Group("reg")
		if i%2 == 0 {
			p.Lease("node-r", int64(i+1), time.Minute)
			w["reg"] = want{broker.FenceToken("node-r", int64(i+1)), int64(i + 1)}
		} else {
			w["reg"] = want{}
		}
		// An unregistered group on the main lane of some keys.
		if i%3 == 0 {
			p.Group("main-only").Lease("node-m", 7, time.Minute)
			w["main-only"] = want{broker.FenceToken("node-m", 7), 7}
		}
		// A group only on the backfill lane of some keys.
		if i%4 == 1 {
			p.Backfill().Entries(1).Group("bf-only")
			if i%8 == 1 {
				p.Lease("node-b", 9, time.Minute)
				w["bf-only"] = want{broker.FenceToken("node-b", 9), 9}
			} else {
				w["bf-only"] = want{}
			}
			p.Main()
		}
		wants[key] = w
	}

	for _, chunk := range []int{1, 3, 250} {
		t.Run(fmt.Sprintf("chunk%d", chunk), func(t *testing.T) {
			in := inspect.New(c, broker.ProteanLayout, inspect.WithChunk(chunk), inspect.WithConcurrency(2))
			if _, err := c.ConfigResetStat(ctx).Result(); err != nil {
				t.Fatal(err)
			}
			ps, err := in.Partitions(ctx, "mix", inspect.PartitionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for key, p := range byKey(t, ps) {
				w := wants[key]
				var names []string
				for _, g := range p.Groups {
					names = append(names, g.Name)
				}
				if !slices.IsSorted(names) || len(names) != len(w) {
					t.Fatalf("%s: groups %v, want %v", key, names, w)
				}
				for _, g := range p.Groups {
					gw, ok := w[g.Name]
					if !ok {
						t.Fatalf("%s: unexpected group %q", key, g.Name)
					}
					switch {
					case gw.token == "" && g.Lease != nil:
						t.Errorf("%s/%s: lease %+v, want none", key, g.Name, g.Lease)
					case gw.token != "" && (g.Lease == nil || g.Lease.Token != gw.token || g.Lease.TTLMs == nil || *g.Lease.TTLMs <= 0):
						t.Errorf("%s/%s: lease %+v, want %s with a TTL", key, g.Name, g.Lease, gw.token)
					}
					if gw.gen == 0 && g.Generation != nil || gw.gen != 0 && (g.Generation == nil || *g.Generation != gw.gen) {
						t.Errorf("%s/%s: generation %v, want %d", key, g.Name, g.Generation, gw.gen)
					}
					if g.Registered != (g.Name == "reg") {
						t.Errorf("%s/%s: registered %v", key, g.Name, g.Registered)
					}
				}
			}

			// Known from the start (the filter): one PTTL per lease.
			if _, err := c.ConfigResetStat(ctx).Result(); err != nil {
				t.Fatal(err)
			}
			ps, err = in.Partitions(ctx, "mix", inspect.PartitionOptions{Group: "reg"})
			if err != nil || len(ps) != 20 {
				t.Fatalf("filtered: %d partitions, %v", len(ps), err)
			}
			if got := commandCalls(t, c, "pttl"); got != 10 {
				t.Errorf("%d PTTL for the 10 leases of the filter group", got)
			}
		})
	}
}

// EachPartitionByKey walks the keys in the order given (indexed or not),
// chunk by chunk with several in flight, applying Filter and Limit;
// PartitionsByKey ignores both.
func TestEachPartitionByKeyKeepsTheOrderGiven(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	cat := testenv.Protean(t, c).Category("ord")
	var keys []string
	for i := 0; i < 95; i++ {
		k := fmt.Sprintf("k%03d", i)
		cat.Partition(k).Entries(1 + i%3)
		keys = append(keys, k)
	}
	cat.Partition("orphan").Entries(1).Unindexed()
	keys = append(keys, "orphan", "missing")
	slices.Reverse(keys)
	in := inspect.New(c, broker.ProteanLayout, inspect.WithChunk(7), inspect.WithConcurrency(3))

	var got []string
	err := in.EachPartitionByKey(ctx, "ord", keys, inspect.PartitionOptions{}, func(p inspect.Partition) error {
		got = append(got, p.Key)
		return nil
	})
	if err != nil || !slices.Equal(got, keys) {
		t.Fatalf("walked %v (%v), want %v", got, err, keys)
	}

	got = nil
	long := func(p *inspect.Partition) bool { return p.Length == 3 }
	err = in.EachPartitionByKey(ctx, "ord", keys, inspect.PartitionOptions{Filter: long, Limit: 10}, func(p inspect.Partition) error {
		got = append(got, p.Key)
		return nil
	})
	var want []string
	for _, k := range keys {
		if n, err := strconv.Atoi(k[1:]); err == nil && n%3 == 2 && len(want) < 10 {
			want = append(want, k)
		}
	}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("filtered and limited: %v (%v), want %v", got, err, want)
	}

	ps, err := in.PartitionsByKey(ctx, "ord", keys, inspect.PartitionOptions{Filter: long, Limit: 1})
	if err != nil || len(ps) != len(keys) || ps[0].Key != "missing" || ps[0].Lanes[0].Exists || ps[len(ps)-1].Key != "k000" {
		t.Fatalf("PartitionsByKey: %d partitions (%v), want %d from missing to k000", len(ps), err, len(keys))
	}
}

// commandCalls is the server's call count of cmd since the last CONFIG
// RESETSTAT (INFO commandstats; 0 when it was not called).
func commandCalls(t *testing.T, c *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 0
}
