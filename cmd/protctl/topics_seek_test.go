package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// seekT0 is the timestamp of the first record of seekCLI's topic.
var seekT0 = time.Date(2026, 1, 2, 14, 0, 0, 0, time.UTC)

// seekCLI lays down service "shop", topic "orders" (2 partitions),
// subscription "ledger":
//
//	p0: 4 records at seekT0 + 0..3 minutes, lease node-a:7 held, checkpoint 1
//	p1: 2 records at seekT0 + 0..1 minutes, free (generation 3), checkpoint 2
func topicSeekCLI(t *testing.T) (*cli, redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	k := testenv.StartKafka(t, 2, "orders")
	kc := k.Client(t)
	var recs []*kgo.Record
	for i := range 4 {
		recs = append(recs, &kgo.Record{Topic: "orders", Partition: 0, Value: []byte("x"), Timestamp: seekT0.Add(time.Duration(i) * time.Minute)})
	}
	for i := range 2 {
		recs = append(recs, &kgo.Record{Topic: "orders", Partition: 1, Value: []byte("y"), Timestamp: seekT0.Add(time.Duration(i) * time.Minute)})
	}
	k.Produce(t, kc, recs...)
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	store := redisstore.New(c)
	g := redisstore.TopicLeaseGroup("shop", "orders")
	save := func(p int32, token string, next int64) {
		t.Helper()
		f := broker.Fence{LeaseKey: g.LeaseKey(p), Token: token}
		if err := c.Set(ctx, f.LeaseKey, token, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := store.Save(ctx, f, g.String(), "ledger", p, next); err != nil {
			t.Fatal(err)
		}
	}
	save(0, "node-a:7", 1)
	c.Set(ctx, g.GenerationKey(0), "7", 0)
	save(1, "node-b:3", 2)
	c.Del(ctx, g.LeaseKey(1))
	c.Set(ctx, g.GenerationKey(1), "3", 0)
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = srv.URL()
	cl.env["PROTCTL_KAFKA"] = strings.Join(k.Brokers, ",")
	return cl, c
}

func seekArgs(extra ...string) []string {
	return append([]string{"topics", "seek", "orders", "--service", "shop", "--subscription", "ledger"}, extra...)
}

func checkpoints(t *testing.T, c redis.UniversalClient) map[string]string {
	t.Helper()
	m, err := c.HGetAll(context.Background(), redisstore.TopicLeaseGroup("shop", "orders").CheckpointsKey("ledger")).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func wantCheckpoints(t *testing.T, c redis.UniversalClient, p0, p1 string) {
	t.Helper()
	if m := checkpoints(t, c); m["0"] != p0 || m["1"] != p1 {
		t.Fatalf("checkpoints %v, want 0:%s 1:%s", m, p0, p1)
	}
}

func seekPlan(t *testing.T, out string) repair.Plan {
	t.Helper()
	var p repair.Plan
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return p
}

// TestTopicsSeekPlan: the dry run's document per partition: lease and
// checkpoint seen, the new checkpoint, records handled again; nothing
// changes.
func TestTopicsSeekPlan(t *testing.T) {
	cl, c := topicSeekCLI(t)
	r := cl.run(seekArgs("--to", "0", "--dry-run", "-o", "json")...)
	r.wantCode(t, 0)
	p := seekPlan(t, r.stdout)
	if len(p.Items) != 2 {
		t.Fatalf("items %+v", p.Items)
	}
	p0, p1 := p.Items[0], p.Items[1]
	if p0.Action != repair.ActionTopicSeek || p0.Target.Partition != "0" || p0.Target.Topic != "orders" || p0.Target.Service != "shop" ||
		p0.Precondition.Lease == nil || *p0.Precondition.Lease != "node-a:7" || p0.Params.SeekTo != "0" ||
		p0.Precondition.TopicSeek == nil || *p0.Precondition.TopicSeek.Checkpoint != "1" || p0.Precondition.TopicSeek.HandledAgain != 1 ||
		p0.Precondition.TopicSeek.Head != "4" || !p0.Allowed {
		t.Errorf("p0 item %+v", p0)
	}
	if p1.Precondition.Lease != nil || *p1.Precondition.TopicSeek.Checkpoint != "2" || p1.Precondition.TopicSeek.HandledAgain != 2 || !p1.Allowed ||
		!strings.Contains(p1.Reason, "rewind 2 -> 0: 2 records handled again") {
		t.Errorf("p1 item %+v", p1)
	}
	for _, field := range []string{`"seekTo":"0"`, `"handledAgain":2`, `"skipped":0`, `"checkpoint":"2"`, `"earliest":"0"`, `"head":"2"`} {
		if !strings.Contains(strings.ReplaceAll(r.stdout, `": `, `":`), field) {
			t.Errorf("JSON lacks %s", field)
		}
	}
	wantCheckpoints(t, c, "1", "2")
	// Without --yes and no terminal: refused, nothing changed.
	cl.run(seekArgs("--to", "0", "--partition", "1")...).wantCode(t, 6)
	wantCheckpoints(t, c, "1", "2")
}

// TestTopicsSeekUnowned: a free partition is set at once, backwards,
// and its generation bumped; a forward seek says what it skips.
func TestTopicsSeekUnowned(t *testing.T) {
	cl, c := topicSeekCLI(t)
	r := cl.run(seekArgs("--to", "earliest", "--partition", "1", "--yes", "-o", "json")...)
	r.wantCode(t, 0)
	if p := seekPlan(t, r.stdout); p.Items[0].Result != repair.ResultApplied || !strings.Contains(p.Items[0].Detail, "2 -> 0") {
		t.Fatalf("item %+v", p.Items[0])
	}
	wantCheckpoints(t, c, "1", "0")
	g := redisstore.TopicLeaseGroup("shop", "orders")
	if gen, _ := c.Get(context.Background(), g.GenerationKey(1)).Result(); gen != "4" {
		t.Fatalf("generation %q, want 4 (bumped)", gen)
	}
	r = cl.run(seekArgs("--shift", "1", "--partition", "1", "--yes", "-o", "json")...)
	r.wantCode(t, 0)
	if it := seekPlan(t, r.stdout).Items[0]; it.Precondition.TopicSeek.Skipped != 1 || it.Result != repair.ResultApplied {
		t.Fatalf("item %+v", it)
	}
	wantCheckpoints(t, c, "1", "1")
	// Already there: nothing to do.
	r = cl.run(seekArgs("--to", "1", "--partition", "1", "--yes", "-o", "json")...)
	r.wantCode(t, 0)
	if it := seekPlan(t, r.stdout).Items[0]; it.Result != repair.ResultSkipped {
		t.Fatalf("item %+v", it)
	}
}

// TestTopicsSeekStalePlan: a plan applied after the partition was taken,
// or after its checkpoint moved, is a conflict (exit 5) and changes
// nothing.
func TestTopicsSeekStalePlan(t *testing.T) {
	cl, c := topicSeekCLI(t)
	dir := t.TempDir()
	r := cl.run(seekArgs("--to", "0", "--partition", "1", "--dry-run", "-o", "json")...)
	r.wantCode(t, 0)
	plan := filepath.Join(dir, "seek.json")
	writeFile(t, plan, r.stdout)

	g := redisstore.TopicLeaseGroup("shop", "orders")
	ctx := context.Background()
	c.Set(ctx, g.LeaseKey(1), "node-c:4", time.Minute)
	r = cl.run("apply", "-f", plan, "--yes")
	r.wantCode(t, 5)
	if !strings.Contains(r.stdout+r.stderr, "node-c:4") {
		t.Errorf("the conflict does not name the lease now:\n%s%s", r.stdout, r.stderr)
	}
	wantCheckpoints(t, c, "1", "2")

	c.Del(ctx, g.LeaseKey(1))
	c.HSet(ctx, g.CheckpointsKey("ledger"), "1", "1")
	r = cl.run("apply", "-f", plan, "--yes")
	r.wantCode(t, 5)
	wantCheckpoints(t, c, "1", "1")

	// A held partition whose lease changed: the request is refused.
	r = cl.run(seekArgs("--to", "0", "--partition", "0", "--dry-run", "-o", "json")...)
	r.wantCode(t, 0)
	writeFile(t, plan, r.stdout)
	c.Set(ctx, g.LeaseKey(0), "node-a:8", time.Minute)
	cl.run("apply", "-f", plan, "--yes").wantCode(t, 5)
	if n, _ := c.HLen(ctx, g.SeeksKey("ledger")).Result(); n != 0 {
		t.Fatalf("%d seek requests recorded for a stale plan", n)
	}
}

// TestTopicsSeekByTime: --to a time is the first record at or after it;
// before the first record, the earliest; after the last, the head.
func TestTopicsSeekByTime(t *testing.T) {
	cl, _ := topicSeekCLI(t)
	for _, c := range []struct{ at, want string }{
		{seekT0.Add(90 * time.Second).Format(time.RFC3339), "2"},
		{seekT0.Add(2 * time.Minute).Format(time.RFC3339), "2"},
		{seekT0.Add(-time.Hour).Format(time.RFC3339), "0"},
		{seekT0.Add(time.Hour).Format(time.RFC3339), "4"},
	} {
		r := cl.run(seekArgs("--to", c.at, "--partition", "0", "--dry-run", "-o", "json")...)
		r.wantCode(t, 0)
		if got := seekPlan(t, r.stdout).Items[0].Params.SeekTo; got != c.want {
			t.Errorf("--to %s: seekTo %s, want %s", c.at, got, c.want)
		}
	}
}

// TestTopicsSeekBadInput: clear errors, documented exit codes, nothing
// changed.
func TestTopicsSeekBadInput(t *testing.T) {
	cl, c := topicSeekCLI(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"topics", "seek", "orders", "--service", "shop", "--subscription", "ledgr", "--to", "0"}, 4, `"ledgr"`},
		{seekArgs("--to", "yesterday"), 2, "--to"},
		{seekArgs("--to", "-3"), 2, "--to"},
		{seekArgs("--to", "99", "--partition", "1"), 2, "partition 1"},
		{seekArgs(), 2, "--to, --shift or --from-file"},
		{seekArgs("--to", "0", "--shift", "1"), 2, "exclude"},
		{seekArgs("--to", "0", "--partition", "9"), 4, ""},
		{seekArgs("--from-file", "/nonexistent/positions.csv"), 2, "--from-file"},
	} {
		r := cl.run(append(tc.args, "--yes")...)
		r.wantCode(t, tc.code)
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: stderr lacks %q:\n%s", tc.args, tc.want, r.stderr)
		}
	}
	// --shift is clamped, and says so.
	r := cl.run(seekArgs("--shift", "-10", "--partition", "1", "--dry-run", "-o", "json")...)
	r.wantCode(t, 0)
	if it := seekPlan(t, r.stdout).Items[0]; it.Params.SeekTo != "0" || !strings.Contains(it.Reason, "clamped to the earliest offset 0") {
		t.Errorf("item %+v", it)
	}
	wantCheckpoints(t, c, "1", "2")
}

// TestTopicsSeekExportFromFile: --export writes the positions, a seek
// moves them, --from-file restores them (the held partition by a request
// for its owner, which the apply waits for up to --timeout).
func TestTopicsSeekExportFromFile(t *testing.T) {
	cl, c := topicSeekCLI(t)
	file := filepath.Join(t.TempDir(), "positions.csv")
	cl.run(seekArgs("--export", file)...).wantCode(t, 0)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := "topic,partition,offset\norders,0,1\norders,1,2\n"; string(data) != want {
		t.Fatalf("export %q, want %q", data, want)
	}
	cl.run(seekArgs("--to", "latest", "--partition", "1", "--yes")...).wantCode(t, 0)
	wantCheckpoints(t, c, "1", "2")
	cl.run(seekArgs("--to", "0", "--partition", "1", "--yes")...).wantCode(t, 0)
	wantCheckpoints(t, c, "1", "0")

	r := cl.run(seekArgs("--from-file", file, "--yes", "-o", "json", "--timeout", "300ms")...)
	r.wantCode(t, 0)
	p := seekPlan(t, r.stdout)
	if p.Items[0].Result != repair.ResultSkipped || p.Items[1].Result != repair.ResultApplied {
		t.Fatalf("items %+v", p.Items)
	}
	wantCheckpoints(t, c, "1", "2")

	// A file of another topic, or malformed: exit 2.
	writeFile(t, file, "payments,0,1\n")
	cl.run(seekArgs("--from-file", file, "--yes")...).wantCode(t, 2)
	writeFile(t, file, "orders,0\n")
	cl.run(seekArgs("--from-file", file, "--yes")...).wantCode(t, 2)

	// The held partition: a request its owner carries out; with no owner
	// running, the apply withdraws it after --timeout and exits 5:
	// nothing changed, no request left for the owner to carry out later.
	writeFile(t, file, "orders,0,0\n")
	r = cl.run(seekArgs("--from-file", file, "--yes", "-o", "json", "--timeout", "300ms")...)
	r.wantCode(t, 5)
	if it := seekPlan(t, r.stdout).Items[0]; it.Result != repair.ResultConflict || !strings.Contains(it.Detail, "did not carry the seek out within 300ms") ||
		!strings.Contains(it.Detail, "withdrawn, nothing changed") {
		t.Fatalf("item %+v", it)
	}
	g := redisstore.TopicLeaseGroup("shop", "orders")
	if n, _ := c.HLen(context.Background(), g.SeeksKey("ledger")).Result(); n != 0 {
		t.Fatalf("%d requests left behind", n)
	}
	wantCheckpoints(t, c, "1", "2")
}
