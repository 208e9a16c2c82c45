//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// The acceptance tests of issue 20's online seeks: three `protctl run
// node` processes consume through an exec handler while an operator runs
// `partitions seek` / `topics seek --to <time>` with the CLI binary. The
// handler records every call (B and E lines, naming its node by pid and
// the unit of ordering by PROTCTL_KEY: the partition key on Redis, the
// record key on Kafka), so the test checks from outside what was handled
// again, in which order, and that no key was ever in two calls at once.

// seekRecordScript is recordScript keyed by PROTCTL_KEY.
const seekRecordScript = `#!/bin/sh
read -r envelope || true
seq=${envelope#*\"seq\":}
seq=${seq%%[!0-9]*}
echo "B $PPID $PROTCTL_KEY $seq $PROTCTL_POSITION $PROTCTL_GENERATION" >> "$RECORD"
echo "E $PPID $PROTCTL_KEY $seq $PROTCTL_POSITION $PROTCTL_GENERATION" >> "$RECORD"
`

// seekNodeYAML is a node config of the seek tests. The lease TTL is
// longer than the fault tests' so that a node slowed by a loaded machine
// does not lose a lease (a handover replays unacknowledged entries, which
// would blur "handled exactly once more").
func seekNodeYAML(redisURL, id, top, source, handler string) string {
	return fmt.Sprintf(`service: %s
node: %s
redis: {url: "%s"}
%s
admin: {listen: "127.0.0.1:0"}
lease: {ttl: 10s, renewEvery: 1s}
drain: {timeout: 10s}
subscriptions:
  - name: %s
    %s
    retry: {attempts: 5, backoff: 20ms}
    maxInFlight: 20
    handler:
%s`, procService, id, redisURL, top, procGroup, source, handler)
}

// maxRounds bounds the rounds published while a seek runs (a round every
// 20ms or so: a seek of 12 partitions takes seconds).
const maxRounds = 150

// seekRig is what both tests share: the nodes, the record, the binary.
type seekRig struct {
	t      *testing.T
	bin    string
	dir    string
	record string
	procs  []*nodeProc
	store  *redisstore.Store
}

func startSeekRig(t *testing.T, srv *testenv.Redis, c *redis.Client, top, source string) *seekRig {
	t.Helper()
	r := &seekRig{t: t, bin: buildProtctl(t), dir: t.TempDir(), store: redisstore.New(c)}
	script := filepath.Join(r.dir, "record.sh")
	if err := os.WriteFile(script, []byte(seekRecordScript), 0o755); err != nil {
		t.Fatal(err)
	}
	r.record = filepath.Join(r.dir, "record.txt")
	for i := range 3 {
		id := fmt.Sprintf("node-%d", i+1)
		cfg := filepath.Join(r.dir, id+".yaml")
		writeFile(t, cfg, seekNodeYAML(srv.URL(), id, top, source, execHandlerYAML(script, r.record, "")))
		r.procs = append(r.procs, startNodeProc(t, r.bin, id, cfg))
	}
	waitMembers(t, r.store, 3)
	return r
}

// events parses the record's complete lines. A line being appended may
// be seen in part (a read races the append when the line straddles a
// page: the file grows a page at a time), so a last line without its
// newline is left for the next read.
func (r *seekRig) events() []handlerEvent {
	r.t.Helper()
	text := readFile(r.t, r.record)
	return parseEvents(r.t, text[:strings.LastIndexByte(text, '\n')+1])
}

// ends returns, per key, the seqs of the finished calls in record order.
func (r *seekRig) ends() map[string][]int {
	out := map[string][]int{}
	for _, e := range r.events() {
		if e.kind == 'E' {
			out[e.key] = append(out[e.key], e.seq)
		}
	}
	return out
}

// waitHandled waits until every key has seen at least n calls end, the
// last of them of seq last.
func (r *seekRig) waitHandled(what string, keys []string, n, last int) {
	r.t.Helper()
	testenv.Eventually(r.t, 3*time.Minute, what, func() (bool, string) {
		ends := r.ends()
		for _, k := range keys {
			e := ends[k]
			if len(e) < n || e[len(e)-1] != last {
				return false, fmt.Sprintf("key %s: %d calls ended (%v), want %d ending with seq %d", k, len(e), e, n, last)
			}
		}
		return true, ""
	})
}

// operatorCmd is a protctl command an operator runs.
type operatorCmd struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
	started        time.Time
}

// operator starts the protctl binary as an operator would (no config
// file, no PROTCTL_* of the host); wait for it with finish.
func (r *seekRig) operator(args ...string) *operatorCmd {
	r.t.Helper()
	home := r.t.TempDir()
	o := &operatorCmd{cmd: exec.Command(r.bin, args...), done: make(chan struct{}), started: time.Now()}
	o.cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + home, "PATH=" + os.Getenv("PATH"), "USER=operator"}
	o.cmd.Stdout, o.cmd.Stderr = &o.stdout, &o.stderr
	if err := o.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() { _ = o.cmd.Wait(); close(o.done) }()
	r.t.Cleanup(func() { _ = o.cmd.Process.Kill(); <-o.done })
	return o
}

// exited reports whether the command has ended.
func (o *operatorCmd) exited() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// finish waits for the command and returns its plan (its -o json
// document); it fails the test unless it exited 0.
func (r *seekRig) finish(o *operatorCmd) *repair.Plan {
	r.t.Helper()
	p, code := r.wait(o)
	if code != 0 {
		r.t.Errorf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, o.stdout.String(), o.stderr.String())
	}
	return p
}

// wait waits for o and returns the plan it printed and its exit code.
func (r *seekRig) wait(o *operatorCmd) (*repair.Plan, int) {
	r.t.Helper()
	select {
	case <-o.done:
	case <-time.After(5 * time.Minute):
		r.t.Fatalf("%s still running after 5 minutes", strings.Join(o.cmd.Args[1:], " "))
	}
	code := o.cmd.ProcessState.ExitCode()
	var p repair.Plan
	if err := json.Unmarshal(o.stdout.Bytes(), &p); err != nil {
		r.t.Fatalf("%s: exit %d, output not a plan: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(o.cmd.Args[1:], " "), code, err, o.stdout.String(), o.stderr.String())
	}
	r.t.Logf("%s: exit %d after %s", strings.Join(o.cmd.Args[1:], " "), code, time.Since(o.started).Round(time.Millisecond))
	for _, it := range p.Items {
		r.t.Logf("  %s%s: %s", it.Target.Key, it.Target.Partition, it.Detail)
	}
	return &p, code
}

// finishRetrying is finish for a seek some of whose items a lease change
// since the plan made stale: a node that lost a lease under the load of a
// full test run and took it again (a new generation). The apply refuses
// those items as conflicts and exits 7, as it must; an operator seeks
// them again, and so does the test, up to five times: again runs the seek for the
// conflicting items, whose results replace theirs in the plan returned.
func (r *seekRig) finishRetrying(o *operatorCmd, again func(conflicts []*repair.Item) *operatorCmd) *repair.Plan {
	r.t.Helper()
	p, code := r.wait(o)
	// A conflict is a partition whose lease came or went between the plan
	// and its apply: the nodes keep taking partitions up and releasing
	// them while events arrive, and a retry's plan can meet the same
	// (the last events published before the first seek returned wake
	// partitions the retry found idle). An operator retries the conflicts
	// until none is left; so does the test, a few times.
	for attempt := 0; code == clierr.ExitPartial && attempt < 5; attempt++ {
		var conflicts []*repair.Item
		only := true
		for i := range p.Items {
			switch p.Items[i].Result {
			case repair.ResultConflict:
				conflicts = append(conflicts, &p.Items[i])
			case repair.ResultApplied:
			default:
				only = false
			}
		}
		if !only || len(conflicts) == 0 {
			break
		}
		next := again(conflicts)
		p2, c2 := r.wait(next)
		if c2 != 0 && c2 != clierr.ExitPartial {
			r.t.Errorf("retry of the conflicts: exit %d, want 0 or %d\nstdout:\n%s\nstderr:\n%s", c2, clierr.ExitPartial, next.stdout.String(), next.stderr.String())
			return p
		}
		for _, it := range p2.Items {
			for _, c := range conflicts {
				if c.Target.Key == it.Target.Key && c.Target.Partition == it.Target.Partition {
					*c = it
				}
			}
		}
		code = 0
		for _, it := range p.Items {
			if it.Result != repair.ResultApplied {
				code = clierr.ExitPartial
			}
		}
		o = next
	}
	if code != 0 {
		r.t.Errorf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, o.stdout.String(), o.stderr.String())
	}
	return p
}

// checkAlive checks every node kept running through the seek: same
// process, its admin endpoint answering /v1/status as itself, and every
// handler call made by one of the three (a restarted node would show up
// under another pid).
func (r *seekRig) checkAlive() {
	r.t.Helper()
	pids := map[string]bool{}
	for _, p := range r.procs {
		pids[strconv.Itoa(p.pid())] = true
		select {
		case <-p.done:
			r.t.Errorf("%s (pid %d) stopped: %v", p.id, p.pid(), p.err)
			continue
		default:
		}
		st, ok := nodeStatus(r.store, p.id)
		if !ok || st.AdminAddr == "" {
			r.t.Errorf("%s is not live in the membership (admin %q)", p.id, st.AdminAddr)
			continue
		}
		code, body := httpGet(r.t, "http://"+st.AdminAddr+"/v1/status")
		var got struct {
			Node string `json:"node"`
		}
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil || got.Node != p.id {
			r.t.Errorf("%s: /v1/status %d %v: %.300s", p.id, code, err, body)
		}
	}
	for _, e := range r.events() {
		if !pids[e.node] {
			r.t.Errorf("a call by pid %s, none of the three nodes %v: a node was restarted", e.node, pids)
			break
		}
	}
}

// checkReplay checks the record against the acceptance: per key, the
// calls are the first pass 1..a and then, after the seek, once more
// everything from first (the first seq after T) to last, in order; a is
// at least handledAtSeek (everything up to it was handled before the
// seek began). So every event before T was handled exactly once, every
// event after T and handled before the seek exactly twice, the later
// ones once or twice, and per key in order. No key is ever in two calls
// at once, on any node.
func (r *seekRig) checkReplay(keys []string, first, handledAtSeek, last int) {
	r.t.Helper()
	events := r.events()
	open := map[string]int{}
	began := map[string][]int{}
	for i, e := range events {
		switch e.kind {
		case 'B':
			if open[e.key] > 0 {
				r.t.Errorf("line %d: pid %s began key %s seq %d while a call of the key was running", i+1, e.node, e.key, e.seq)
			}
			open[e.key]++
			began[e.key] = append(began[e.key], e.seq)
		case 'E':
			open[e.key]--
		}
	}
	seqs := func(from, to int) []int {
		var s []int
		for i := from; i <= to; i++ {
			s = append(s, i)
		}
		return s
	}
	replayed := 0
	for _, k := range keys {
		got := began[k]
		a := len(got) - (last - first + 1)
		if a < handledAtSeek || a > last || !slices.Equal(got[:a], seqs(1, a)) || !slices.Equal(got[a:], seqs(first, last)) {
			r.t.Errorf("key %s: calls %v; want 1..a (a >= %d) then %d..%d once more", k, got, handledAtSeek, first, last)
			continue
		}
		replayed += len(got) - a
	}
	r.t.Logf("%d keys: %d calls, %d of them replays of events after T", len(keys), len(events)/2, replayed)
}

// Acceptance (issue 20): three `run node` processes consume a
// Protean-layout category through an exec handler; `partitions seek --to
// T` while they run (and while events keep coming): every event after T
// is handled once more, per key in order, nothing before T again, never
// two calls of a key at once, and the nodes never stopped.
func TestSeekProcessRedis(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	rig := startSeekRig(t, srv, c, "", fmt.Sprintf(`redis: {categories: ["%s"]}`, procCategory))

	keys := keyNames(12)
	fx := testenv.Protean(t, c).Category(procCategory)
	seq := 0
	// publishRound appends the next seq to every key as Protean does:
	// SADD C:__partitions__ K, then XADD C:K * data <envelope>.
	publishRound := func() {
		seq++
		for _, k := range keys {
			env := fmt.Sprintf(`{"data":{"key":"%s","seq":%d},"metadata":{"headers":{"id":"evt-%s-%d","type":"shop.OrderChanged.v1","time":"%s","stream":"%s-%s"},"domain":{"fqn":"shop.OrderChanged","kind":"EVENT","sequence_id":"%d"}}}`,
				k, seq, k, seq, time.Now().UTC().Format(time.RFC3339Nano), procCategory, k, seq)
			fx.Partition(k).RawEntry(env)
		}
	}
	const batch = 5
	lastID := func(k string) broker.StreamID {
		t.Helper()
		m, err := c.XRevRangeN(ctx, broker.ProteanLayout.Stream(procCategory, k), "+", "-", 1).Result()
		if err != nil || len(m) != 1 {
			t.Fatalf("last entry of %s: %v %v", k, m, err)
		}
		id, err := broker.ParseStreamID(m[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}

	// Batch 1 (seq 1-5), handled; T is the millisecond after its newest
	// entry, and batch 2 is written once Redis' clock is past T, so its
	// ids (milliseconds) are all at or after T.
	for range batch {
		publishRound()
	}
	rig.waitHandled("batch 1 handled", keys, batch, batch)
	var newest uint64
	for _, k := range keys {
		newest = max(newest, lastID(k).Ms)
	}
	at := time.UnixMilli(int64(newest) + 1)
	testenv.Eventually(t, 10*time.Second, "Redis' clock past T", func() (bool, string) {
		now, err := c.Time(ctx).Result()
		time.Sleep(2 * time.Millisecond) // separates the millisecond timestamps, not a wait for state
		return err == nil && now.UnixMilli() > at.UnixMilli(), fmt.Sprintf("redis time %s, T %s", now, at)
	})
	for range batch {
		publishRound()
	}
	rig.waitHandled("batch 2 handled", keys, 2*batch, 2*batch)
	for _, k := range keys {
		m, err := c.XRangeN(ctx, broker.ProteanLayout.Stream(procCategory, k), "-", "+", batch+1).Result()
		if err != nil || len(m) != batch+1 {
			t.Fatalf("entries of %s: %v %v", k, m, err)
		}
		before, _ := broker.ParseStreamID(m[batch-1].ID)
		after, _ := broker.ParseStreamID(m[batch].ID)
		if int64(before.Ms) >= at.UnixMilli() || int64(after.Ms) < at.UnixMilli() {
			t.Fatalf("%s: batch 1 ends at %s and batch 2 starts at %s: T %d does not lie between", k, m[batch-1].ID, m[batch].ID, at.UnixMilli())
		}
	}

	// The operator seeks back to T while the nodes run, and events keep
	// coming (batch 3, a round every 20ms until the seek returns). The
	// seek's waits are the defaults (--wait 30s per partition).
	to := at.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	op := rig.operator("partitions", "seek", procCategory, "--group", procGroup, "--to", to,
		"--yes", "-o", "json", "--redis", srv.URL())
	rounds := 0
	for rounds < 3 || (!op.exited() && rounds < maxRounds) {
		publishRound()
		rounds++
		time.Sleep(20 * time.Millisecond) // paces the publisher
	}
	plan := rig.finishRetrying(op, func(conflicts []*repair.Item) *operatorCmd {
		args := []string{"partitions", "seek", procCategory}
		for _, it := range conflicts {
			args = append(args, it.Target.Key)
		}
		return rig.operator(append(args, "--group", procGroup, "--to", to, "--yes", "-o", "json", "--redis", srv.URL())...)
	})
	t.Logf("%d rounds (batch 3) published while the seek ran", rounds)
	if len(plan.Items) != len(keys) {
		t.Fatalf("%d items, want one per key (%d):\n%s", len(plan.Items), len(keys), op.stdout.String())
	}
	owners := map[string]int{}
	for _, it := range plan.Items {
		s := it.Precondition.Seek
		if !it.Allowed || it.Result != repair.ResultApplied || s == nil || s.DoneAt == nil || s.DoneGeneration == nil {
			t.Errorf("%s: not applied: %+v", it.Target.Key, it)
			continue
		}
		owners[s.Owner]++
		main := s.Lanes[0]
		if main.Lane != "main" || main.Rehandle < batch {
			t.Errorf("%s: main lane %+v, want at least batch 2 (%d) handled again", it.Target.Key, main, batch)
		}
		// A node carried it out under the lease the plan saw: it did
		// not stop, nor lose the partition.
		if s.Owner == repair.SeekOwnerProtctl && (it.Precondition.Generation == nil || *s.DoneGeneration != *it.Precondition.Generation) {
			t.Errorf("%s: done under generation %d, the plan saw lease %v", it.Target.Key, *s.DoneGeneration, it.Precondition.Lease)
		}
	}
	t.Logf("seek items by owner at the plan: %v", owners)

	// Every key's group has delivered and acknowledged everything: the
	// record is complete.
	last := seq
	rig.waitHandled("everything after T handled once more", keys, last+batch, last)
	testenv.Eventually(t, 2*time.Minute, "every entry delivered and acknowledged", func() (bool, string) {
		for _, k := range keys {
			groups, err := c.XInfoGroups(ctx, broker.ProteanLayout.Stream(procCategory, k)).Result()
			if err != nil || len(groups) != 1 || groups[0].Pending != 0 || groups[0].LastDeliveredID != lastID(k).String() {
				return false, fmt.Sprintf("%s: %+v %v", k, groups, err)
			}
		}
		return true, ""
	})
	rig.checkReplay(keys, batch+1, 2*batch, last)
	rig.checkAlive()
}

// Acceptance (issue 20): the same with `topics seek --to T` on a
// 12-partition topic, the subscription's dedup on (as it always is: the
// replayed records carry the identities the nodes handled and remember,
// and must be handled again, not dropped as duplicates).
func TestSeekProcessKafka(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	const topic, parts = "orders", 12
	k := testenv.StartKafka(t, parts, topic)
	kc := k.Client(t)
	rig := startSeekRig(t, srv, c, fmt.Sprintf(`kafka: {brokers: ["%s"]}`, k.Brokers[0]), fmt.Sprintf(`kafka: {topic: %s}`, topic))

	keys := keyNames(2 * parts) // two aggregates per partition
	seq := 0
	// Batch 1 is an hour old, batches 2 and 3 are now: T, half an hour
	// ago, lies between.
	stamp := time.Now().Add(-time.Hour)
	at := time.Now().Add(-30 * time.Minute)
	produceRound := func() {
		seq++
		var recs []*kgo.Record
		for i, key := range keys {
			id := fmt.Sprintf("evt-%s-%d", key, seq)
			v := fmt.Sprintf(`{"data":{"key":"%s","seq":%d},"metadata":{"headers":{"id":"%s","type":"shop.OrderChanged.v1"}}}`, key, seq, id)
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % parts), Key: []byte(key), Value: []byte(v),
				Timestamp: stamp, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}})
		}
		k.Produce(t, kc, recs...)
	}
	const batch = 4
	for range batch {
		produceRound()
	}
	rig.waitHandled("batch 1 handled", keys, batch, batch)
	stamp = time.Now()
	for range batch {
		produceRound()
	}
	rig.waitHandled("batch 2 handled", keys, 2*batch, 2*batch)
	g := redisstore.TopicLeaseGroup(procService, topic)
	// checkpointed waits until every partition's checkpoint is next (the
	// plan counts what is handled again from the saved checkpoint).
	checkpointed := func(what string, next int) {
		t.Helper()
		testenv.Eventually(t, 2*time.Minute, what, func() (bool, string) {
			m, err := c.HGetAll(ctx, g.CheckpointsKey(procGroup)).Result()
			want := strconv.Itoa(next)
			for p := range parts {
				if err != nil || m[strconv.Itoa(p)] != want {
					return false, fmt.Sprintf("checkpoints %v (want %s each), %v", m, want, err)
				}
			}
			return true, ""
		})
	}
	checkpointed("batch 2 checkpointed", 2*2*batch)

	// Seek back to T while records keep coming, with the default wait
	// for each held partition's owner (--timeout 10s).
	to := at.UTC().Format(time.RFC3339Nano)
	op := rig.operator("topics", "seek", topic, "--service", procService, "--subscription", procGroup, "--to", to,
		"--yes", "-o", "json", "--redis", srv.URL(), "--kafka", k.Brokers[0])
	rounds := 0
	for rounds < 3 || (!op.exited() && rounds < maxRounds) {
		stamp = time.Now()
		produceRound()
		rounds++
		time.Sleep(20 * time.Millisecond) // paces the producer
	}
	plan := rig.finishRetrying(op, func(conflicts []*repair.Item) *operatorCmd {
		args := []string{"topics", "seek", topic, "--service", procService, "--subscription", procGroup, "--to", to}
		for _, it := range conflicts {
			args = append(args, "--partition", it.Target.Partition)
		}
		return rig.operator(append(args, "--yes", "-o", "json", "--redis", srv.URL(), "--kafka", k.Brokers[0])...)
	})
	t.Logf("%d rounds (batch 3) produced while the seek ran", rounds)
	if len(plan.Items) != parts {
		t.Fatalf("%d items, want one per partition (%d):\n%s", len(plan.Items), parts, op.stdout.String())
	}
	held := 0
	for _, it := range plan.Items {
		s := it.Precondition.TopicSeek
		p, _ := strconv.Atoi(it.Target.Partition)
		if !it.Allowed || it.Result != repair.ResultApplied || s == nil {
			t.Errorf("partition %s: not applied: %+v", it.Target.Partition, it)
			continue
		}
		// Two aggregates per partition, batch 1 before T: the first
		// offset at or after T is 2*batch.
		if it.Params.SeekTo != strconv.Itoa(2*batch) || s.HandledAgain < 2*batch {
			t.Errorf("partition %d: seekTo %s, %d handled again; want %d and at least %d", p, it.Params.SeekTo, s.HandledAgain, 2*batch, 2*batch)
		}
		if it.Precondition.Lease != nil {
			held++
		}
	}
	t.Logf("%d of %d partitions held by a node at the plan", held, parts)

	last := seq
	rig.waitHandled("everything after T handled once more", keys, last+batch, last)
	checkpointed("every record done and checkpointed", 2*last)
	rig.checkReplay(keys, batch+1, 2*batch, last)
	rig.checkAlive()
}
