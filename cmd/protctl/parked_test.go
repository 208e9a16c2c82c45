package main

import (
	"context"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
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

	r := e.run("parked", "ls", "--subscription", "other", "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"items": []`) {
		t.Fatalf("--subscription other lists %s", r.stdout)
	}
	r = e.run("parked", "ls", "--subscription", s.Projector, "-o", "json")
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
	if err != nil || p.Request == nil || p.Request.Action != runtime.ActionRetry || p.Request.By != "protctl:alice" {
		t.Fatalf("after retry: %+v %v", p.Request, err)
	}
	e.run("parked", "skip", s.Projector, s.Halted, "--reason", "refunded by hand", "--yes").wantCode(t, 0)
	p, err = store.GetParked(ctx, s.Projector, "", s.Halted)
	if err != nil || p.Request == nil || p.Request.Action != runtime.ActionSkip || p.Request.Reason != "refunded by hand" {
		t.Fatalf("after skip: %+v %v", p.Request, err)
	}

	t.Run("usage", func(t *testing.T) {
		e.run("parked", "skip", s.Projector, s.Halted, "--yes").wantCode(t, clierr.ExitUsage)
		e.run("parked", "retry", s.Projector, "--yes").wantCode(t, clierr.ExitUsage)
		e.run("parked", "retry", s.Projector, s.Halted, "--all", "--yes").wantCode(t, clierr.ExitUsage)
		e.run("parked", "retry", "--all", "--rps", "-1", "--yes").wantCode(t, clierr.ExitUsage)
	})
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
	if got := list("--group", "nobody"); len(got) != 0 {
		t.Fatalf("--group nobody lists %+v", got)
	}
	e.run("leases", "ls", "--state", "gone").wantCode(t, clierr.ExitUsage)
	e.run("leases", "ls", "--category", "no::such").wantCode(t, clierr.ExitNotFound)
}
