package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// TestParkedRetryAndSkipRecordRequests: retry and skip record the
// operator's request in the ledger entry (for its owner to act on), with
// the reason of a skip; --subscription narrows ls; show hides the payload
// unless asked.
func TestParkedRetryAndSkipRecordRequests(t *testing.T) {
	e := newOpsEnv(t)
	e.park()
	s := e.s
	ctx := context.Background()
	store := redisstore.New(e.c)

	// A subscription nothing records is a typo (truth_test.go walks
	// every such filter).
	e.run("parked", "ls", "--subscription", "other", "-o", "json").wantCode(t, clierr.ExitNotFound)
	r := e.run("parked", "ls", "--subscription", s.Projector, "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"aggregate": "`+s.Halted+`"`) {
		t.Fatalf("ls:\n%s", r.stdout)
	}

	r = e.run("parked", "show", s.Projector, s.Halted, "-o", "json")
	r.wantCode(t, 0)
	if strings.Contains(r.stdout, `"seq"`) || !strings.Contains(r.stdout, `"payloadHidden": true`) {
		t.Fatalf("payload shown without --show-payload:\n%s", r.stdout)
	}
	r = e.run("parked", "show", s.Projector, s.Halted, "--show-payload")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"seq"`) || strings.Contains(r.stdout, "Payload hidden") {
		t.Fatalf("payload not shown with --show-payload:\n%s", r.stdout)
	}

	e.env("USER", "alice").run("parked", "retry", s.Projector, s.Halted, "--yes").wantCode(t, 0)
	p, err := store.GetParked(ctx, s.Projector, "", s.Halted)
	if err != nil || p.Request == nil || p.Request.Action != ledger.ActionRetry || p.Request.By != "protctl:alice" {
		t.Fatalf("after retry: %+v %v", p.Request, err)
	}
	e.run("parked", "skip", s.Projector, s.Halted, "--reason", "refunded by hand", "--yes").wantCode(t, 0)
	p, err = store.GetParked(ctx, s.Projector, "", s.Halted)
	if err != nil || p.Request == nil || p.Request.Action != ledger.ActionSkip || p.Request.Reason != "refunded by hand" {
		t.Fatalf("after skip: %+v %v", p.Request, err)
	}

	t.Run("usage", func(t *testing.T) {
		e.run("parked", "skip", s.Projector, s.Halted, "--yes").wantCode(t, clierr.ExitUsage)
		e.run("parked", "retry", s.Projector, "--yes").wantCode(t, clierr.ExitUsage)
		e.run("parked", "retry", s.Projector, s.Halted, "--all", "--yes").wantCode(t, clierr.ExitUsage)
		e.run("parked", "retry", "--all", "--rps", "-1", "--yes").wantCode(t, clierr.ExitUsage)
	})
}

// TestParkedAggregateOnTwoPartitions: a Kafka aggregate parked on two
// partitions is two entries; naming it without --partition exits 2 and
// names the partitions, and --partition picks one (issue 16 item 2).
func TestParkedAggregateOnTwoPartitions(t *testing.T) {
	e := newOpsEnv(t)
	ctx := context.Background()
	store := redisstore.New(e.c)
	lg := redisstore.TopicLeaseGroup("shop", "orders")
	const sub, agg = "ledger-sync", "x"
	for _, p := range []int32{0, 1} {
		f := broker.Fence{LeaseKey: lg.LeaseKey(p), Token: "node-a:1"}
		if err := e.c.Set(ctx, f.LeaseKey, f.Token, 0).Err(); err != nil {
			t.Fatal(err)
		}
		part := strconv.Itoa(int(p))
		if err := store.Park(ctx, f, ledger.Parked{Subscription: sub, Source: source.Kafka, Aggregate: agg,
			Topic: "orders", Partition: part, Position: "1" + part, Error: "boom", Attempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	r := e.run("parked", "ls", "--subscription", sub, "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"partition": "0"`) || !strings.Contains(r.stdout, `"partition": "1"`) {
		t.Fatalf("ls does not list both partitions' entries:\n%s", r.stdout)
	}
	r = e.run("parked", "show", sub, agg)
	r.wantCode(t, clierr.ExitUsage)
	if !strings.Contains(r.stderr, "partitions 0, 1") || !strings.Contains(r.stderr, "--partition") {
		t.Fatalf("show without --partition: %s", r.stderr)
	}
	r = e.run("parked", "show", sub, agg, "--partition", "1", "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"position": "11"`) {
		t.Fatalf("show --partition 1:\n%s", r.stdout)
	}
	e.run("parked", "retry", sub, agg, "--yes").wantCode(t, clierr.ExitUsage)
	e.run("parked", "retry", sub, agg, "--partition", "0", "--yes").wantCode(t, 0)
	p0, err0 := store.GetParked(ctx, sub, "0", agg)
	p1, err1 := store.GetParked(ctx, sub, "1", agg)
	if err0 != nil || err1 != nil || p0.Request == nil || p1.Request != nil {
		t.Fatalf("after retry --partition 0: partition 0 %+v (%v), partition 1 %+v (%v)", p0.Request, err0, p1.Request, err1)
	}
	e.run("parked", "skip", sub, agg, "--all", "--partition", "1", "--reason", "r", "--yes").wantCode(t, clierr.ExitUsage)
	e.run("parked", "skip", "--all", "--subscription", sub, "--partition", "1", "--reason", "r", "--yes").wantCode(t, 0)
	if p1, err := store.GetParked(ctx, sub, "1", agg); err != nil || p1.Request == nil || p1.Request.Action != ledger.ActionSkip {
		t.Fatalf("after skip --all --partition 1: %+v %v", p1.Request, err)
	}
}

// env returns a non-terminal invocation with one more variable set.
func (e *opsEnv) env(k, v string) *cli {
	cl := e.cli(false)
	cl.env[k] = v
	return cl
}

// TestLeasesListFilters: --group, --category and --state narrow the list.
func TestLeasesListFilters(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	type lease struct {
		Group string `json:"group"`
		Key   string `json:"key"`
		State string `json:"state"`
	}
	list := func(args ...string) []lease {
		t.Helper()
		r := e.run(append([]string{"leases", "ls", "-o", "json"}, args...)...)
		r.wantCode(t, 0)
		var doc struct{ Items []lease }
		decode(t, r.stdout, &doc)
		return doc.Items
	}
	for _, l := range list("--category", s.Orders, "--state", "expired") {
		if l.State != "expired" || l.Key != s.Lagging {
			t.Fatalf("--state expired lists %+v", l)
		}
	}
	// A group filter lists the group on every partition of the index,
	// created there or not (it would read from id 0).
	if got := list("--category", s.Payments, "--group", s.Audit); len(got) != 2 || got[0].Key != s.Pay1 || got[1].Key != s.Ghost || got[0].Group != s.Audit || got[0].State != "free" {
		t.Fatalf("--group audit lists %+v", got)
	}
	// A group nothing records is a typo (truth_test.go walks every such
	// filter).
	e.run("leases", "ls", "--group", "nobody").wantCode(t, clierr.ExitNotFound)
	e.run("leases", "ls", "--state", "gone").wantCode(t, clierr.ExitUsage)
	e.run("leases", "ls", "--category", "no::such").wantCode(t, clierr.ExitNotFound)
}

// TestLeasesListCategoryIsNullWhenUnknown: leases ls without --category
// finds leases by a scan, which cannot tell their category: each item
// says "category": null (unknown values are null, never left out); with
// --category each names it.
func TestLeasesListCategoryIsNullWhenUnknown(t *testing.T) {
	e := newOpsEnv(t)
	for _, c := range []struct {
		name string
		args []string
		want any
	}{
		{"by scan", nil, nil},
		{"by category", []string{"--category", e.s.Orders}, e.s.Orders},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.run(append([]string{"leases", "ls", "-o", "json"}, c.args...)...)
			r.wantCode(t, 0)
			var doc struct{ Items []map[string]any }
			decode(t, r.stdout, &doc)
			if len(doc.Items) == 0 {
				t.Fatalf("no leases:\n%s", r.stdout)
			}
			for _, it := range doc.Items {
				if got, ok := it["category"]; !ok || got != c.want {
					t.Fatalf("category %v (present %v), want %v: %v", got, ok, c.want, it)
				}
			}
		})
	}
}
