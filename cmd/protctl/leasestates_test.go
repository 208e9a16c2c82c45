package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// leaseStatesEnv lays down one partition per lease state on a real
// Redis: held, released after idle, parked (released by its owner with
// the head pending), expired with a pending entry, expired with entries
// not delivered, and never leased.
func leaseStatesEnv(t *testing.T) *opsEnv {
	t.Helper()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	const cat, g = "shop::order", "app.Projector"
	o := testenv.Protean(t, c).Category(cat)
	o.Partition("held").Entries(3).Group(g).Lease("node-a", 4, time.Minute).Read(3).Ack(3)
	o.Partition("released").Entries(3).Group(g).Consumer("node-a:4").Read(3).Ack(3).ExpiredLease(4)
	o.Partition("expired-pending").Entries(3).Group(g).Consumer("node-b:2").Read(2).Ack(1).ExpiredLease(2)
	o.Partition("expired-lag").Entries(5).Group(g).Consumer("node-b:3").Read(2).Ack(2).ExpiredLease(3)
	o.Partition("free").Entries(2).Group(g).Read(2).Ack(2)
	parked := o.Partition("parked").Entries(4).Group(g).Lease("node-c", 2, time.Minute).Read(1)
	fence := broker.Fence{LeaseKey: parked.LeaseKey(), Token: "node-c:2"}
	if err := redisstore.New(c).Park(context.Background(), fence, ledger.Parked{
		Subscription: g, Source: source.Redis, Aggregate: "parked", Category: cat,
		Partition: "parked", Position: parked.IDs()[0], Error: "boom", Attempts: 3,
	}); err != nil {
		t.Fatal(err)
	}
	parked.ExpiredLease(2)
	return &opsEnv{t: t, srv: srv, c: c}
}

var wantLeaseStates = map[string]string{
	"held": "held", "released": "released", "parked": "released",
	"expired-pending": "expired", "expired-lag": "expired", "free": "free",
}

// TestLeaseStatesInEveryCommand: an idle released partition and a
// parked one read released, never expired, in partitions ls (table and
// JSON), partitions show, leases ls and check; a held lease shows its TTL
// (issue 18 item 4).
func TestLeaseStatesInEveryCommand(t *testing.T) {
	e := leaseStatesEnv(t)

	r := e.run("partitions", "ls", "shop::order")
	r.wantCode(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	head := strings.Fields(lines[0])
	col := func(name string) int {
		for i, h := range head {
			if h == name {
				return i
			}
		}
		t.Fatalf("no column %s in %q", name, lines[0])
		return -1
	}
	keyCol, leaseCol, ttlCol := col("KEY"), col("LEASE"), col("TTL")
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if got, want := f[leaseCol], wantLeaseStates[f[keyCol]]; got != want {
			t.Errorf("partitions ls %s: LEASE %q, want %q\n%s", f[keyCol], got, want, r.stdout)
		}
		if (f[keyCol] == "held") == (f[ttlCol] == "-") {
			t.Errorf("partitions ls %s: TTL %q (a held lease shows its TTL, no other)", f[keyCol], f[ttlCol])
		}
	}
	if strings.Contains(r.stdout, "expired") != true {
		t.Errorf("the expired partitions are not marked:\n%s", r.stdout)
	}

	r = e.run("partitions", "ls", "shop::order", "-o", "json")
	r.wantCode(t, 0)
	var list struct {
		Items []struct {
			Key    string `json:"key"`
			Groups []struct {
				LeaseState string `json:"leaseState"`
			} `json:"groups"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatal(err)
	}
	for _, it := range list.Items {
		if got := it.Groups[0].LeaseState; got != wantLeaseStates[it.Key] {
			t.Errorf("-o json %s: leaseState %q, want %q", it.Key, got, wantLeaseStates[it.Key])
		}
	}

	for key, st := range wantLeaseStates {
		r = e.run("partitions", "show", "shop::order", key)
		r.wantCode(t, 0)
		lease := lineOf(r.stdout, "Lease:")
		if !strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(lease, "Lease:")), st) {
			t.Errorf("show %s: %q, want the state %q first", key, lease, st)
		}
		if says := strings.Contains(lineOf(r.stdout, "Verdict:"), "expired"); says != (st == "expired") {
			t.Errorf("show %s (%s): verdict %q", key, st, lineOf(r.stdout, "Verdict:"))
		}
	}

	r = e.run("leases", "ls", "--category", "shop::order", "-o", "json")
	r.wantCode(t, 0)
	var leases struct {
		Items []inspect.Lease `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &leases); err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if string(l.State) != wantLeaseStates[l.Key] {
			t.Errorf("leases ls %s: %q, want %q", l.Key, l.State, wantLeaseStates[l.Key])
		}
	}
	r = e.run("leases", "ls", "--category", "shop::order", "--state", "released")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "parked") || strings.Contains(r.stdout, "expired-") {
		t.Errorf("--state released:\n%s", r.stdout)
	}

	r = e.run("check", "--no-expired-leases", "--category", "shop::order", "-o", "json")
	r.wantCode(t, 8)
	var rep checkReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Checks) != 1 || rep.Checks[0].Name != "expiredLeases" || *rep.Checks[0].Value != 2 {
		t.Fatalf("check %+v", rep.Checks)
	}
	offenders := strings.Join(rep.Checks[0].Offenders, "\n")
	if !strings.Contains(offenders, "expired-pending") || !strings.Contains(offenders, "expired-lag") ||
		strings.Contains(offenders, "released") || strings.Contains(offenders, " parked ") {
		t.Errorf("expiredLeases offenders:\n%s", offenders)
	}
}

func lineOf(out, label string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, label) {
			return l
		}
	}
	return ""
}

// TestCLIDocStatesTable: docs/cli.md's tables of lease and partition
// states are generated from inspect's lists, one row per state.
func TestCLIDocStatesTable(t *testing.T) {
	r := newCLI(t).run("docs")
	r.wantCode(t, 0)
	for _, s := range append(inspect.LeaseStates(), inspect.VerdictStates()...) {
		if row := "| `" + s.State + "` | " + s.Meaning + " |"; !strings.Contains(r.stdout, row) {
			t.Errorf("docs: no row %q", row)
		}
	}
	if !strings.Contains(r.stdout, "`groups[].leaseState`") {
		t.Error("docs do not name the JSON field groups[].leaseState")
	}
}
