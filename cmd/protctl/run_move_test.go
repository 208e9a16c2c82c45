//go:build unix

package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime/hrw"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Acceptance (issue 23, move): with three `run node` processes under
// load, `partitions move` pins a partition to a node that HRW does not
// pick and that node owns it (holds its lease) within about one renewal
// period; a plan made before the pin changed exits 5 and writes nothing;
// the pin shows in nodes ls; when the pinned node dies the partition falls
// back to HRW over the survivors, and --unpin removes the pin.
func TestRunNodeMovePartition(t *testing.T) {
	bin := buildProtctl(t)
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	store := redisstore.New(c)
	rec := &drainRecord{keyHeader: "X-Protctl-Partition"}
	hs := httptest.NewServer(rec)
	defer hs.Close()
	dir := t.TempDir()
	be := drainBackend{source: fmt.Sprintf(`redis: {categories: ["%s"]}`, procCategory)}
	ids := []string{"node-1", "node-2", "node-3"}
	procs := map[string]*nodeProc{}
	for _, id := range ids {
		cfg := filepath.Join(dir, id+".yaml")
		writeFile(t, cfg, drainNodeYAML(srv, be, hs.URL, id))
		procs[id] = startNodeProc(t, bin, id, cfg)
	}
	waitMembers(t, store, 3)
	keys := keyNames(30)
	stop := continuousPublisher(t, c, keys, 50*time.Millisecond)
	defer stop()

	const key = "o-007"
	leaseKey := procGroup + ":" + key + ":__lease__"
	owner := func() string {
		v, err := c.Get(context.Background(), leaseKey).Result()
		if err != nil {
			return ""
		}
		return v[:strings.LastIndexByte(v, ':')]
	}
	home := hrw.Owner(key, ids)
	testenv.Eventually(t, time.Minute, "the HRW owner holds "+key, func() (bool, string) {
		return owner() == home, "owner " + owner()
	})
	target := ids[0]
	if target == home {
		target = ids[1]
	}
	cli := newCLI(t)
	move := func(extra ...string) []string {
		return append([]string{"partitions", "move", procCategory, key, "--group", procGroup, "--service", procService, "--redis", srv.URL()}, extra...)
	}

	// A plan made now, applied after someone else pinned the partition,
	// is stale: exit 5, nothing written.
	r := cli.run(move("--to", target, "--dry-run", "-o", "json")...)
	r.wantCode(t, 0)
	stale := filepath.Join(dir, "stale.json")
	if err := os.WriteFile(stale, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	movedAt := time.Now()
	cli.run(move("--to", target, "--yes")...).wantCode(t, 0)
	testenv.Eventually(t, time.Minute, target+" owns "+key, func() (bool, string) {
		return owner() == target, "owner " + owner()
	})
	took := time.Since(movedAt)
	t.Logf("%s owned %s %s after the move (renewal period %s)", target, key, took.Round(time.Millisecond), procRenew)
	if took >= procTTL {
		t.Errorf("the move took %s, as long as a lease TTL (%s): the owner did not hand off", took, procTTL)
	}
	_, pinsBefore, _ := store.RawPlacement(context.Background(), procService)
	r = cli.run("apply", "-f", stale, "--yes", "--redis", srv.URL())
	r.wantCode(t, clierr.ExitConflict)
	_, pinsAfter, _ := store.RawPlacement(context.Background(), procService)
	if fmt.Sprint(pinsBefore) != fmt.Sprint(pinsAfter) {
		t.Errorf("a stale plan changed the pins: %v -> %v", pinsBefore, pinsAfter)
	}
	r = cli.run("nodes", "ls", "--service", procService, "-o", "json", "--redis", srv.URL())
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"partition": "`+key+`"`) {
		t.Errorf("nodes ls does not show the pin of %s:\n%s", key, r.stdout)
	}

	// The pinned node dies: the partition falls back to HRW over the
	// survivors (the pin stays, ignored).
	procs[target].signal(syscall.SIGKILL)
	<-procs[target].done
	var survivors []string
	for _, id := range ids {
		if id != target {
			survivors = append(survivors, id)
		}
	}
	fallback := hrw.Owner(key, survivors)
	testenv.Eventually(t, time.Minute, "HRW owner "+fallback+" holds "+key, func() (bool, string) {
		return owner() == fallback, "owner " + owner()
	})
	st, err := store.ReadPlacement(context.Background(), procService)
	if err != nil || len(st.Pins) != 1 || st.Pins[0].Node != target {
		t.Errorf("pins after the pinned node died: %+v, %v; want the pin kept", st.Pins, err)
	}
	cli.run(move("--unpin", "--yes")...).wantCode(t, 0)
	if st, _ := store.ReadPlacement(context.Background(), procService); len(st.Pins) != 0 {
		t.Errorf("pins after --unpin: %+v", st.Pins)
	}
	// Moving to a node that is not live is refused.
	cli.run(move("--to", target, "--yes")...).wantCode(t, clierr.ExitRefused)
}

// The same for a Kafka topic partition: `topics move orders/3 --to NODE`
// moves the partition (all subscriptions of the topic) to NODE; --unpin
// gives it back to HRW.
func TestRunNodeMoveTopicPartition(t *testing.T) {
	bin := buildProtctl(t)
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	store := redisstore.New(c)
	k := testenv.StartKafka(t, 6, "orders")
	rec := &drainRecord{keyHeader: "X-Protctl-Aggregate"}
	hs := httptest.NewServer(rec)
	defer hs.Close()
	dir := t.TempDir()
	be := drainBackend{top: fmt.Sprintf(`kafka: {brokers: ["%s"]}`, k.Brokers[0]), source: `kafka: {topic: orders}`}
	ids := []string{"node-1", "node-2", "node-3"}
	for _, id := range ids {
		cfg := filepath.Join(dir, id+".yaml")
		writeFile(t, cfg, drainNodeYAML(srv, be, hs.URL, id))
		startNodeProc(t, bin, id, cfg)
	}
	waitMembers(t, store, 3)
	holder := func(p string) string {
		members, _ := store.Members(context.Background(), procService)
		for _, m := range members {
			for _, h := range m.Held {
				if h.Topic == "orders" && h.Partition == p {
					return m.Node
				}
			}
		}
		return ""
	}
	home := hrw.Owner("orders/3", ids)
	testenv.Eventually(t, time.Minute, "the HRW owner holds orders/3", func() (bool, string) {
		return holder("3") == home, "holder " + holder("3")
	})
	target := ids[0]
	if target == home {
		target = ids[1]
	}
	cli := newCLI(t)
	movedAt := time.Now()
	cli.run("topics", "move", "orders/3", "--service", procService, "--to", target, "--yes", "--redis", srv.URL()).wantCode(t, 0)
	testenv.Eventually(t, time.Minute, target+" holds orders/3", func() (bool, string) {
		return holder("3") == target, "holder " + holder("3")
	})
	t.Logf("%s held orders/3 %s after the move (renewal period %s, heartbeat included)", target, time.Since(movedAt).Round(time.Millisecond), procRenew)
	cli.run("topics", "move", "orders/x", "--service", procService, "--to", target, "--redis", srv.URL()).wantCode(t, clierr.ExitUsage)
	cli.run("topics", "move", "orders/3", "--service", procService, "--unpin", "--yes", "--redis", srv.URL()).wantCode(t, 0)
	testenv.Eventually(t, time.Minute, "orders/3 back on its HRW owner", func() (bool, string) {
		return holder("3") == home, "holder " + holder("3")
	})
}
