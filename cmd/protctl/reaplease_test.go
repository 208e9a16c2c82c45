package main

import (
	"context"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/pkg/broker"
)

// TestReapOfALiveOwnersPartition: o-healthy is read and acked to the end
// (reapable with --min-idle 0s) but node-a holds its lease. Without
// --force the plan names the lease and refuses the item with release's
// wording (exit 6, nothing changed); a plan made with --force, applied
// after the lease moved, is a conflict (exit 5, nothing changed); with
// --force and the lease as planned the partition is reaped and its lease
// key deleted, the generation counter kept.
func TestReapOfALiveOwnersPartition(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	ctx := context.Background()
	l := broker.ProteanLayout
	args := []string{"partitions", "reap", s.Orders, s.Healthy, "--min-idle", "0s"}

	before := e.digest()
	r := e.run(append(args, "--yes")...)
	r.wantCode(t, clierr.ExitRefused)
	for _, w := range []string{s.HealthyToken, "held", "use --force"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("the refusal does not say %q:\n%s\n%s", w, r.stdout, r.stderr)
		}
	}
	if e.digest() != before {
		t.Fatal("a refused reap changed Redis")
	}

	r = e.run(append(args, "--dry-run", "-o", "json")...)
	r.wantCode(t, clierr.ExitRefused)
	var doc struct {
		Items []struct {
			Allowed      bool   `json:"allowed"`
			Reason       string `json:"reason"`
			Precondition struct {
				Leases []struct {
					Group string  `json:"group"`
					Lease *string `json:"lease"`
				} `json:"leases"`
			} `json:"precondition"`
		} `json:"items"`
	}
	decode(t, r.stdout, &doc)
	if len(doc.Items) != 1 || doc.Items[0].Allowed {
		t.Fatalf("items %+v, want one refused", doc.Items)
	}
	ls := doc.Items[0].Precondition.Leases
	if len(ls) != 1 || ls[0].Group != s.Projector || ls[0].Lease == nil || *ls[0].Lease != s.HealthyToken {
		t.Fatalf("the plan's leases are %+v, want %s held by %s", ls, s.Projector, s.HealthyToken)
	}

	// --all-cold does not take it either.
	r = e.run("partitions", "reap", s.Orders, "--all-cold", "--min-idle", "0s", "--dry-run", "-o", "json")
	if strings.Contains(r.stdout, s.Healthy) {
		t.Fatalf("--all-cold without --force plans the leased partition:\n%s", r.stdout)
	}

	// Planned with --force, applied after the lease moved: a conflict.
	plan := savePlan(t, e, append(args, "--force")...)
	lk := l.LeaseKey(s.Projector, s.Healthy)
	if err := e.c.Set(ctx, lk, "node-b:4", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before = e.digest()
	r = e.run("apply", "-f", plan, "--yes")
	r.wantCode(t, clierr.ExitConflict)
	if !strings.Contains(r.stdout, "node-b:4") {
		t.Errorf("the conflict does not say what the lease holds now:\n%s", r.stdout)
	}
	if e.digest() != before {
		t.Fatal("a conflicting reap changed Redis")
	}

	// --force with the lease as planned: reaped, lease key deleted.
	if err := e.c.Set(ctx, lk, s.HealthyToken, 0).Err(); err != nil {
		t.Fatal(err)
	}
	r = e.run(append(args, "--force", "--yes")...)
	r.wantCode(t, 0)
	for _, k := range []string{l.Stream(s.Orders, s.Healthy), lk} {
		if n, _ := e.c.Exists(ctx, k).Result(); n != 0 {
			t.Errorf("%s survived the forced reap", k)
		}
	}
	if ok, _ := e.c.SIsMember(ctx, l.IndexKey(s.Orders), s.Healthy).Result(); ok {
		t.Error("o-healthy is still indexed")
	}
	if gen, _ := e.c.Get(ctx, l.GenerationKey(s.Projector, s.Healthy)).Int64(); gen != 3 {
		t.Errorf("generation %d, want 3 kept", gen)
	}
}
