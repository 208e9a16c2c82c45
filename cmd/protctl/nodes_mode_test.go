package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/placement"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// nodes cordon/drain/uncordon and partitions move without running nodes:
// a typo exits 4, bad flags exit 2, a mode already set is skipped, a mode
// survives its node's absence until uncordoned, every apply is audited,
// and a stale plan exits 5 with nothing written.
func TestNodesModeCommands(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	store := redisstore.New(c)
	ctx := context.Background()
	if err := store.Heartbeat(ctx, runtime.NodeStatus{Service: "shop", Node: "node-1"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	cli := newCLI(t)
	run := func(args ...string) result {
		return cli.run(append(args, "--redis", srv.URL())...)
	}
	run("nodes", "cordon", "ghost", "--service", "shop", "--yes").wantCode(t, clierr.ExitNotFound)
	run("nodes", "cordon", "node-1", "--service", "shop").wantCode(t, clierr.ExitRefused) // no terminal, no --yes
	if st, _ := store.ReadPlacement(ctx, "shop"); len(st.Modes) != 0 {
		t.Fatalf("a refused cordon wrote %v", st.Modes)
	}
	run("partitions", "move", "shop::order", "o-1", "--group", "g", "--service", "shop", "--to", "node-1", "--unpin", "--yes").wantCode(t, clierr.ExitUsage)

	// A plan made now is stale once someone else cordons the node.
	r := run("nodes", "drain", "node-1", "--service", "shop", "--dry-run", "-o", "json")
	r.wantCode(t, 0)
	plan := t.TempDir() + "/drain.json"
	writeFile(t, plan, r.stdout)
	run("nodes", "cordon", "node-1", "--service", "shop", "--reason", "maintenance", "--yes").wantCode(t, 0)
	run("apply", "-f", plan, "--yes").wantCode(t, clierr.ExitConflict)
	st, err := store.ReadPlacement(ctx, "shop")
	if err != nil || st.Modes["node-1"].Mode != placement.Cordoned || st.Modes["node-1"].Reason != "maintenance" {
		t.Fatalf("after the stale drain plan: %+v, %v; want node-1 still cordoned", st.Modes, err)
	}
	run("nodes", "cordon", "node-1", "--service", "shop", "--yes").wantCode(t, 0) // skipped: already cordoned

	// The node leaves; its mode stays and it can still be uncordoned.
	if err := store.Leave(ctx, "shop", "node-1"); err != nil {
		t.Fatal(err)
	}
	run("nodes", "drain", "node-1", "--service", "shop", "--yes").wantCode(t, 0)
	if st, _ := store.ReadPlacement(ctx, "shop"); st.Modes["node-1"].Mode != placement.Draining {
		t.Fatalf("drain of a stored node that is not live: %+v", st.Modes)
	}
	run("nodes", "uncordon", "node-1", "--service", "shop", "--yes").wantCode(t, 0)
	if st, _ := store.ReadPlacement(ctx, "shop"); len(st.Modes) != 0 {
		t.Fatalf("after uncordon: %+v", st.Modes)
	}
	r = run("audit", "ls", "-o", "json")
	r.wantCode(t, 0)
	for _, action := range []string{`"cordon"`, `"drain"`, `"uncordon"`} {
		if !strings.Contains(r.stdout, action) {
			t.Errorf("the audit log has no %s:\n%s", action, r.stdout)
		}
	}
}
