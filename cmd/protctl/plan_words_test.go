package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/testenv"
)

// Plans say a lease's state in the words of partitions ls and show (docs'
// lease states): a partition with a generation counter and no lease is
// released or expired, never free (never leased) nor unheld (leases ls
// without --category).
func TestPlansUseTheLeaseStateWords(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	cat := testenv.Protean(t, c).Category("shop::order")
	// o-3: leased up to generation 10, its owner gone with an entry
	// pending (expired), and a consumer with nothing pending (stale).
	cat.Partition("o-3").Entries(5).Group("g").Consumer("old:1").Read(1).Ack(1).
		Consumer("gone:10").Read(1).Deliveries(4, time.Minute).ExpiredLease(10)
	// o-4: held, with work waiting.
	cat.Partition("o-4").Entries(5).Group("g").Lease("w", 3, time.Minute).Read(1)
	cli := newCLI(t)
	run := func(args ...string) result {
		t.Helper()
		return cli.run(append(args, "--redis", srv.URL())...)
	}
	const want = "lease expired (none held since generation 10)"
	for _, args := range [][]string{
		{"partitions", "release", "shop::order", "o-3", "--group", "g", "--dry-run"},
		{"partitions", "skip-head", "shop::order", "o-3", "--group", "g", "--dry-run"},
		{"partitions", "seek", "shop::order", "o-3", "--group", "g", "--to", "earliest", "--dry-run"},
		{"partitions", "prune-consumers", "shop::order", "--group", "g", "--dry-run"},
	} {
		r := run(args...)
		if r.code != 0 && r.code != clierr.ExitRefused {
			r.wantCode(t, 0)
		}
		if !strings.Contains(r.stdout, want) || strings.Contains(r.stdout, "lease free") || strings.Contains(r.stdout, "unheld") {
			t.Errorf("%s: the plan does not say %q:\n%s", strings.Join(args[:2], " "), want, r.stdout)
		}
	}

	// A release whose lease expired since the plan: the conflict says so.
	r := run("partitions", "release", "shop::order", "o-4", "--group", "g", "--force", "--dry-run", "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"leaseState": "held"`) {
		t.Errorf("the plan does not record the lease state:\n%s", r.stdout)
	}
	plan := t.TempDir() + "/release.json"
	writeFile(t, plan, r.stdout)
	c.Del(ctx, "g:o-4:__lease__")
	r = run("apply", "-f", plan, "--yes")
	r.wantCode(t, clierr.ExitConflict)
	if !strings.Contains(r.stdout, "the lease is now expired (none held since generation 3)") || strings.Contains(r.stdout, "unheld") {
		t.Errorf("the conflict does not say the lease expired:\n%s", r.stdout)
	}
}

// Plan documents follow the JSON conventions: a value that is unknown or
// absent is null, never "" (docs/cli.md, JSON field conventions).
func TestPlanJSONAbsentValuesAreNull(t *testing.T) {
	e := newOpsEnv(t)
	e.park()
	s := e.s
	for _, c := range []struct {
		args []string
		want []string
	}{
		// No group pins the floor of a stream without groups.
		{[]string{"streams", "trim", s.Orders + ":" + s.Never, "--maxlen", "1"}, []string{`"pinnedBy": null`}},
		// --all without a filter: every entry; the entry holds no request.
		{[]string{"parked", "retry", "--all"}, []string{`"filter": null`, `"request": null`}},
	} {
		r := e.run(append(c.args, "--dry-run", "-o", "json")...)
		r.wantCode(t, 0)
		for _, w := range c.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%s: the plan lacks %s:\n%s", strings.Join(c.args[:2], " "), w, r.stdout)
			}
		}
		if strings.Contains(r.stdout, `": ""`) {
			t.Errorf("%s: the plan has an empty string value:\n%s", strings.Join(c.args[:2], " "), r.stdout)
		}
	}
}
