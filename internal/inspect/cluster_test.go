package inspect_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// TestClusterInspectAcrossMasters lays state down through the
// cluster-layout broker on a real 3-master Redis Cluster: the index SET
// lives in one slot while the partitions hash over every master. It
// proves that Partitions (read in chunks smaller than the partition
// count, so that every pipeline spans masters), Partition, Leases (both
// by index and by keyspace scan, which must visit every master) and Fsck
// see every partition with its lengths, groups and leases.
func TestClusterInspectAcrossMasters(t *testing.T) {
	ctx := context.Background()
	cl := testenv.StartCluster(t)
	c := cl.Client(t)
	l := broker.ClusterLayout
	b := redisbroker.New(c, redisbroker.WithLayout(l))

	const (
		cat   = "shop::order"
		group = "projector"
		n     = 48
	)
	if err := b.RegisterGroup(ctx, cat, group); err != nil {
		t.Fatal(err)
	}
	type want struct {
		main, backfill int64
		pending        int64
		token          string
	}
	wants := map[string]*want{}
	for i := range n {
		key := fmt.Sprintf("o-%d", i)
		w := &want{main: int64(i%4 + 1)}
		wants[key] = w
		for j := int64(0); j < w.main; j++ {
			if _, err := b.PublishPartitioned(ctx, cat, key, "", []byte(fmt.Sprintf("%s-%d", key, j))); err != nil {
				t.Fatal(err)
			}
		}
		if i%5 == 0 {
			w.backfill = 2
			for j := int64(0); j < w.backfill; j++ {
				if _, err := b.PublishPartitioned(ctx, cat, key, broker.DefaultBackfillSuffix, []byte("bf")); err != nil {
					t.Fatal(err)
				}
			}
		}
		if i%3 == 0 {
			// Hold a lease and leave one entry pending under it.
			lease, ok, err := b.AcquirePartitionLease(ctx, l.LeaseKey(group, key), l.GenerationKey(group, key), "node-a", time.Minute)
			if err != nil || !ok {
				t.Fatalf("acquire %s: %v %v", key, ok, err)
			}
			msgs, err := b.AckAndReadPartitionFenced(ctx, lease.Fence, l.Stream(cat, key), group, nil, 1, broker.ReadPendingThenNew)
			if err != nil || len(msgs) != 1 {
				t.Fatalf("read %s: %d %v", key, len(msgs), err)
			}
			w.pending = 1
			w.token = broker.FenceToken("node-a", lease.Generation)
		}
	}
	// Orphans for Fsck: a stream the index does not name, and an index
	// entry without a stream (the index and the stream are in different
	// slots, so they are written separately here, as a crash between the
	// broker's two steps could leave them).
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: l.Stream(cat, "stray"), Values: []string{"data", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.SAdd(ctx, l.IndexKey(cat), "ghost").Err(); err != nil {
		t.Fatal(err)
	}

	// The fixture is only a cluster test if the partitions really sit on
	// every master.
	perMaster := map[string]int{}
	for key := range wants {
		slot := c.ClusterKeySlot(ctx, l.Stream(cat, key)).Val()
		perMaster[masterOfSlot(t, ctx, c, slot)]++
	}
	if len(perMaster) != len(cl.Masters) {
		t.Fatalf("partitions spread over %d masters, want %d: %v", len(perMaster), len(cl.Masters), perMaster)
	}

	in := inspect.New(c, l, inspect.WithChunk(7))

	t.Run("Partitions", func(t *testing.T) {
		ps, err := in.Partitions(ctx, cat, inspect.PartitionOptions{PageSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		m := byKey(t, ps)
		if len(m) != n+1 {
			t.Fatalf("got %d partitions, want %d (with the ghost)", len(m), n+1)
		}
		if g := m["ghost"]; len(g.Lanes) == 0 || g.Lanes[0].Exists || g.Length != 0 {
			t.Errorf("ghost: %+v", g)
		}
		for key, w := range wants {
			p, ok := m[key]
			if !ok {
				t.Errorf("%s not listed", key)
				continue
			}
			if p.Error != "" || p.Stream != l.Stream(cat, key) || p.Length != w.main+w.backfill {
				t.Errorf("%s: stream %q length %d (want %d) error %q", key, p.Stream, p.Length, w.main+w.backfill, p.Error)
			}
			wantLanes := 1
			if w.backfill > 0 {
				wantLanes = 2
			}
			if len(p.Lanes) != wantLanes || p.Lanes[0].Length != w.main || (wantLanes == 2 && p.Lanes[1].Length != w.backfill) {
				t.Errorf("%s lanes: %+v", key, p.Lanes)
			}
			g, ok := p.Group(group)
			if !ok || !g.Registered {
				t.Errorf("%s: group %q missing or unregistered: %+v", key, group, p.Groups)
				continue
			}
			if g.Pending != w.pending || val(t, "lag", g.Lag) != w.main+w.backfill-w.pending {
				t.Errorf("%s: pending %d lag %v, want %d and %d", key, g.Pending, g.Lag, w.pending, w.main+w.backfill-w.pending)
			}
			switch {
			case w.token == "" && g.Lease != nil:
				t.Errorf("%s: lease %+v, want none", key, g.Lease)
			case w.token != "" && (g.Lease == nil || g.Lease.Token != w.token || g.Lease.Owner != "node-a"):
				t.Errorf("%s: lease %+v, want %s", key, g.Lease, w.token)
			case w.token != "" && val(t, "ttl", g.Lease.TTLMs) <= 0:
				t.Errorf("%s: lease ttl %d", key, *g.Lease.TTLMs)
			}
		}
	})

	t.Run("Partition", func(t *testing.T) {
		for _, key := range []string{"o-0", "o-1", "o-5"} {
			d, err := in.Partition(ctx, cat, key, inspect.ExplainOptions{})
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			w := wants[key]
			if d.Length != w.main+w.backfill {
				t.Errorf("%s: length %d, want %d", key, d.Length, w.main+w.backfill)
			}
			var found bool
			for _, g := range d.Groups {
				if g.Name != group {
					continue
				}
				found = true
				if g.Pending != w.pending || (w.token != "") != (g.Lease != nil) || g.Head == nil {
					t.Errorf("%s: group %+v head %+v", key, g.Group, g.Head)
				}
				if w.pending > 0 && (g.HeadPending == nil || len(g.PendingEntries) != 1 || g.PendingEntries[0].Consumer != w.token) {
					t.Errorf("%s: pending head %+v entries %+v", key, g.HeadPending, g.PendingEntries)
				}
			}
			if !found {
				t.Errorf("%s: group %q missing", key, group)
			}
		}
	})

	t.Run("Leases", func(t *testing.T) {
		wantHeld := map[string]string{}
		for key, w := range wants {
			if w.token != "" {
				wantHeld[key] = w.token
			}
		}
		byScan, err := in.Leases(ctx, inspect.LeaseQuery{Scan: inspect.ScanOptions{Count: 5, Pause: -1}})
		if err != nil {
			t.Fatal(err)
		}
		byIndex, err := in.Leases(ctx, inspect.LeaseQuery{Categories: []string{cat}})
		if err != nil {
			t.Fatal(err)
		}
		for name, ls := range map[string][]inspect.Lease{"scan": byScan, "index": byIndex} {
			held := map[string]string{}
			for _, le := range ls {
				if le.Group != group {
					t.Errorf("%s: lease of group %q", name, le.Group)
				}
				if le.State == inspect.LeaseHeld {
					held[le.Key] = val(t, "token", le.Token)
				}
			}
			if len(held) != len(wantHeld) {
				t.Errorf("%s: %d held leases, want %d", name, len(held), len(wantHeld))
			}
			for key, tok := range wantHeld {
				if held[key] != tok {
					t.Errorf("%s: %s held by %q, want %q", name, key, held[key], tok)
				}
			}
		}
		// By index every indexed (group, key) pair is listed, free ones
		// included.
		if len(byIndex) != n+1 {
			t.Errorf("index: %d leases, want %d", len(byIndex), n+1)
		}
	})

	t.Run("Fsck", func(t *testing.T) {
		var prog inspect.ScanProgress
		rep, err := in.Fsck(ctx, cat, inspect.ScanOptions{Count: 5, Pause: -1, Progress: func(p inspect.ScanProgress) { prog = p }})
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]inspect.OrphanKind{}
		for _, o := range rep.Orphans {
			kinds[o.Key] = o.Kind
		}
		if len(rep.Orphans) != 2 || kinds["stray"] != inspect.OrphanUnindexedStream || kinds["ghost"] != inspect.OrphanMissingStream {
			t.Errorf("orphans %+v", rep.Orphans)
		}
		// Every partition stream (main and backfill) and the stray one
		// were scanned, on whichever master holds them.
		if !prog.Done || prog.Found < n+1 {
			t.Errorf("scan progress %+v, want every stream found", prog)
		}
	})
}

// masterOfSlot names the master serving slot.
func masterOfSlot(t *testing.T, ctx context.Context, c *redis.ClusterClient, slot int64) string {
	t.Helper()
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr
		}
	}
	t.Fatalf("no master serves slot %d", slot)
	return ""
}
