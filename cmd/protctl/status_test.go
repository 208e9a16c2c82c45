package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// TestCheckWithoutFlagsFailsOnAProteanHaltedPartition is the acceptance
// case: a Protean deployment whose head was delivered 3 times while the
// worker keeps renewing its lease and reads nothing. Nothing is parked
// (Protean has no ledger) and no lease expired, so only the status check
// sees it: check with no flags exits 8 naming the partition.
func TestCheckWithoutFlagsFailsOnAProteanHaltedPartition(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	f := testenv.Protean(t, c)
	o := f.Category("shop::order")
	o.Partition("o-1").Entries(3).Group("app.Projector").Lease("worker-1", 2, time.Minute).Read(3).Ack(3)
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = srv.URL()
	cl.run("check").wantCode(t, 0)

	o.Partition("o-2").Entries(3).Group("app.Projector").Lease("worker-1", 5, time.Minute).Read(1).Deliveries(3, time.Second)
	r := cl.run("check", "-o", "json")
	r.wantCode(t, 8)
	var doc checkDoc
	decode(t, r.stdout, &doc)
	found := false
	for _, ch := range doc.Checks {
		if ch.Name == "status" && !ch.OK && len(ch.Offenders) == 1 && strings.HasPrefix(ch.Offenders[0], "shop::order o-2 app.Projector: HALTED") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no failing status check naming o-2: %s", r.stdout)
	}
}

func TestCheckStatusThresholds(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	f := testenv.Protean(t, c)
	o := f.Category("shop::order")
	o.Partition("lag").At(time.Now().Add(-20*time.Minute)).Entries(4).Group("g").Lease("w", 1, time.Minute)
	o.Partition("gone").At(time.Now().Add(-20 * time.Minute)).Entries(2).Group("g").Consumer("w:1").Read(1).ExpiredLease(1)
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = srv.URL()
	for _, tc := range []struct {
		args     []string
		code     int
		offender string
	}{
		{[]string{"--fail-on-status", "orphaned"}, 8, "shop::order gone g: ORPHANED"},
		{[]string{"--fail-on-status", "LAGGING,HALTED"}, 8, "shop::order lag g: LAGGING"},
		{[]string{"--fail-on-status", "HALTED"}, 0, ""},
		{[]string{"--max-lag-seconds", "10m"}, 8, "shop::order gone g: oldest unhandled entry"},
		{[]string{"--max-lag-seconds", "1h"}, 0, ""},
		{[]string{"--fail-on-status", "ORPHANED", "--orphan-after", "1h"}, 0, ""},
		{[]string{"--max-eta", "1h", "--eta-sample", "10ms"}, 8, "not draining"},
		{[]string{"--fail-on-status", "BROKEN"}, 2, ""},
		{[]string{"--max-lag-seconds", "-1s"}, 2, ""},
		{[]string{"--stall-after", "0s", "--fail-on-status", "STALLED"}, 2, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := cl.run(append([]string{"check", "-o", "json"}, tc.args...)...)
			r.wantCode(t, tc.code)
			if tc.offender != "" && !strings.Contains(r.stdout, tc.offender) {
				t.Errorf("no offender %q in %s", tc.offender, r.stdout)
			}
		})
	}
}

func TestStatusInPartitionsAndTopicsListings(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	f := testenv.Protean(t, c)
	f.Category("shop::order").Partition("o-2").Entries(3).Group("app.Projector").Lease("worker-1", 5, time.Minute).Read(1).Deliveries(3, time.Second)
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = srv.URL()
	r := cl.run("partitions", "ls", "shop::order", "-o", "json")
	r.wantCode(t, 0)
	for _, want := range []string{`"health"`, `"status": "HALTED"`, `"lagSeconds"`, `"headDeliveries": 3`, `"etaSeconds": null`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("partitions ls -o json: no %s in %s", want, r.stdout)
		}
	}
	r = cl.run("partitions", "ls", "shop::order")
	if !strings.Contains(r.stdout, "STATUS") || !strings.Contains(r.stdout, "HALTED") {
		t.Errorf("partitions ls: no STATUS column: %s", r.stdout)
	}
	r = cl.run("partitions", "show", "shop::order", "o-2")
	if !strings.Contains(r.stdout, "HALTED: 3 unhandled") {
		t.Errorf("partitions show: no status line: %s", r.stdout)
	}
}

// TestExporterCommand runs protctl exporter on a free port and parses
// a scrape.
func TestExporterCommand(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	f := testenv.Protean(t, c)
	f.Category("shop::order").Partition("o-2").Entries(3).Group("app.Projector").Lease("worker-1", 5, time.Minute).Read(1).Deliveries(3, time.Second)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = srv.URL()
	cl.ctx = ctx
	done := make(chan result, 1)
	go func() {
		done <- cl.run("exporter", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--category", "shop::*", "--interval", "200ms")
	}()
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	var body string
	testenv.Eventually(t, 30*time.Second, "a scrape with the halted partition", func() (bool, string) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, `protctl_partition_status{group="app.Projector",key="o-2",kind="redis",scope="shop::order",status="HALTED"} 1`), body
	})
	p := expfmt.NewTextParser(model.UTF8Validation)
	if _, err := p.TextToMetricFamilies(strings.NewReader(body)); err != nil {
		t.Fatalf("scrape does not parse: %v", err)
	}
	cancel()
	r := <-done
	r.wantCode(t, 0)

	for _, args := range [][]string{
		{"exporter", "--interval", "0s", "--category", "a"},
		{"exporter", "--topic", "nosep", "--category", "a"},
		{"exporter", "--top", "-1", "--category", "a"},
		{"exporter", "--category", "shop::["},
	} {
		cl2 := newCLI(t)
		cl2.env["PROTCTL_REDIS"] = srv.URL()
		cl2.run(args...).wantCode(t, 2)
	}
}

// TestCheckStatusThresholdsOnKafkaTopics: --fail-on-status,
// --max-lag-seconds and --max-eta apply to a --topic's partitions per
// subscription as to Redis groups, and check with no threshold flag
// fails on an orphaned topic partition: exit 8 with the topic partition
// named. kfake topic "events": partition 0 lagging (records 10 minutes
// old, lease held, checkpoint at 0), partition 1 orphaned (the same,
// lease gone).
func TestCheckStatusThresholdsOnKafkaTopics(t *testing.T) {
	ctx := context.Background()
	k := testenv.StartKafka(t, 2, "events")
	kc := k.Client(t)
	old := time.Now().Add(-10 * time.Minute)
	for p := int32(0); p < 2; p++ {
		k.Produce(t, kc, &kgo.Record{Topic: "events", Partition: p, Value: []byte("a"), Timestamp: old},
			&kgo.Record{Topic: "events", Partition: p, Value: []byte("b"), Timestamp: old})
	}
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	store := redisstore.New(c)
	g := redisstore.TopicLeaseGroup("shop", "events")
	for p := int32(0); p < 2; p++ {
		f := broker.Fence{LeaseKey: g.LeaseKey(p), Token: "node-a:1"}
		if err := c.Set(ctx, f.LeaseKey, f.Token, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := store.Save(ctx, f, g.String(), "ledger", p, 0); err != nil {
			t.Fatal(err)
		}
	}
	c.Set(ctx, g.GenerationKey(1), "1", 0)
	c.Del(ctx, g.LeaseKey(1)) // expired with work left: ORPHANED
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = srv.URL()
	cl.env["PROTCTL_KAFKA"] = strings.Join(k.Brokers, ",")
	for _, tc := range []struct {
		args      []string
		code      int
		check     string
		offenders []string
	}{
		{[]string{"--topic", "shop/events"}, 8, "topicStatus", []string{"shop/events 1 ledger: ORPHANED (lag 2, oldest 10m"}},
		{[]string{"--topic", "shop/events", "--fail-on-status", "LAGGING"}, 8, "topicStatus", []string{"shop/events 0 ledger: LAGGING (lag 2"}},
		{[]string{"--topic", "shop/events", "--subscription", "ledger", "--fail-on-status", "LAGGING,ORPHANED"}, 8, "topicStatus",
			[]string{"shop/events 0 ledger: LAGGING", "shop/events 1 ledger: ORPHANED"}},
		{[]string{"--topic", "shop/events", "--fail-on-status", "HALTED"}, 0, "topicStatus", nil},
		{[]string{"--topic", "shop/events", "--max-lag-seconds", "5m"}, 8, "topicLagSeconds",
			[]string{"shop/events 0 ledger: oldest unhandled entry 10m", "shop/events 1 ledger: oldest unhandled entry 10m"}},
		{[]string{"--topic", "shop/events", "--max-lag-seconds", "1h"}, 0, "topicLagSeconds", nil},
		{[]string{"--topic", "shop/events", "--max-eta", "1h", "--eta-sample", "10ms"}, 8, "topicEta",
			[]string{"shop/events 0 ledger: 2 waiting and not draining", "shop/events 1 ledger: 2 waiting and not draining"}},
		{[]string{"--topic", "shop/events", "--fail-on-status", "LAGGING", "--lagging-after", "1h"}, 0, "topicStatus", nil},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := cl.run(append([]string{"check", "-o", "json"}, tc.args...)...)
			r.wantCode(t, tc.code)
			var doc checkDoc
			decode(t, r.stdout, &doc)
			at := -1
			for i := range doc.Checks {
				if doc.Checks[i].Name == tc.check {
					at = i
				}
			}
			if at < 0 {
				t.Fatalf("no %s check: %s", tc.check, r.stdout)
			}
			got := doc.Checks[at]
			if got.OK != (len(tc.offenders) == 0) || len(got.Offenders) != len(tc.offenders) {
				t.Fatalf("%s: ok %v, offenders %q, want %q", tc.check, got.OK, got.Offenders, tc.offenders)
			}
			for i, want := range tc.offenders {
				if !strings.HasPrefix(got.Offenders[i], want) {
					t.Errorf("offender %q, want it to start with %q", got.Offenders[i], want)
				}
			}
		})
	}
	for _, args := range [][]string{
		{"check", "--subscription", "ledger"},
		{"check", "--topic", "events"},
	} {
		cl.run(args...).wantCode(t, 2)
	}
	for _, args := range [][]string{
		{"check", "--topic", "shop/nope"},
		{"check", "--topic", "nope/events"},
		{"check", "--topic", "shop/events", "--subscription", "nope"},
	} {
		cl.run(args...).wantCode(t, 4)
	}
}
