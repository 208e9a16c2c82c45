package inspect_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// TestParkedFilterSpecRefusesBadInput: every malformed filter is a
// *FilterError naming its field, before anything is read.
func TestParkedFilterSpecRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		name  string
		spec  inspect.ParkedFilterSpec
		field string
	}{
		{"malformed regexp", inspect.ParkedFilterSpec{Error: "timeout(("}, "error"},
		{"negative older-than", inspect.ParkedFilterSpec{OlderThan: -time.Minute}, "older-than"},
		{"negative newer-than", inspect.ParkedFilterSpec{NewerThan: -time.Second}, "newer-than"},
		{"inverted age window", inspect.ParkedFilterSpec{OlderThan: time.Hour, NewerThan: 10 * time.Minute}, "older-than"},
		{"empty age window", inspect.ParkedFilterSpec{OlderThan: time.Hour, NewerThan: time.Hour}, "older-than"},
		{"unclosed glob class", inspect.ParkedFilterSpec{Key: "o-[12"}, "key"},
		{"glob ending in a backslash", inspect.ParkedFilterSpec{Key: `o-\`}, "key"},
		{"inverted offset range", inspect.ParkedFilterSpec{Position: "200..100"}, "position"},
		{"inverted id range", inspect.ParkedFilterSpec{Position: "5-3..5-1"}, "position"},
		{"range without ..", inspect.ParkedFilterSpec{Position: "100"}, "position"},
		{"range with neither side", inspect.ParkedFilterSpec{Position: ".."}, "position"},
		{"range of words", inspect.ParkedFilterSpec{Position: "a..b"}, "position"},
		{"negative offset", inspect.ParkedFilterSpec{Position: "-1..5"}, "position"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.spec.Compile()
			var fe *inspect.FilterError
			if !errors.As(err, &fe) || !errors.Is(err, inspect.ErrInvalidFilter) {
				t.Fatalf("Compile(%+v) = %v, want a *FilterError", c.spec, err)
			}
			if fe.Field != c.field || fe.Reason == "" {
				t.Fatalf("the error names %q (%q), want %q with a reason", fe.Field, fe.Reason, c.field)
			}
		})
	}
	for _, ok := range []inspect.ParkedFilterSpec{
		{}, {Position: "5..5"}, {Position: "100.."}, {Position: "..1700000000000-3"},
		{OlderThan: time.Minute, NewerThan: time.Hour}, {Key: "o-[!0-4]*"}, {Error: "503|504"},
	} {
		if _, err := ok.Compile(); err != nil {
			t.Errorf("Compile(%+v): %v", ok, err)
		}
	}
}

// TestParkedFilterMatch checks each field against entries of both
// sources.
func TestParkedFilterMatch(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	redisEntry := func(key, id, errText string, age time.Duration) ledger.Parked {
		return ledger.Parked{Subscription: "app.Projector", Source: source.Redis, Aggregate: key, Partition: key,
			Category: "shop::order", Position: id, Error: errText, ParkedAt: now.Add(-age), Status: ledger.StatusParked}
	}
	kafkaEntry := func(agg, part, off, errText string, age time.Duration) ledger.Parked {
		return ledger.Parked{Subscription: "ledger-sync", Source: source.Kafka, Aggregate: agg, Partition: part,
			Topic: "orders", Position: off, Error: errText, ParkedAt: now.Add(-age), Status: ledger.StatusParked}
	}
	r1 := redisEntry("o-1", "1700000000000-0", "http POST http://billing: 503 Service Unavailable", 2*time.Hour)
	r2 := redisEntry("o-22", "1700000000000-7", "http POST http://billing: 500 Internal Server Error", 30*time.Minute)
	r3 := redisEntry("tenant/o-3", "1700000000500-0", "validate: amount must be positive", 5*time.Minute)
	k1 := kafkaEntry("c-1", "0", "90", "http POST http://billing", time.Hour)
	k2 := kafkaEntry("c-2", "3", "150", "timeout", 10*time.Second)
	all := []ledger.Parked{r1, r2, r3, k1, k2}
	names := func(ps []ledger.Parked) string {
		var s string
		for _, p := range ps {
			s += p.Aggregate + " "
		}
		return s
	}
	for _, c := range []struct {
		name string
		spec inspect.ParkedFilterSpec
		want []ledger.Parked
	}{
		{"zero", inspect.ParkedFilterSpec{}, all},
		{"subscription", inspect.ParkedFilterSpec{Subscription: "ledger-sync"}, []ledger.Parked{k1, k2}},
		{"partition", inspect.ParkedFilterSpec{Partition: "3"}, []ledger.Parked{k2}},
		{"regexp", inspect.ParkedFilterSpec{Error: `50[03] `}, []ledger.Parked{r1, r2}},
		{"class matches the wrapper and the bare error", inspect.ParkedFilterSpec{ErrorClass: "http POST http://billing"}, []ledger.Parked{r1, r2, k1}},
		{"class is not a prefix of a word", inspect.ParkedFilterSpec{ErrorClass: "http POST http://bill"}, nil},
		{"older than", inspect.ParkedFilterSpec{OlderThan: time.Hour}, []ledger.Parked{r1, k1}},
		{"newer than", inspect.ParkedFilterSpec{NewerThan: 10 * time.Minute}, []ledger.Parked{r3, k2}},
		{"age window", inspect.ParkedFilterSpec{OlderThan: time.Minute, NewerThan: time.Hour}, []ledger.Parked{r2, r3}},
		{"glob star crosses slashes", inspect.ParkedFilterSpec{Key: "*o-?"}, []ledger.Parked{r1, r3}},
		{"glob class", inspect.ParkedFilterSpec{Key: "[co]-[!1]*"}, []ledger.Parked{r2, k2}},
		{"glob escape", inspect.ParkedFilterSpec{Key: `c\-1`}, []ledger.Parked{k1}},
		{"id range with bare ms as TO takes the whole millisecond", inspect.ParkedFilterSpec{Subscription: "app.Projector", Position: "..1700000000000"}, []ledger.Parked{r1, r2}},
		{"id range with seq", inspect.ParkedFilterSpec{Subscription: "app.Projector", Position: "1700000000000-1..1700000000500-0"}, []ledger.Parked{r2, r3}},
		{"offset range", inspect.ParkedFilterSpec{Subscription: "ledger-sync", Position: "100.."}, []ledger.Parked{k2}},
		{"offset range inclusive", inspect.ParkedFilterSpec{Subscription: "ledger-sync", Position: "90..90"}, []ledger.Parked{k1}},
		{"fields combine", inspect.ParkedFilterSpec{Error: "billing", OlderThan: time.Hour, Key: "o-*"}, []ledger.Parked{r1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := c.spec.Compile()
			if err != nil {
				t.Fatal(err)
			}
			var got []ledger.Parked
			for _, p := range all {
				if f.Match(p, now) {
					got = append(got, p)
				}
			}
			if names(got) != names(c.want) {
				t.Fatalf("matched %q, want %q", names(got), names(c.want))
			}
		})
	}
}

// TestSelectParkedOnARealLedger: SelectParked reads the ledger and the
// server's clock; an entry-id bound over Kafka entries is refused.
func TestSelectParkedOnARealLedger(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	store := redisstore.New(c)
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	lg := redisstore.TopicLeaseGroup("shop", "orders")
	f := broker.Fence{LeaseKey: lg.LeaseKey(0), Token: "node-a:1"}
	if err := c.Set(ctx, f.LeaseKey, f.Token, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		p := ledger.Parked{Subscription: "ledger-sync", Source: source.Kafka, Aggregate: "c-" + strconv.Itoa(i),
			Topic: "orders", Partition: "0", Position: strconv.Itoa(100 * i), Error: "boom", Attempts: 3,
			ParkedAt: now.Add(-time.Duration(i) * time.Hour)}
		if err := store.Park(ctx, f, p); err != nil {
			t.Fatal(err)
		}
	}
	ins := inspect.New(c, broker.ClusterLayout, inspect.WithLedger(store))
	sel := func(spec inspect.ParkedFilterSpec) (inspect.ParkedSelection, error) {
		flt, err := spec.Compile()
		if err != nil {
			t.Fatal(err)
		}
		return ins.SelectParked(ctx, flt)
	}
	got, err := sel(inspect.ParkedFilterSpec{Subscription: "ledger-sync", OlderThan: 90 * time.Minute, Position: "..300"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Entries) != 2 || got.Entries[0].Aggregate != "c-3" || got.Entries[1].Aggregate != "c-2" || got.Scanned != 5 || got.Now.IsZero() {
		t.Fatalf("selected %+v", got)
	}
	_, err = sel(inspect.ParkedFilterSpec{Position: "1-0..5-0"})
	var fe *inspect.FilterError
	if !errors.As(err, &fe) || fe.Field != "position" {
		t.Fatalf("an id range over Kafka entries: %v, want a position FilterError", err)
	}
	subs, err := ins.ParkedSubscriptions(ctx)
	if err != nil || len(subs) != 1 || subs[0] != "ledger-sync" {
		t.Fatalf("ParkedSubscriptions = %v, %v", subs, err)
	}
}
