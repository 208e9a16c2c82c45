//go:build unix

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Acceptance: a skip-head's dead letter, replayed with dlq replay while a
// `protctl run node` process (exec handler) consumes the category, is
// handled by that node exactly once, after the events published to its
// key since it was dead-lettered and before those published after the
// replay; the node keeps running throughout.
func TestDLQReplayIsHandledByARunningNode(t *testing.T) {
	bin := buildProtctl(t)
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	l := broker.ProteanLayout
	const key, other = "o-000", "o-001"
	stream := l.Stream(procCategory, key)
	b := redisbroker.New(c)
	publish := func(k string, seq int) {
		t.Helper()
		env := fmt.Sprintf(`{"data":{"key":"%s","seq":%d},"metadata":{"headers":{"id":"%s-%d","type":"OrderChanged"}}}`, k, seq, k, seq)
		if _, err := b.PublishPartitioned(ctx, procCategory, k, "", []byte(env)); err != nil {
			t.Fatal(err)
		}
	}

	// seq 1 is a poison message: delivered 3 times to an owner that is
	// gone, the partition's head; the operator skips it.
	publish(key, 1)
	if err := c.XGroupCreateMkStream(ctx, stream, procGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	first := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: procGroup, Consumer: "old-node:1", Streams: []string{stream, ">"}, Count: 1}).Val()[0].Messages[0].ID
	c.Do(ctx, "XCLAIM", stream, procGroup, "old-node:1", 0, first, "RETRYCOUNT", 3, "JUSTID")
	cli := newCLI(t)
	cli.env["PROTCTL_REDIS"] = srv.URL()
	cli.run("partitions", "skip-head", procCategory, key, "--group", procGroup, "--reason", "handler: amount must be positive", "--yes").wantCode(t, 0)
	if n := c.XLen(ctx, l.DLQStream(procCategory, key)).Val(); n != 1 {
		t.Fatalf("%d dead letters after skip-head", n)
	}

	// The fix is deployed: a node consumes the category, and newer events
	// of the key (and another) are handled.
	dir := t.TempDir()
	script := writeRecordScript(t, dir)
	record := filepath.Join(dir, "record.txt")
	cfg := filepath.Join(dir, "node.yaml")
	writeFile(t, cfg, nodeYAML(srv.URL(), "node-1", execHandlerYAML(script, record, ""), 10*time.Second))
	node := startNodeProc(t, bin, "node-1", cfg)
	waitMembers(t, redisstore.New(c), 1)
	for seq := 2; seq <= 4; seq++ {
		publish(key, seq)
		publish(other, seq)
	}
	handled := func(k string) []int {
		var seqs []int
		for _, e := range parseEvents(t, readFile(t, record)) {
			if e.kind == 'E' && e.key == k {
				seqs = append(seqs, e.seq)
			}
		}
		return seqs
	}
	testenv.Eventually(t, time.Minute, "seq 2 to 4 handled", func() (bool, string) {
		return len(handled(key)) == 3 && len(handled(other)) == 3, fmt.Sprintf("%s %v, %s %v", key, handled(key), other, handled(other))
	})

	// Replay the dead letter while the node runs, then publish seq 5.
	r := cli.run("dlq", "replay", procCategory, "--key", key, "--yes")
	r.wantCode(t, 0)
	if !hasRow(r.stdout, "dlq-replay", `entry \S+ of shop::order:o-000:dlq`, ".*", "yes", "applied") {
		t.Fatalf("replay:\n%s", r.stdout)
	}
	testenv.Eventually(t, time.Minute, "the replayed seq 1 handled", func() (bool, string) {
		return len(handled(key)) == 4, fmt.Sprint(handled(key))
	})
	publish(key, 5)
	testenv.Eventually(t, time.Minute, "seq 5 handled", func() (bool, string) {
		return len(handled(key)) == 5, fmt.Sprint(handled(key))
	})

	// Exactly once, after the newer events, before the later one, never
	// inside the handler twice at once.
	if got, want := handled(key), []int{2, 3, 4, 1, 5}; !slices.Equal(got, want) {
		t.Fatalf("key %s handled seq %v, want %v", key, got, want)
	}
	open := 0
	for _, e := range parseEvents(t, readFile(t, record)) {
		if e.key != key {
			continue
		}
		switch e.kind {
		case 'B':
			open++
		case 'E':
			open--
		}
		if open < 0 || open > 1 {
			t.Fatalf("key %s: %d handler calls at once", key, open)
		}
	}
	select {
	case <-node.done:
		t.Fatalf("the node stopped: %v", node.err)
	default:
	}
	if n := c.XLen(ctx, l.DLQStream(procCategory, key)).Val(); n != 0 {
		t.Fatalf("%d dead letters left after the replay", n)
	}
	// Nothing is left pending for the group: the replayed entry is acked
	// (after the handler returned: the record's E line is written first).
	testenv.Eventually(t, 30*time.Second, "no entry pending after the replayed one was handled", func() (bool, string) {
		p := c.XPending(ctx, stream, procGroup).Val()
		return p.Count == 0, fmt.Sprintf("%d pending", p.Count)
	})
}
