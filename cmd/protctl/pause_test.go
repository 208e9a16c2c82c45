package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime/pause"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// handledSeqs returns, per key, the seqs whose handler call ended, in
// record order.
func handledSeqs(t *testing.T, record string) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for _, e := range parseEvents(t, record) {
		if e.kind == 'E' {
			out[e.key] = append(out[e.key], e.seq)
		}
	}
	return out
}

// publishSeqs appends seqs from..to to every key, round by round.
func publishSeqs(t *testing.T, c *redis.Client, keys []string, from, to int) {
	t.Helper()
	ctx := context.Background()
	for seq := from; seq <= to; seq++ {
		for _, k := range keys {
			env := fmt.Sprintf(`{"data":{"key":"%s","seq":%d},"metadata":{"headers":{"id":"%s-%d","type":"OrderChanged"}}}`, k, seq, k, seq)
			if err := c.XAdd(ctx, &redis.XAddArgs{Stream: procCategory + ":" + k, Values: []string{"data", env}}).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.SAdd(ctx, procCategory+":__partitions__", k).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func operatorPausedOn(t *testing.T, store *redisstore.Store) map[string][]string {
	t.Helper()
	ms, err := store.Members(context.Background(), procService)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, m := range ms {
		out[m.Node] = m.OperatorPaused
	}
	return out
}

// Acceptance (issue 23 item 3): a key paused with `protctl pause` is not
// handled by its owner while the other keys flow; after its owner is
// SIGKILLed, the node that takes it over does not handle it either; it
// shows as paused in partitions show and ls; after `protctl resume` every
// event of it is handled once, in order.
func TestPauseSurvivesOwnerSIGKILL(t *testing.T) {
	bin := buildProtctl(t)
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	store := redisstore.New(c)
	dir := t.TempDir()
	script := writeRecordScript(t, dir)
	record := filepath.Join(dir, "record.txt")
	keys := keyNames(8)
	hot := keys[0]
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = srv.URL()

	// The group must be known for the pause to be planned: register it
	// as the nodes will.
	if err := c.SAdd(context.Background(), procCategory+":__groups__", procGroup).Err(); err != nil {
		t.Fatal(err)
	}
	r := cl.run("pause", procGroup, hot, "--reason", "downstream rejects it", "--yes", "-o", "json")
	r.wantCode(t, 0)

	procs := map[string]*nodeProc{}
	for _, id := range []string{"node-1", "node-2"} {
		cfg := filepath.Join(dir, id+".yaml")
		writeFile(t, cfg, nodeYAML(srv.URL(), id, execHandlerYAML(script, record, ""), 10*time.Second))
		procs[id] = startNodeProc(t, bin, id, cfg)
	}
	waitMembers(t, store, 2)
	publishSeqs(t, c, keys, 1, 3)
	others := keys[1:]
	allHandled := func(keys []string, n int) func() (bool, string) {
		return func() (bool, string) {
			h := handledSeqs(t, readFile(t, record))
			for _, k := range keys {
				if len(h[k]) < n {
					return false, fmt.Sprintf("key %s handled %v", k, h[k])
				}
			}
			return true, ""
		}
	}
	testenv.Eventually(t, 60*time.Second, "the other keys handled", allHandled(others, 3))
	// The owner (by the lease) says in its status that it holds the key
	// paused; both are read until they agree, as the two nodes' views of
	// the membership settle.
	var owner string
	testenv.Eventually(t, 60*time.Second, "the paused key held by its owner", func() (bool, string) {
		lease, err := c.Get(context.Background(), procGroup+":"+hot+":__lease__").Result()
		if err != nil {
			return false, fmt.Sprintf("lease: %v", err)
		}
		owner, _, _ = strings.Cut(lease, ":")
		held := operatorPausedOn(t, store)
		return slices.Contains(held[owner], procGroup+"/"+hot), fmt.Sprintf("lease %s, operatorPaused %v", lease, held)
	})
	if h := handledSeqs(t, readFile(t, record))[hot]; len(h) != 0 {
		t.Fatalf("paused key handled %v", h)
	}

	victim := procs[owner]
	victim.signal(syscall.SIGKILL)
	<-victim.done
	appendLine(t, record, fmt.Sprintf("K %d", victim.pid()))
	survivor := "node-1"
	if owner == "node-1" {
		survivor = "node-2"
	}
	waitMembers(t, store, 1)
	testenv.Eventually(t, 60*time.Second, "the survivor holds the paused key", func() (bool, string) {
		held := operatorPausedOn(t, store)[survivor]
		return slices.Contains(held, procGroup+"/"+hot), fmt.Sprintf("%s operatorPaused %v", survivor, held)
	})
	publishSeqs(t, c, keys, 4, 5)
	testenv.Eventually(t, 60*time.Second, "the other keys flow on the survivor", allHandled(others, 5))
	if h := handledSeqs(t, readFile(t, record))[hot]; len(h) != 0 {
		t.Fatalf("paused key handled %v after the failover", h)
	}

	// PAUSED in partitions show and ls.
	r = cl.run("partitions", "show", procCategory, hot, "-o", "json")
	r.wantCode(t, 0)
	var show struct {
		Groups []struct {
			Name    string       `json:"name"`
			Paused  *pause.Entry `json:"paused"`
			Verdict struct {
				State string `json:"state"`
			} `json:"verdict"`
			Lag *int64 `json:"lag"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &show); err != nil {
		t.Fatalf("partitions show: %v\n%s", err, r.stdout)
	}
	if len(show.Groups) != 1 || show.Groups[0].Paused == nil || show.Groups[0].Paused.Selector != pause.Key(hot) ||
		show.Groups[0].Paused.Reason != "downstream rejects it" || show.Groups[0].Verdict.State != "paused" ||
		show.Groups[0].Lag == nil || *show.Groups[0].Lag != 5 {
		t.Fatalf("partitions show of the paused key:\n%s", r.stdout)
	}
	r = cl.run("partitions", "ls", procCategory, "-o", "json")
	r.wantCode(t, 0)
	var ls struct {
		Items []struct {
			Key    string `json:"key"`
			Groups []struct {
				Paused *pause.Entry `json:"paused"`
			} `json:"groups"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ls); err != nil {
		t.Fatalf("partitions ls: %v\n%s", err, r.stdout)
	}
	paused := 0
	for _, it := range ls.Items {
		if len(it.Groups) == 1 && it.Groups[0].Paused != nil {
			paused++
			if it.Key != hot {
				t.Errorf("partitions ls shows %s paused", it.Key)
			}
		}
	}
	if paused != 1 {
		t.Errorf("partitions ls shows %d paused partitions, want 1:\n%s", paused, r.stdout)
	}
	r = cl.run("partitions", "ls", procCategory)
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "PAUSED") {
		t.Errorf("partitions ls table does not say PAUSED:\n%s", r.stdout)
	}

	r = cl.run("check", "--max-lag", "0", "--category", procCategory, "-o", "json")
	r.wantCode(t, 8)
	if !strings.Contains(r.stdout, procCategory+" "+hot+" "+procGroup+" PAUSED: 5") {
		t.Errorf("check does not name the paused partition PAUSED:\n%s", r.stdout)
	}

	r = cl.run("resume", procGroup, hot, "--yes")
	r.wantCode(t, 0)
	testenv.Eventually(t, 60*time.Second, "the paused key handled after resume", allHandled([]string{hot}, 5))
	h := handledSeqs(t, readFile(t, record))
	if !slices.Equal(h[hot], []int{1, 2, 3, 4, 5}) {
		t.Errorf("resumed key handled %v, want 1..5 once each in order", h[hot])
	}
	checkHandling(t, parseEvents(t, readFile(t, record)), keys, 5)
}

// Bad input and the plan's guards: an unknown subscription exits 4, no
// selector exits 2, a bad pattern exits 2, each changing nothing; pausing
// what is paused and resuming what is not are skipped items (exit 0); a
// plan whose entry changed before the apply exits 5 and changes nothing.
func TestPauseResumeGuards(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	store := redisstore.New(c)
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = srv.URL()
	if err := c.SAdd(ctx, procCategory+":__groups__", procGroup).Err(); err != nil {
		t.Fatal(err)
	}
	entries := func() pause.Set {
		set, err := store.ReadPauses(ctx, "", procGroup)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}

	cl.run("pause", "no-such-group", "k", "--yes").wantCode(t, 4)
	cl.run("pause", procGroup, "--yes").wantCode(t, 2)
	cl.run("pause", procGroup, "--match", "[", "--yes").wantCode(t, 2)
	if set := entries(); len(set) != 0 {
		t.Fatalf("bad input changed the pauses: %+v", set)
	}

	r := cl.run("resume", procGroup, "k", "--yes", "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"skipped"`) {
		t.Errorf("resume of a key not paused is not a skipped item:\n%s", r.stdout)
	}

	cl.run("pause", procGroup, "--match", "eu-*", "--all", "--yes").wantCode(t, 0)
	if set := entries(); len(set) != 2 || set[0].Selector != pause.All || set[1].Selector != pause.Glob("eu-*") {
		t.Fatalf("entries after pause: %+v", set)
	}
	r = cl.run("pause", procGroup, "--all", "--yes", "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"skipped"`) {
		t.Errorf("a second pause of the same selector is not a skipped item:\n%s", r.stdout)
	}

	// A stale plan: the entry changes between the dry run and the apply.
	dir := t.TempDir()
	r = cl.run("resume", procGroup, "--all", "--dry-run", "-o", "json")
	r.wantCode(t, 0)
	plan := filepath.Join(dir, "resume.json")
	if err := os.WriteFile(plan, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	cl.run("resume", procGroup, "--all", "--yes").wantCode(t, 0)
	cl.run("pause", procGroup, "--all", "--reason", "again", "--yes").wantCode(t, 0)
	cl.run("apply", "-f", plan, "--yes").wantCode(t, 5)
	if set := entries(); len(set) != 2 || set[0].Selector != pause.All || set[0].Reason != "again" {
		t.Fatalf("a stale resume changed the pauses: %+v", set)
	}
}

// A Kafka topic subscription's pauses (--service, --topic): entries in
// the topic's lease group scope, bad input exits 2 or 4 changing nothing,
// a stale plan exits 5, resume removes the entry.
func TestPauseKafkaSubscription(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	store := redisstore.New(c)
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = srv.URL()
	g := redisstore.TopicLeaseGroup("shop", "orders")
	if err := c.HSet(ctx, g.CheckpointsKey("ledger-sync"), "0", "5").Err(); err != nil {
		t.Fatal(err)
	}
	entries := func() pause.Set {
		set, err := store.ReadPauses(ctx, g.String(), "ledger-sync")
		if err != nil {
			t.Fatal(err)
		}
		return set
	}

	cl.run("pause", "no-such-sub", "o-1", "--service", "shop", "--topic", "orders", "--yes").wantCode(t, 4)
	cl.run("pause", "ledger-sync", "o-1", "--service", "shop", "--topic", "payments", "--yes").wantCode(t, 4)
	cl.run("pause", "ledger-sync", "o-1", "--topic", "orders", "--yes").wantCode(t, 2)
	cl.run("pause", "ledger-sync", "o-1", "--service", "shop", "--yes").wantCode(t, 2)
	cl.run("pause", "ledger-sync", "--service", "shop", "--topic", "orders", "--yes").wantCode(t, 2)
	if set := entries(); len(set) != 0 {
		t.Fatalf("bad input changed the pauses: %+v", set)
	}

	r := cl.run("pause", "ledger-sync", "o-1", "--service", "shop", "--topic", "orders", "--reason", "bad o-1", "--yes", "-o", "json")
	r.wantCode(t, 0)
	if set := entries(); len(set) != 1 || set[0].Selector != pause.Key("o-1") || set[0].Reason != "bad o-1" {
		t.Fatalf("entries after pause: %+v\n%s", set, r.stdout)
	}
	if !strings.Contains(r.stdout, `"topic": "orders"`) || !strings.Contains(r.stdout, `"service": "shop"`) {
		t.Errorf("the plan does not name the topic subscription:\n%s", r.stdout)
	}
	if set, err := store.ReadPauses(ctx, "", "ledger-sync"); err != nil || len(set) != 0 {
		t.Fatalf("the pause landed in the Redis scope: %+v %v", set, err)
	}

	// A stale plan: the entry changes between the dry run and the apply.
	r = cl.run("resume", "ledger-sync", "o-1", "--service", "shop", "--topic", "orders", "--dry-run", "-o", "json")
	r.wantCode(t, 0)
	plan := filepath.Join(t.TempDir(), "resume.json")
	if err := os.WriteFile(plan, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	cl.run("resume", "ledger-sync", "o-1", "--service", "shop", "--topic", "orders", "--yes").wantCode(t, 0)
	if set := entries(); len(set) != 0 {
		t.Fatalf("entries after resume: %+v", set)
	}
	cl.run("pause", "ledger-sync", "o-1", "--service", "shop", "--topic", "orders", "--reason", "again", "--yes").wantCode(t, 0)
	cl.run("apply", "-f", plan, "--yes").wantCode(t, 5)
	if set := entries(); len(set) != 1 || set[0].Reason != "again" {
		t.Fatalf("a stale resume changed the pauses: %+v", set)
	}
}
