package exporter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/acl"
	"github.com/protctl/protctl/internal/exporter"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// TestExporterRunsAsTheReadOnlyRole: a collection of every kind of
// partition (halted, parked, orphaned, lagging, a category pattern and a
// Kafka topic) succeeds as the readonly ACL user, with the ledger read
// as protctl exporter reads it: the role grants every command the
// exporter sends.
func TestExporterRunsAsTheReadOnlyRole(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	admin := srv.Client(t)
	const cat, g = "shop::order", "app.Projector"
	f := testenv.Protean(t, admin)
	o := f.Category(cat)
	o.Partition("halted").Entries(3).Group(g).Lease("w", 2, time.Minute).Read(1).Deliveries(3, time.Second)
	o.Partition("orphaned").At(time.Now().Add(-time.Hour)).Entries(2).Group(g).Consumer("w:1").Read(1).ExpiredLease(1)
	parked := o.Partition("parked").Entries(2).Group(g).Lease("w", 3, time.Minute).Read(1)
	store := redisstore.New(admin)
	if err := store.Park(ctx, broker.Fence{LeaseKey: parked.LeaseKey(), Token: "w:3"}, ledger.Parked{
		Subscription: g, Source: source.Redis, Aggregate: "parked", Category: cat, Partition: "parked",
		Position: parked.IDs()[0], Error: "boom",
	}); err != nil {
		t.Fatal(err)
	}

	k := testenv.StartKafka(t, 1, "events")
	k.Produce(t, k.Client(t), &kgo.Record{Topic: "events", Value: []byte("v")})
	grp := redisstore.TopicLeaseGroup("shop", "events")
	admin.Set(ctx, grp.LeaseKey(0), "w:1", time.Minute)
	if err := store.Save(ctx, broker.Fence{LeaseKey: grp.LeaseKey(0), Token: "w:1"}, grp.String(), "ledger", 0, 0); err != nil {
		t.Fatal(err)
	}
	src, err := kafkasource.New(k.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)

	p, err := acl.For(acl.ReadOnly, acl.Options{User: "exporter"})
	if err != nil {
		t.Fatal(err)
	}
	args := []any{}
	for _, w := range strings.Fields(p.SetUser) {
		args = append(args, w)
	}
	if err := admin.Do(ctx, append(args, ">secret")...).Err(); err != nil {
		t.Fatal(err)
	}
	ro := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "exporter", Password: "secret"})
	t.Cleanup(func() { _ = ro.Close() })
	rostore := redisstore.New(ro)
	in := inspect.New(ro, broker.ProteanLayout, inspect.WithLedger(rostore), inspect.WithMembers(rostore))
	col, err := exporter.New(exporter.Source{Inspector: in, Kafka: src}, exporter.Config{
		Categories: []string{"shop::*"}, Topics: []exporter.TopicTarget{{Service: "shop", Topic: "events"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := col.Collect(ctx); err != nil {
		t.Fatalf("collection as the readonly role: %v", err)
	}
	got := map[string]inspect.Status{}
	for _, k := range col.Snapshot().Keys {
		got[k.Kind+"/"+k.Key] = k.Status
	}
	want := map[string]inspect.Status{"redis/halted": inspect.StatusHalted, "redis/orphaned": inspect.StatusOrphaned, "redis/parked": inspect.StatusHalted}
	for key, st := range want {
		if got[key] != st {
			t.Errorf("%s: %s, want %s (all: %v)", key, got[key], st, got)
		}
	}
	// The write the role must refuse, to show the user is the readonly one.
	if err := ro.Set(ctx, "shop::order:x", "1", 0).Err(); err == nil {
		t.Fatal("the readonly user could write")
	}
}
