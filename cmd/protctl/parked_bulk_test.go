package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// bulkDoc is the part of a bulk plan document the tests read.
type bulkDoc struct {
	ID        string `json:"id"`
	Selection *struct {
		Count   int    `json:"count"`
		Matched int    `json:"matched"`
		Max     int    `json:"max"`
		Filter  string `json:"filter"`
	} `json:"selection"`
	Items []plannedItem `json:"items"`
}

// parkRedisEntry parks key's head for subscription under a lease it sets
// (the Protean layout), age ago, with errText.
func parkRedisEntry(t *testing.T, e *opsEnv, subscription, key, errText string, age time.Duration) {
	t.Helper()
	ctx := context.Background()
	now, err := e.c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	f := broker.Fence{LeaseKey: broker.ProteanLayout.LeaseKey(subscription, key), Token: "node-a:1"}
	if err := e.c.Set(ctx, f.LeaseKey, f.Token, 0).Err(); err != nil {
		t.Fatal(err)
	}
	p := ledger.Parked{Subscription: subscription, Source: source.Redis, Aggregate: key, Category: "shop::bill",
		Partition: key, Position: "1700000000000-" + strconv.Itoa(len(key)), Error: errText, Attempts: 3,
		ParkedAt: now.Add(-age), LastAttemptAt: now.Add(-age), Owner: "node-a", Generation: 1}
	if err := redisstore.New(e.c).Park(ctx, f, p); err != nil {
		t.Fatal(err)
	}
}

// TestParkedBulkBadInputChangesNothing: every malformed filter or bound
// exits with the documented code, names the flag, and changes nothing.
func TestParkedBulkBadInputChangesNothing(t *testing.T) {
	e := newOpsEnv(t)
	e.park()
	lg := redisstore.TopicLeaseGroup("shop", "orders")
	f := broker.Fence{LeaseKey: lg.LeaseKey(0), Token: "node-a:1"}
	if err := e.c.Set(context.Background(), f.LeaseKey, f.Token, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := redisstore.New(e.c).Park(context.Background(), f, ledger.Parked{Subscription: "ledger-sync", Source: source.Kafka,
		Aggregate: "c-1", Topic: "orders", Partition: "0", Position: "12", Error: "boom", Attempts: 3}); err != nil {
		t.Fatal(err)
	}
	before := e.digest()
	sub := e.s.Projector
	for _, c := range []struct {
		args []string
		code int
		flag string
	}{
		{[]string{"parked", "retry", "--error", "timeout((", "--yes"}, clierr.ExitUsage, "--error"},
		{[]string{"parked", "skip", "--error", "[", "--reason", "r", "--yes"}, clierr.ExitUsage, "--error"},
		{[]string{"parked", "ls", "--error", "a)"}, clierr.ExitUsage, "--error"},
		{[]string{"parked", "retry", "--older-than", "-5m", "--yes"}, clierr.ExitUsage, "--older-than"},
		{[]string{"parked", "retry", "--newer-than", "-1s", "--yes"}, clierr.ExitUsage, "--newer-than"},
		{[]string{"parked", "ls", "--older-than", "1h", "--newer-than", "10m"}, clierr.ExitUsage, "--older-than"},
		{[]string{"parked", "retry", "--older-than", "1h", "--newer-than", "10m", "--yes"}, clierr.ExitUsage, "--older-than"},
		{[]string{"parked", "retry", "--position", "200..100", "--yes"}, clierr.ExitUsage, "--position"},
		{[]string{"parked", "skip", "--position", "5-3..5-1", "--reason", "r", "--yes"}, clierr.ExitUsage, "--position"},
		{[]string{"parked", "retry", "--position", "12", "--yes"}, clierr.ExitUsage, "--position"},
		{[]string{"parked", "retry", "--subscription", "ledger-sync", "--position", "1-0..2-0", "--yes"}, clierr.ExitUsage, "--position"},
		{[]string{"parked", "retry", "--key", "o-[1", "--yes"}, clierr.ExitUsage, "--key"},
		{[]string{"parked", "retry", "--all", "--subscription", "app.OrderProjectr", "--yes"}, clierr.ExitNotFound, "--subscription"},
		{[]string{"parked", "skip", "--subscription", "nosuch", "--error", "x", "--reason", "r", "--yes"}, clierr.ExitNotFound, "--subscription"},
		{[]string{"parked", "retry", sub, e.s.Halted, "--error", "x", "--yes"}, clierr.ExitUsage, "SUBSCRIPTION AGGREGATE"},
		{[]string{"parked", "retry", sub, e.s.Halted, "--max", "3", "--yes"}, clierr.ExitUsage, "--max"},
		{[]string{"parked", "retry", "--all", "--max", "-1", "--yes"}, clierr.ExitUsage, "--max"},
		{[]string{"apply", "-f", "plan.json", "--rps", "-1", "--yes"}, clierr.ExitUsage, "--rps"},
		{[]string{"apply", "-f", "plan.json", "--max", "-2", "--yes"}, clierr.ExitUsage, "--max"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			for _, format := range []string{"table", "json"} {
				r := e.run(append(c.args, "-o", format)...)
				r.wantCode(t, c.code)
				if !strings.Contains(r.stderr, c.flag) {
					t.Fatalf("-o %s: the error does not name %s:\n%s", format, c.flag, r.stderr)
				}
				if format == "json" && !strings.Contains(r.stderr, `"exitCode":`+strconv.Itoa(c.code)) {
					t.Fatalf("-o json: no JSON error object with the exit code:\n%s", r.stderr)
				}
				if r.stdout != "" {
					t.Fatalf("-o %s: a refused command printed %q", format, r.stdout)
				}
			}
			if got := e.digest(); got != before {
				t.Fatal("a refused command changed Redis")
			}
		})
	}
	// An unknown subscription (a typo) is not found, as for retry and
	// skip (issue 18's rule for list filters).
	r := e.run("parked", "ls", "--subscription", "nosuch", "-o", "json")
	r.wantCode(t, 4)
}

// TestParkedBulkRetryPinsItsSetAndSaysHowManyFirst: ls and retry select
// the same entries; the plan's count comes first (stderr line, selection
// before the items in JSON); --max keeps the oldest; entries parked after
// the plan are not requested by its apply.
func TestParkedBulkRetryPinsItsSetAndSaysHowManyFirst(t *testing.T) {
	e := newOpsEnv(t)
	const sub = "app.BillingProjector"
	for i := range 5 {
		parkRedisEntry(t, e, sub, fmt.Sprintf("b-%d", i), "http POST http://billing: 503 Service Unavailable", time.Duration(i+1)*time.Hour)
	}
	parkRedisEntry(t, e, sub, "b-young", "http POST http://billing: 503 Service Unavailable", time.Minute)
	parkRedisEntry(t, e, sub, "v-1", "validate: amount must be positive", 2*time.Hour)
	filter := []string{"--subscription", sub, "--error-class", "http POST http://billing", "--older-than", "30m"}

	r := e.run(append([]string{"parked", "ls", "-o", "json"}, filter...)...)
	r.wantCode(t, 0)
	var listed struct {
		Items []struct{ Aggregate string }
	}
	decode(t, r.stdout, &listed)
	if len(listed.Items) != 5 || listed.Items[0].Aggregate != "b-4" {
		t.Fatalf("ls with the filter lists %+v", listed.Items)
	}

	r = e.run(append([]string{"parked", "retry", "--max", "3", "--dry-run"}, filter...)...)
	r.wantCode(t, 0)
	first, _, _ := strings.Cut(r.stderr, "\n")
	if !strings.HasPrefix(first, "Selected 3 of 5 parked entries matching --subscription app.BillingProjector --error-class 'http POST http://billing' --older-than 30m0s: the oldest, --max 3") {
		t.Fatalf("the dry run's first line is %q", first)
	}

	plan := savePlan(t, e, append([]string{"parked", "retry", "--max", "3"}, filter...)...)
	raw := readFile(t, plan)
	if s, i := strings.Index(raw, `"selection"`), strings.Index(raw, `"items"`); s < 0 || s > i {
		t.Fatalf("the selection does not come before the items:\n%s", raw)
	}
	var doc bulkDoc
	decode(t, raw, &doc)
	if doc.Selection == nil || doc.Selection.Count != 3 || doc.Selection.Matched != 5 || doc.Selection.Max != 3 || len(doc.Items) != 3 || doc.ID == "" {
		t.Fatalf("plan %+v with %d items", doc.Selection, len(doc.Items))
	}

	// Parked after the plan, matching its filter: not in it.
	parkRedisEntry(t, e, sub, "b-late", "http POST http://billing: 503 Service Unavailable", 3*time.Hour)
	r = e.run("apply", "-f", plan, "--yes", "-o", "json")
	r.wantCode(t, 0)
	store := redisstore.New(e.c)
	for _, k := range []string{"b-4", "b-3", "b-2", "b-1", "b-0", "b-young", "v-1", "b-late"} {
		p, err := store.GetParked(context.Background(), sub, "", k)
		if err != nil {
			t.Fatal(err)
		}
		inPlan := k == "b-4" || k == "b-3" || k == "b-2"
		if got := p.Request != nil && p.Request.Token == doc.ID; got != inPlan {
			t.Fatalf("%s: request %+v, in the plan %v", k, p.Request, inPlan)
		}
	}
	r = e.run("parked", "show", sub, "b-4", "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"plan": "`+doc.ID+`"`) {
		t.Fatalf("show does not name the plan of the request:\n%s", r.stdout)
	}
}

// TestApplyMaxResumesInSlices: apply -f --max N applies N items a run
// (exit 7 while some are left) and the runs add up to the plan, each entry
// requested once.
func TestApplyMaxResumesInSlices(t *testing.T) {
	e := newOpsEnv(t)
	const sub = "app.BillingProjector"
	for i := range 5 {
		parkRedisEntry(t, e, sub, fmt.Sprintf("b-%d", i), "boom", time.Hour)
	}
	plan := savePlan(t, e, "parked", "retry", "--subscription", sub, "--error", "boom")
	var results []string
	for run, want := range []int{clierr.ExitPartial, clierr.ExitPartial, clierr.ExitOK, clierr.ExitOK} {
		r := e.run("apply", "-f", plan, "--max", "2", "--yes", "-o", "json")
		r.wantCode(t, want)
		var doc bulkDoc
		decode(t, r.stdout, &doc)
		counts := map[string]int{}
		for _, it := range doc.Items {
			counts[it.result()]++
		}
		results = append(results, fmt.Sprintf("run %d: %v", run+1, counts))
	}
	want := []string{
		"run 1: map[:3 applied:2]", "run 2: map[:1 applied:2 done:2]",
		"run 3: map[applied:1 done:4]", "run 4: map[done:5]",
	}
	if strings.Join(results, "; ") != strings.Join(want, "; ") {
		t.Fatalf("results\n%s\nwant\n%s", strings.Join(results, "\n"), strings.Join(want, "\n"))
	}
}

// TestParkedSubscriptionKnownElsewhereAgrees: a --subscription that
// Redis knows (a consumer group, a Kafka checkpoint) but that never
// parked an entry selects nothing for parked ls, retry and skip alike:
// an empty list, an empty plan, exit 0 (decision 0030's rule for list
// filters). A typo is not found (exit 4) for all three, named. Before,
// ls listed nothing and exited 0 while retry and skip --all checked the
// failure ledger alone and exited 4.
func TestParkedSubscriptionKnownElsewhereAgrees(t *testing.T) {
	e := newOpsEnv(t)
	e.park()                    // the ledger knows the projector only
	seedTopicLeaseGroup(t, e.c) // ledger: a Kafka checkpoint, nothing parked
	// invoicer: a consumer group that once leased a partition.
	if err := e.c.Set(context.Background(), broker.ProteanLayout.GenerationKey("invoicer", e.s.Healthy), "3", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"ledger", "invoicer"} {
		t.Run(sub, func(t *testing.T) {
			before := e.digest()
			r := e.run("parked", "ls", "--subscription", sub, "-o", "json")
			r.wantCode(t, 0)
			if !strings.Contains(r.stdout, `"items": []`) {
				t.Errorf("parked ls --subscription %s: %s", sub, r.stdout)
			}
			for _, args := range [][]string{
				{"parked", "retry", "--all", "--subscription", sub, "--yes", "-o", "json"},
				{"parked", "skip", "--all", "--subscription", sub, "--reason", "x", "--yes", "-o", "json"},
				{"parked", "retry", "--all", "--subscription", sub, "--dry-run", "-o", "json"},
			} {
				r := e.run(args...)
				r.wantCode(t, 0)
				if !strings.Contains(r.stdout, `"items": []`) && !strings.Contains(r.stdout, `"count": 0`) {
					t.Errorf("%v: want an empty plan:\n%s\n%s", args, r.stdout, r.stderr)
				}
			}
			if e.digest() != before {
				t.Error("an empty selection changed Redis")
			}
		})
	}
	before := e.digest()
	for _, args := range [][]string{
		{"parked", "ls", "--subscription", "ledgr"},
		{"parked", "retry", "--all", "--subscription", "ledgr", "--yes"},
		{"parked", "skip", "--all", "--subscription", "ledgr", "--reason", "x", "--yes"},
	} {
		r := e.run(args...)
		r.wantCode(t, clierr.ExitNotFound)
		if !strings.Contains(r.stderr, `subscription "ledgr" not found`) {
			t.Errorf("%v: the error does not name the subscription:\n%s", args, r.stderr)
		}
	}
	if e.digest() != before {
		t.Error("a typo changed Redis")
	}
}
