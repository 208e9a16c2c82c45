package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

const bulkKafkaTopic = "payments"

// TestBulkRetryOnAKafkaSubscription: a runtime node consumes a kfake
// topic and parks aggregates in the Redis ledger; the CLI's filters
// (error class, partition, offset range) select them; the plan pins its
// set while new aggregates park; its apply requests exactly that set, the
// owner retries and resolves them, and applying the plan again finds
// every item done, though the entries are gone.
func TestBulkRetryOnAKafkaSubscription(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	k := testenv.StartKafka(t, 2, bulkKafkaTopic)
	prod := k.Client(t)
	store := redisstore.New(c)
	var billingDown atomic.Bool
	billingDown.Store(true)
	src, err := kafkasource.New(k.Brokers, kafkasource.WithFetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	handler := runtime.HandlerFunc(func(_ context.Context, m runtime.Message) error {
		switch {
		case strings.HasPrefix(m.Aggregate, "bad-") && billingDown.Load():
			return errors.New("http POST http://billing: 503 Service Unavailable")
		case strings.HasPrefix(m.Aggregate, "val-"):
			return errors.New("validate: amount must be positive")
		}
		return nil
	})
	ts, err := topic.New(topic.Config{
		Topic: bulkKafkaTopic,
		Subscriptions: []topic.Subscription{{Name: "ledger-sync", Handler: handler,
			Retry: runtime.RetryPolicy{Attempts: 1, Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}}},
		Source: topic.Kafka(src), Leases: redisbroker.New(c),
		Checkpoints: store, Ledger: store,
		LeaseTTL: 2 * time.Second, RenewEvery: 300 * time.Millisecond, RefreshEvery: 200 * time.Millisecond,
		CheckpointEvery: 100 * time.Millisecond, LedgerPollEvery: 100 * time.Millisecond, OpTimeout: time.Second,
		JoinBackoff: 20 * time.Millisecond, JoinMaxBackoff: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	node, err := runtime.NewNode(runtime.NodeConfig{Service: "shop", NodeID: "node-a", Membership: store, HeartbeatEvery: 100 * time.Millisecond}, ts)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = node.Stop(stop)
	})

	produce := func(keys ...string) {
		t.Helper()
		var recs []*kgo.Record
		for _, key := range keys {
			// The key's trailing number picks the partition: bad-0, bad-2,
			// ... on partition 0.
			n, _ := strconv.Atoi(key[strings.LastIndexByte(key, '-')+1:])
			recs = append(recs, &kgo.Record{Topic: bulkKafkaTopic, Partition: int32(n % 2), Key: []byte(key), Value: []byte(`{}`)})
		}
		k.Produce(t, prod, recs...)
	}
	parkedKeys := func() map[string]ledger.Parked {
		t.Helper()
		ps, err := store.ListParked(ctx, "ledger-sync")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]ledger.Parked{}
		for _, p := range ps {
			out[p.Aggregate] = p
		}
		return out
	}
	waitParked := func(n int) map[string]ledger.Parked {
		t.Helper()
		var got map[string]ledger.Parked
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d parked entries", n), func() (bool, string) {
			got = parkedKeys()
			return len(got) == n, fmt.Sprintf("%d parked", len(got))
		})
		return got
	}
	var first []string
	for i := range 12 {
		first = append(first, "ok-"+strconv.Itoa(i), "bad-"+strconv.Itoa(i))
	}
	produce(append(first, "val-0", "val-1", "val-2", "val-3")...)
	parked := waitParked(16)

	e := &opsEnv{t: t, srv: srv, c: c}
	type listed struct {
		Items []struct {
			Aggregate string `json:"aggregate"`
			Partition string `json:"partition"`
			Position  string `json:"position"`
			Source    string `json:"source"`
		} `json:"items"`
	}
	ls := func(args ...string) listed {
		t.Helper()
		r := e.run(append([]string{"parked", "ls", "--subscription", "ledger-sync", "-o", "json"}, args...)...)
		r.wantCode(t, 0)
		var l listed
		decode(t, r.stdout, &l)
		return l
	}
	if got := ls("--error-class", "http POST http://billing"); len(got.Items) != 12 || got.Items[0].Source != "kafka" {
		t.Fatalf("the billing class lists %+v", got.Items)
	}
	if got := ls("--error", "^validate: "); len(got.Items) != 4 {
		t.Fatalf("--error ^validate lists %+v", got.Items)
	}
	// Partition 0's billing entries, by offset: the range keeps those at
	// or after the third lowest offset.
	var offsets []int
	for _, p := range parked {
		if strings.HasPrefix(p.Aggregate, "bad-") && p.Partition == "0" {
			n, _ := strconv.Atoi(p.Position)
			offsets = append(offsets, n)
		}
	}
	if len(offsets) != 6 {
		t.Fatalf("%d billing entries on partition 0, want 6", len(offsets))
	}
	slices.Sort(offsets)
	from := offsets[2]
	want := map[string]bool{} // the four highest offsets

	for _, p := range parked {
		if n, _ := strconv.Atoi(p.Position); strings.HasPrefix(p.Aggregate, "bad-") && p.Partition == "0" && n >= from {
			want[p.Aggregate] = true
		}
	}
	filter := []string{"parked", "retry", "--subscription", "ledger-sync", "--error-class", "http POST http://billing",
		"--partition", "0", "--position", strconv.Itoa(from) + ".."}
	if got := ls(filter[4:]...); len(got.Items) != len(want) {
		t.Fatalf("ls with the retry's filter lists %d, want %d", len(got.Items), len(want))
	}
	plan := savePlan(t, e, filter...)
	var doc bulkDoc
	decode(t, readFile(t, plan), &doc)
	if len(want) != 4 || doc.Selection == nil || doc.Selection.Count != len(want) || len(doc.Items) != len(want) {
		t.Fatalf("plan selection %+v, want %d items", doc.Selection, len(want))
	}
	for _, it := range doc.Items {
		if !want[it.Target["aggregate"]] || it.Target["partition"] != "0" {
			t.Fatalf("the plan holds %v", it.Target)
		}
	}

	// New aggregates park on partition 0 after the plan; then billing
	// comes back and the plan is applied.
	produce("bad-late-0", "ok-late-2", "bad-late-4")
	waitParked(18)
	billingDown.Store(false)
	r := e.run("apply", "-f", plan, "--yes", "-o", "json")
	r.wantCode(t, 0)
	testenv.Eventually(t, 30*time.Second, "the owner resolves the planned entries", func() (bool, string) {
		now := parkedKeys()
		for agg := range want {
			if _, ok := now[agg]; ok {
				return false, agg + " still parked"
			}
		}
		return true, ""
	})
	now := parkedKeys()
	if len(now) != 18-len(want) {
		t.Fatalf("%d entries left, want %d", len(now), 18-len(want))
	}
	for agg, p := range now {
		if p.Request != nil || p.Status != ledger.StatusParked {
			t.Fatalf("%s, outside the plan, was touched: status %s request %+v", agg, p.Status, p.Request)
		}
	}
	if _, ok := now["bad-late-0"]; !ok {
		t.Fatalf("the entry parked after the plan is gone: %v", now)
	}

	// Applying the plan again changes nothing: every item is done, though
	// the owner has resolved the entries.
	r = e.run("apply", "-f", plan, "--yes", "-o", "json")
	r.wantCode(t, 0)
	decode(t, r.stdout, &doc)
	for _, it := range doc.Items {
		if it.result() != "done" {
			t.Fatalf("%v: %s (%s), want done", it.Target, it.result(), it.Detail)
		}
	}
}
