package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/internal/tui"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// clusterRow is what the cluster tests compare between `partitions ls`
// and the dashboard's data layer: the partition's size and its group's
// pending count and lease owner.
type clusterRow struct {
	length  int64
	pending int64
	owner   string
}

// TestClusterPartitionsListAndDashboard runs `protctl partitions ls -o
// json --layout cluster --redis <one node>` in-process against a real
// 3-master Redis Cluster whose partitions (written by the cluster-layout
// broker) hash over every master, and reads the same category through
// the dashboard's data layer (dashboardOptions' Source, the
// tui.RedisBackend over the factory's Inspector): both list every
// partition, with the same lengths, pending counts and lease owners.
func TestClusterPartitionsListAndDashboard(t *testing.T) {
	ctx := context.Background()
	cl := testenv.StartCluster(t)
	c := cl.Client(t)
	l := broker.ClusterLayout
	b := redisbroker.New(c, redisbroker.WithLayout(l))

	const (
		cat   = "shop::order"
		other = "shop::payment"
		grp   = "projector"
		n     = 30
	)
	want := map[string]clusterRow{}
	for i := range n {
		key := fmt.Sprintf("o-%d", i)
		row := clusterRow{length: int64(i%3 + 1)}
		for range row.length {
			if _, err := b.PublishPartitioned(ctx, cat, key, "", []byte(key)); err != nil {
				t.Fatal(err)
			}
		}
		if i%4 == 0 {
			lease, ok, err := b.AcquirePartitionLease(ctx, l.LeaseKey(grp, key), l.GenerationKey(grp, key), "node-a", time.Minute)
			if err != nil || !ok {
				t.Fatalf("acquire %s: %v %v", key, ok, err)
			}
			msgs, err := b.AckAndReadPartitionFenced(ctx, lease.Fence, l.Stream(cat, key), grp, nil, 1, broker.ReadPendingThenNew)
			if err != nil || len(msgs) != 1 {
				t.Fatalf("read %s: %d %v", key, len(msgs), err)
			}
			row.pending, row.owner = 1, "node-a"
		}
		want[key] = row
	}
	for i := range 5 {
		if _, err := b.PublishPartitioned(ctx, other, fmt.Sprintf("p-%d", i), "", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// A node other than the first seeds the client: the CLI must find the
	// others through the cluster, not through the URL.
	url := "redis://" + cl.Masters[len(cl.Masters)-1].Addr

	t.Run("partitions ls", func(t *testing.T) {
		r := newCLI(t).run("partitions", "ls", cat, "-o", "json", "--layout", "cluster", "--redis", url)
		r.wantCode(t, 0)
		if got := cliRows(t, r, grp); !maps.Equal(got, want) {
			t.Fatalf("partitions ls rows differ\n got %v\nwant %v", got, want)
		}
	})

	t.Run("partitions ls every category", func(t *testing.T) {
		// Without CATEGORY the categories are found by a SCAN, which must
		// visit every master: the two indexes may sit on different ones.
		r := newCLI(t).run("partitions", "ls", "-o", "json", "--layout", "cluster", "--redis", url)
		r.wantCode(t, 0)
		if keys := lsKeys(t, r); len(keys) != n+5 {
			t.Fatalf("%d partitions listed, want %d: %v", len(keys), n+5, keys)
		}
	})

	t.Run("dashboard source", func(t *testing.T) {
		ios, _, _, _ := output.Test()
		ios.SetTTY(true)
		f := newFactory(ios)
		f.Getenv = func(k string) string {
			switch k {
			case "PROTCTL_REDIS":
				return url
			case "PROTCTL_LAYOUT":
				return "cluster"
			}
			return ""
		}
		t.Cleanup(f.close)
		_ = newRootCmd(f) // binds the global flags' defaults
		opts := &tuiOptions{IO: ios, Settings: f.Settings, Inspector: f.Inspector, Repairer: f.Repairer,
			Operator: "protctl:test", Refresh: time.Hour, View: "partitions", ReapMinIdle: tui.DefaultReapMinIdle}
		dash, err := dashboardOptions(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		cats, err := dash.Source.Categories(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Sort(cats); !slices.Equal(cats, []string{cat, other}) {
			t.Fatalf("dashboard categories %v", cats)
		}
		got := map[string]clusterRow{}
		err = dash.Source.Partitions(ctx, cat, func(ps []inspect.Partition) error {
			for _, p := range ps {
				if _, dup := got[p.Key]; dup {
					t.Errorf("%s on two pages", p.Key)
				}
				row := clusterRow{length: p.Length}
				if g, ok := p.Group(grp); ok {
					row.pending = g.Pending
					if g.Lease != nil {
						row.owner = g.Lease.Owner
					}
				}
				got[p.Key] = row
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("dashboard rows differ\n got %v\nwant %v", got, want)
		}
		leases, err := dash.Source.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, le := range leases {
			if le.State == inspect.LeaseHeld {
				held++
				if want[le.Key].owner != "node-a" {
					t.Errorf("lease on %s listed as held", le.Key)
				}
			}
		}
		if held != (n+3)/4 {
			t.Errorf("%d held leases, want %d", held, (n+3)/4)
		}
	})
}

// cliRows decodes `partitions ls -o json` into rows for group grp.
func cliRows(t *testing.T, r result, grp string) map[string]clusterRow {
	t.Helper()
	var doc struct {
		Items []struct {
			Key    string  `json:"key"`
			Length int64   `json:"length"`
			Groups []group `json:"groups"`
		} `json:"items"`
	}
	decode(t, r.stdout, &doc)
	out := map[string]clusterRow{}
	for _, it := range doc.Items {
		if _, dup := out[it.Key]; dup {
			t.Errorf("%s listed twice", it.Key)
		}
		row := clusterRow{length: it.Length}
		for _, g := range it.Groups {
			if g.Name != grp {
				continue
			}
			row.pending = g.Pending
			if g.Lease != nil {
				row.owner = g.Lease.Owner
			}
		}
		out[it.Key] = row
	}
	return out
}
