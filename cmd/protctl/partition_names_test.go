package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// A lease key (G:K:__lease__) and a pin name a group and a key, not a
// category: a release or a move with a category, key or group nothing
// records must exit 4 (NOT_FOUND) having changed nothing, not act on
// another category's partition of the same key, or write a pin no node
// reads.
func TestReleaseAndMoveRequireAKnownPartition(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	s := testenv.ProteanStandard(t, c)
	store := redisstore.New(c)
	if err := store.Heartbeat(ctx, runtime.NodeStatus{Service: "shop", Node: "node-2"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	cli := newCLI(t)
	run := func(args ...string) result {
		t.Helper()
		return cli.run(append(args, "--redis", srv.URL())...)
	}
	leaseKey := s.Projector + ":" + s.Halted + ":__lease__"
	unknown := map[string][]string{
		"category": {"nosuch::c", s.Halted, "--group", s.Projector},
		"key":      {s.Orders, "o-zzzz", "--group", s.Projector},
		"group":    {s.Orders, s.Halted, "--group", "NOPE"},
	}
	for name, target := range unknown {
		for _, mode := range [][]string{{"--yes"}, {"--dry-run"}} {
			args := append(append([]string{"partitions", "release"}, target...), append([]string{"--force"}, mode...)...)
			r := run(args...)
			r.wantCode(t, clierr.ExitNotFound)
			if !strings.Contains(r.stderr, "not found") {
				t.Errorf("release, unknown %s: stderr does not say what was not found:\n%s", name, r.stderr)
			}
			args = append(append([]string{"partitions", "move"}, target...), append([]string{"--service", "shop", "--to", "node-2"}, mode...)...)
			run(args...).wantCode(t, clierr.ExitNotFound)
		}
	}
	if v, err := c.Get(ctx, leaseKey).Result(); err != nil || v != s.HaltedToken {
		t.Fatalf("lease %s is %q (%v), want %s: a release of an unknown partition deleted it", leaseKey, v, err, s.HaltedToken)
	}
	if n := c.HLen(ctx, redisstore.PinsKey("shop")).Val(); n != 0 {
		t.Fatalf("a move of an unknown partition wrote %d pins", n)
	}

	// A plan made for the real partition and edited to name another
	// category is re-checked when applied: nothing released, exit 5.
	r := run("partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force", "--dry-run", "-o", "json")
	r.wantCode(t, 0)
	plan := t.TempDir() + "/release.json"
	writeFile(t, plan, strings.Replace(r.stdout, `"category": "`+s.Orders+`"`, `"category": "nosuch::c"`, 1))
	r = run("apply", "-f", plan, "--yes")
	r.wantCode(t, clierr.ExitConflict)
	if v := c.Get(ctx, leaseKey).Val(); v != s.HaltedToken {
		t.Fatalf("an applied plan of an unknown category released the lease (now %q)", v)
	}

	// The real partition still moves and releases.
	run("partitions", "move", s.Orders, s.Halted, "--group", s.Projector, "--service", "shop", "--to", "node-2", "--yes").wantCode(t, 0)
	if n := c.HLen(ctx, redisstore.PinsKey("shop")).Val(); n != 1 {
		t.Fatalf("the move of a real partition wrote %d pins, want 1", n)
	}
	run("partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force", "--yes").wantCode(t, 0)
	if n := c.Exists(ctx, leaseKey).Val(); n != 0 {
		t.Fatal("the release of a real partition left its lease")
	}
}

// apply -f re-derives every refusal from the plan's recorded parameters
// and the state now: a refused plan edited to "allowed": true is refused
// again (exit 6), and nothing changes.
func TestApplyIgnoresAnEditedAllowed(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := context.Background()
	s := testenv.ProteanStandard(t, c)
	cli := newCLI(t)
	run := func(args ...string) result {
		t.Helper()
		return cli.run(append(args, "--redis", srv.URL())...)
	}
	for name, args := range map[string][]string{
		"release without --force":          {"partitions", "release", s.Orders, s.Halted, "--group", s.Projector},
		"skip-head delivered fewer than 2": {"partitions", "skip-head", s.Orders, s.Backfill, "--group", s.Projector},
	} {
		r := run(append(args, "--dry-run", "-o", "json")...)
		r.wantCode(t, clierr.ExitRefused)
		if !strings.Contains(r.stdout, `"allowed": false`) {
			t.Fatalf("%s: the plan allows it:\n%s", name, r.stdout)
		}
		plan := t.TempDir() + "/edited.json"
		writeFile(t, plan, strings.Replace(r.stdout, `"allowed": false`, `"allowed": true`, 1))
		r = run("apply", "-f", plan, "--yes")
		r.wantCode(t, clierr.ExitRefused)
		if !strings.Contains(r.stdout, "refused") || !strings.Contains(r.stdout, "--force") {
			t.Errorf("%s: the result does not say it was refused and why:\n%s", name, r.stdout)
		}
	}
	if v := c.Get(ctx, s.Projector+":"+s.Halted+":__lease__").Val(); v != s.HaltedToken {
		t.Fatalf("the edited release plan released the lease (now %q)", v)
	}
	if n := c.Exists(ctx, s.Orders+":"+s.Backfill+":dlq").Val(); n != 0 {
		t.Fatal("the edited skip-head plan dead-lettered the entry")
	}
}

// skip-head --id takes a stream id: anything else is a usage error
// naming --id (exit 2), not an entry that "is not pending" (exit 6).
func TestSkipHeadMalformedIDIsAUsageError(t *testing.T) {
	srv := testenv.StartRedis(t)
	s := testenv.ProteanStandard(t, srv.Client(t))
	r := newCLI(t).run("partitions", "skip-head", s.Orders, s.Halted, "--group", s.Projector, "--id", "garbage", "--dry-run", "--redis", srv.URL())
	r.wantCode(t, clierr.ExitUsage)
	if !strings.Contains(r.stderr, `invalid --id "garbage"`) {
		t.Fatalf("stderr does not name --id:\n%s", r.stderr)
	}
}
