package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/acl"
	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// deadLetterOf reads a dead-letter stream entry as protctl does.
func deadLetterOf(m redis.XMessage) broker.DeadLetter {
	fields := make(map[string]string, len(m.Values))
	for k, v := range m.Values {
		fields[k] = fmt.Sprint(v)
	}
	return broker.ParseDeadLetter(fields)
}

// jsonEqual reports whether a and b are the same JSON value (member order
// and blanks aside).
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// dlqDoc is the part of dlq ls -o json the tests read.
type dlqDoc struct {
	Kind  string       `json:"kind"`
	Items []dlqItemDoc `json:"items"`
}

// dlqItemDoc is a dead letter as dlq ls and dlq show print it.
type dlqItemDoc = dlqDetail

func (e *opsEnv) dlqList(args ...string) []dlqItemDoc {
	e.t.Helper()
	r := e.run(append([]string{"dlq", "ls", e.s.Orders, "-o", "json"}, args...)...)
	r.wantCode(e.t, 0)
	var d dlqDoc
	decode(e.t, r.stdout, &d)
	if d.Kind != "DeadLetterList" {
		e.t.Fatalf("kind %q", d.Kind)
	}
	return d.Items
}

func itemIDs(items []dlqItemDoc) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return ids
}

// skipHead dead-letters the halted partition's head with protctl's own
// command, as an operator unsticks a Protean partition.
func (e *opsEnv) skipHead(reason string) string {
	e.t.Helper()
	e.run("partitions", "skip-head", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--reason", reason, "--yes").wantCode(e.t, 0)
	dlq := e.c.XRange(context.Background(), broker.ProteanLayout.DLQStream(e.s.Orders, e.s.Halted), "-", "+").Val()
	if len(dlq) == 0 {
		e.t.Fatal("skip-head wrote no dead letter")
	}
	return dlq[len(dlq)-1].ID
}

// deadLetterNew appends n entries to key and dead-letters them through the
// broker (the format skip-head and a node's skip write), returning the
// dead letters' ids and the originals' data.
func deadLetterNew(t *testing.T, c redis.UniversalClient, category, key, group string, n int) (ids, datas []string) {
	t.Helper()
	ctx := context.Background()
	l := broker.ProteanLayout
	b := redisbroker.New(c)
	for i := 0; i < n; i++ {
		d := fmt.Sprintf(`{"data":{"key":%q,"seq":%d},"metadata":{"headers":{"type":"test.Failed"}}}`, key, 1000+i)
		if _, err := b.PublishPartitioned(ctx, category, key, "", []byte(d)); err != nil {
			t.Fatal(err)
		}
		datas = append(datas, d)
	}
	lease, ok, err := b.AcquirePartitionLease(ctx, l.LeaseKey(group, key), l.GenerationKey(group, key), "failing-node", time.Minute)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	defer b.ReleasePartitionLease(ctx, lease.Fence) //nolint:errcheck // the test's own lease
	msgs, err := b.ReadPartitionFenced(ctx, lease.Fence, l.Stream(category, key), group, int64(n), broker.ReadNew)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		id, err := b.DeadLetterPartitionFenced(ctx, lease.Fence, m.Stream, group, m.ID, l.DLQStream(category, key), "handler: amount must be positive")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids, datas
}

// Acceptance: dlq ls and show read skip-head's dead letters (Protean's
// format), Protean's own in the category's C:dlq, and those protctl wrote
// before; and skip-head's is what Protean's tooling reads: the group,
// consumer, reason and retry count inside the data envelope.
func TestDLQListAndShowReadEveryFormat(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	ctx := context.Background()
	head := e.c.XRange(ctx, broker.ProteanLayout.Stream(s.Orders, s.Halted), s.HaltedIDs[0], s.HaltedIDs[0]).Val()[0]
	skipped := e.skipHead("poison: amount must be positive")
	f := testenv.Protean(t, e.c).Category(s.Orders)
	// Dead-letter ids are unique per stream only: these two get ids of
	// their own, apart from skip-head's (the server's clock).
	protean := f.DeadLetter(testenv.ProteanDeadLetter{ID: "1700000000002-0", OriginalID: "1700000000000-0", Group: s.Projector, Consumer: "OrderProjector-host-42-a1b2c3", RetryCount: 3})
	old := f.Partition(s.Cold).OldDeadLetter("1700000000003-0", `{"data":{"n":1}}`, "1700000000001-0", s.Projector, "dead-lettered by an operator with protctl")

	// What Protean's `protean dlq` reads: a JSON object in data with
	// _dlq_metadata's fields, of Protean's types, inside it.
	raw := e.c.XRange(ctx, broker.ProteanLayout.DLQStream(s.Orders, s.Halted), skipped, skipped).Val()[0]
	if len(raw.Values) != 1 {
		t.Fatalf("skip-head's dead letter has fields %v, want data alone", raw.Values)
	}
	var env struct {
		Meta map[string]any `json:"_dlq_metadata"`
	}
	if err := json.Unmarshal([]byte(raw.Values["data"].(string)), &env); err != nil {
		t.Fatal(err)
	}
	m := env.Meta
	if m["original_stream"] != broker.ProteanLayout.Stream(s.Orders, s.Halted) || m["original_id"] != s.HaltedIDs[0] ||
		m["consumer_group"] != s.Projector || m["consumer"] != s.HaltedToken || m["retry_count"] != float64(s.PoisonDeliveries) ||
		m["failure_reason"] != "poison: amount must be positive" {
		t.Fatalf("_dlq_metadata %v", m)
	}
	if at, _ := m["failed_at"].(string); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$`).MatchString(at) {
		t.Fatalf("failed_at %q is not what Python's datetime.fromisoformat reads", at)
	}

	items := e.dlqList()
	if got, want := itemIDs(items), []string{protean, old, skipped}; !slices.Equal(got, want) {
		t.Fatalf("ids %v, want the category's own, then by key: %v", got, want)
	}
	c, o, h := items[0], items[1], items[2]
	if c.Key != nil || c.Stream != s.Orders+":dlq" || c.Format != "protean" || *c.OriginalStream != s.Orders || *c.OriginalID != "1700000000000-0" ||
		*c.Group != s.Projector || *c.Consumer != "OrderProjector-host-42-a1b2c3" || *c.RetryCount != 3 || c.Reason != nil || c.FailedAt == nil {
		t.Fatalf("Protean's own dead letter: %+v", c)
	}
	if *o.Key != s.Cold || o.Format != "protctl-fields" || *o.OriginalID != "1700000000001-0" || *o.Group != s.Projector ||
		*o.Reason != "dead-lettered by an operator with protctl" || o.RetryCount != nil || o.Consumer != nil {
		t.Fatalf("the old format: %+v", o)
	}
	if *h.Key != s.Halted || h.Format != "protean" || *h.OriginalID != s.HaltedIDs[0] || *h.Group != s.Projector ||
		*h.Consumer != s.HaltedToken || *h.RetryCount != s.PoisonDeliveries || *h.Reason != "poison: amount must be positive" ||
		h.FailedAt == nil || h.AgeMs < 0 || h.AgeMs > 60_000 || h.Missing {
		t.Fatalf("skip-head's dead letter: %+v", h)
	}

	// The fields docs/cli.md promises, no more, no fewer.
	r := e.run("dlq", "ls", s.Orders, "-o", "json")
	var raws struct {
		Items []map[string]any `json:"items"`
	}
	decode(t, r.stdout, &raws)
	fields := slices.Sorted(maps.Keys(raws.Items[0]))
	if want := []string{"ageMs", "category", "consumer", "deadLetteredAt", "failedAt", "format", "group", "id", "key", "missing",
		"originalId", "originalStream", "reason", "replayedFrom", "retryCount", "stream"}; !slices.Equal(fields, want) {
		t.Fatalf("dlq ls -o json fields %v, want %v", fields, want)
	}

	r = e.run("dlq", "ls", s.Orders)
	r.wantCode(t, 0)
	if !hasRow(r.stdout, s.Halted, skipped, regexp.QuoteMeta(s.HaltedIDs[0]), regexp.QuoteMeta(s.Projector), `\d+m?s`, "7", "poison: amount must be positive") ||
		!hasRow(r.stdout, "-", protean, "1700000000000-0", regexp.QuoteMeta(s.Projector), `\S+`, "3", "-") {
		t.Fatalf("table:\n%s", r.stdout)
	}

	// show: hidden payload by default, the original entry with
	// --show-payload, for each format.
	for _, c := range []struct {
		id, key, payload string
	}{
		{skipped, "o-*", head.Values["data"].(string)},
		{old, s.Cold, `{"data":{"n":1}}`},
	} {
		r := e.run("dlq", "show", s.Orders, c.id, "--key", c.key, "-o", "json")
		r.wantCode(t, 0)
		var d dlqItemDoc
		decode(t, r.stdout, &d)
		if d.ID != c.id || string(d.Payload) != "null" || !d.PayloadHidden {
			t.Fatalf("show %s without --show-payload: %s", c.id, r.stdout)
		}
		r = e.run("dlq", "show", s.Orders, c.id, "--key", c.key, "--show-payload", "-o", "json")
		r.wantCode(t, 0)
		decode(t, r.stdout, &d)
		if !jsonEqual(d.Payload, []byte(c.payload)) {
			t.Fatalf("show %s payload %s, want the original %s", c.id, d.Payload, c.payload)
		}
	}
	r = e.run("dlq", "show", s.Orders, skipped)
	r.wantCode(t, 0)
	for _, want := range []string{"Origin:         " + s.HaltedIDs[0] + " of shop::order:o-halted", "Consumer:       " + s.HaltedToken, "Deliveries:     7", "Payload hidden"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("show lacks %q:\n%s", want, r.stdout)
		}
	}

	// Filters. app.Mailer reads a partition and has no dead letters.
	if err := e.c.XGroupCreate(context.Background(), broker.ProteanLayout.Stream(s.Orders, s.Healthy), "app.Mailer", "$").Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--key", "o-h*"}, []string{skipped}},
		{[]string{"--key", "o-[cx]old"}, []string{old}},
		{[]string{"--reason", "^poison"}, []string{skipped}},
		{[]string{"--reason", "operator|poison"}, []string{old, skipped}},
		{[]string{"--group", s.Projector}, []string{protean, old, skipped}},
		// A group with no dead letters (a typo is NOT_FOUND: TestDLQBadInput).
		{[]string{"--group", "app.Mailer"}, []string{}},
		// Age is the time in the dead letter's id: the two written at
		// explicit ids of 2023 are old, skip-head's is new.
		{[]string{"--older-than", "1h"}, []string{protean, old}},
		{[]string{"--newer-than", "1h"}, []string{skipped}},
		{[]string{"--id", old + "," + protean}, []string{protean, old}},
		{[]string{"--limit", "2"}, []string{protean, old}},
	} {
		if got := itemIDs(e.dlqList(c.args...)); !slices.Equal(got, c.want) {
			t.Errorf("dlq ls %v = %v, want %v", c.args, got, c.want)
		}
	}
}

// TestDLQListUnknownGroupIsNotFound: dlq ls --group naming a group Redis
// has no trace of exits 4 naming it; a known group that selects nothing
// (its dead letters filtered out, or it has none) lists nothing with
// exit 0, wherever its trace is.
func TestDLQListUnknownGroupIsNotFound(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	ctx := context.Background()
	cat := testenv.Protean(t, e.c).Category(s.Orders)
	cat.DeadLetter(testenv.ProteanDeadLetter{Group: "dl.Only", RetryCount: 3})
	cat.RegisterGroup("registered.G")
	if err := e.c.XGroupCreateMkStream(ctx, s.Orders, "unpartitioned.G", "$").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Set(ctx, broker.ProteanLayout.GenerationKey("leased.G", s.Cold), "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
	}{
		{"unknown", []string{"--group", "nope.G"}, clierr.ExitNotFound},
		{"unknown with other filters", []string{"--group", "nope.G", "--key", "o-*"}, clierr.ExitNotFound},
		{"its dead letters filtered out", []string{"--group", "dl.Only", "--key", "o-*"}, 0},
		{"registered", []string{"--group", "registered.G"}, 0},
		{"reads the category's own stream", []string{"--group", "unpartitioned.G"}, 0},
		{"has a generation key", []string{"--group", "leased.G"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.run(append([]string{"dlq", "ls", s.Orders, "-o", "json"}, c.args...)...)
			r.wantCode(t, c.code)
			if c.code == clierr.ExitNotFound && (!strings.Contains(r.stderr, `"code":"NOT_FOUND"`) || !strings.Contains(r.stderr, `--group \"nope.G\" not found`)) {
				t.Fatalf("stderr %q", r.stderr)
			}
			if c.code == 0 && !strings.Contains(r.stdout, `"items": []`) {
				t.Fatalf("stdout %s", r.stdout)
			}
		})
	}
}

// Bad input: a clear error naming what was wrong, the documented exit
// code, nothing changed.
func TestDLQBadInput(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	e.skipHead("poison")
	// The same id in two dead-letter streams (ids are unique per stream).
	ctx := context.Background()
	for _, k := range []string{"o-a", "o-b"} {
		e.c.XAdd(ctx, &redis.XAddArgs{Stream: broker.ProteanLayout.DLQStream(s.Orders, k), ID: "5-1", Values: []string{"data", `{"n":1}`}})
	}
	before := e.digest()
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"dlq", "ls", "no::such"}, 4, `category "no::such"`},
		{[]string{"dlq", "replay", "no::such", "--yes"}, 4, `category "no::such"`},
		{[]string{"dlq", "purge", "no::such", "--yes"}, 4, `category "no::such"`},
		// A --group that names no group is a typo, not a plan with no items.
		{[]string{"dlq", "ls", s.Orders, "--group", "NOPE"}, 4, `group "NOPE" not found`},
		{[]string{"dlq", "purge", s.Orders, "--group", "NOPE", "--yes"}, 4, `group "NOPE" not found`},
		{[]string{"dlq", "replay", s.Orders, "--group", "NOPE", "--yes"}, 4, `group "NOPE" not found`},
		{[]string{"dlq", "ls", s.Orders, "--reason", "(poison"}, 2, `invalid --reason "(poison"`},
		{[]string{"dlq", "purge", s.Orders, "--reason", "[", "--yes"}, 2, `invalid --reason "["`},
		{[]string{"dlq", "replay", s.Orders, "--key", "o-[", "--yes"}, 2, `invalid --key "o-["`},
		{[]string{"dlq", "ls", s.Orders, "--older-than", "2h", "--newer-than", "1h"}, 2, "--older-than 2h0m0s and --newer-than 1h0m0s select nothing"},
		{[]string{"dlq", "ls", s.Orders, "--id", "yesterday"}, 2, `invalid --id "yesterday"`},
		{[]string{"dlq", "replay", s.Orders, "--rps", "-1", "--yes"}, 2, "invalid --rps -1"},
		{[]string{"dlq", "show", s.Orders, "nope"}, 2, `invalid ID "nope"`},
		{[]string{"dlq", "show", s.Orders, "1-1"}, 4, "no dead letter 1-1"},
		{[]string{"dlq", "show", s.Orders, "5-1"}, 2, "shop::order:o-a:dlq and shop::order:o-b:dlq: name the partition with --key"},
	} {
		r := e.run(c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %q", c.args, r.code, r.stderr, c.code, c.msg)
		}
	}
	if r := e.run("dlq", "show", s.Orders, "5-1", "--key", "o-b", "-o", "json"); r.code != 0 || !strings.Contains(r.stdout, `"stream": "shop::order:o-b:dlq"`) {
		t.Errorf("show with --key: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A key named like a dead-letter stream that is not a stream: the
	// listing prints the rest and exits 9 naming it; replay and purge
	// change nothing.
	if err := e.c.Set(ctx, broker.ProteanLayout.DLQStream(s.Orders, "o-str"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before = e.digest()
	r := e.run("dlq", "ls", s.Orders)
	if r.code != 9 || !strings.Contains(r.stderr, "shop::order:o-str:dlq") || !strings.Contains(r.stderr, "string") || !strings.Contains(r.stdout, s.Halted) {
		t.Errorf("ls with a wrong-type dead-letter key: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, verb := range []string{"replay", "purge"} {
		if r := e.run("dlq", verb, s.Orders, "--yes"); r.code != 9 || !strings.Contains(r.stderr, "shop::order:o-str:dlq") {
			t.Errorf("%s with a wrong-type dead-letter key: exit %d %s", verb, r.code, r.stderr)
		}
	}
	if r := e.run("dlq", "replay", s.Orders, "--key", s.Halted, "--yes"); r.code != 0 {
		t.Errorf("a replay that does not read the wrong key: exit %d %s", r.code, r.stderr)
	}
	if e.digest() == before {
		t.Fatal("the replay of o-halted changed nothing")
	}
}

// The guard rails every mutator has: no change without --yes when stdin
// is not a terminal, none in read-only mode, none in a dry run; an apply
// is audited.
func TestDLQReplayAndPurgeGuardRails(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	e.skipHead("poison")
	before, audited := e.digest(), len(e.auditEntries())
	for _, verb := range []string{"replay", "purge"} {
		if r := e.run("dlq", verb, s.Orders); r.code != 6 || !strings.Contains(r.stderr, "--yes") {
			t.Errorf("%s without --yes or a terminal: exit %d %s", verb, r.code, r.stderr)
		}
		if r := e.run("dlq", verb, s.Orders, "--read-only", "--yes"); r.code != 6 {
			t.Errorf("%s in read-only mode: exit %d %s", verb, r.code, r.stderr)
		}
		r := e.run("dlq", verb, s.Orders, "--dry-run")
		r.wantCode(t, 0)
		if !hasRow(r.stdout, "dlq-"+verb, `entry \S+ of shop::order:o-halted:dlq`, ".*", "yes") {
			t.Errorf("%s --dry-run:\n%s", verb, r.stdout)
		}
	}
	if e.digest() != before {
		t.Fatal("a refused or dry-run replay or purge changed something")
	}
	if a := e.auditEntries(); len(a) != audited {
		t.Fatalf("a refused or dry-run replay or purge was audited: %+v", a[audited:])
	}
	e.run("dlq", "purge", s.Orders, "--yes").wantCode(t, 0)
	a := e.auditEntries()[audited:]
	if len(a) != 1 || !slices.Equal(a[0].Actions, []string{"dlq-purge"}) || a[0].Outcome != "applied" {
		t.Fatalf("audit %+v", a)
	}
}

// Acceptance: a purge removes exactly the ids it planned, while new dead
// letters arrive; a stale plan exits 5 and changes nothing.
func TestDLQPurgeRemovesOnlyThePlannedIDs(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	ctx := context.Background()
	planned, _ := deadLetterNew(t, e.c, s.Orders, "o-bad", s.Projector, 3)
	plan := savePlan(t, e, "dlq", "purge", s.Orders, "--key", "o-bad")
	var p plannedDoc
	decode(t, fileText(t, plan), &p)
	if len(p.Items) != 3 {
		t.Fatalf("plan %+v", p.Items)
	}

	// New dead letters arrive between the plan and its apply, in the
	// stream the plan purges and another.
	arrived, _ := deadLetterNew(t, e.c, s.Orders, "o-bad", s.Projector, 2)
	other := e.skipHead("poison")

	r := e.run("apply", "-f", plan, "--yes", "-o", "json")
	r.wantCode(t, 0)
	dlq := broker.ProteanLayout.DLQStream(s.Orders, "o-bad")
	left := e.c.XRange(ctx, dlq, "-", "+").Val()
	if got := idsOf(left); !slices.Equal(got, arrived) {
		t.Fatalf("left %v, want only the dead letters that arrived after the plan %v (planned %v)", got, arrived, planned)
	}
	if n := e.c.XLen(ctx, broker.ProteanLayout.DLQStream(s.Orders, s.Halted)).Val(); n != 1 {
		t.Fatalf("another partition's dead letter %s was touched", other)
	}

	// The same plan again: every id is gone, exit 5, nothing changed.
	before := e.digest()
	r = e.run("apply", "-f", plan, "--yes")
	if r.code != 5 || !strings.Contains(r.stdout, "is no longer in "+dlq) {
		t.Fatalf("a stale purge: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if e.digest() != before {
		t.Fatal("a stale purge changed something")
	}

	// An id that now holds another entry (the stream was deleted and the
	// id written again) is not deleted: exit 5; beside an id still as
	// planned it is partial, exit 7.
	plan = savePlan(t, e, "dlq", "purge", s.Orders, "--key", "o-bad")
	e.c.Del(ctx, dlq)
	e.c.XAdd(ctx, &redis.XAddArgs{Stream: dlq, ID: arrived[0], Values: []string{"data", `{"other":true}`}})
	e.c.XAdd(ctx, &redis.XAddArgs{Stream: dlq, ID: arrived[1], Values: left[1].Values})
	r = e.run("apply", "-f", plan, "--yes")
	if r.code != 7 || !strings.Contains(r.stdout, "holds other fields than the plan saw") {
		t.Fatalf("a purge of a changed entry: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := idsOf(e.c.XRange(ctx, dlq, "-", "+").Val()); !slices.Equal(got, arrived[:1]) {
		t.Fatalf("left %v, want the changed entry %s alone", got, arrived[0])
	}
}

func idsOf(msgs []redis.XMessage) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// fileText is a file's content.
func fileText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// replayedOf returns, per dead-letter id, how many entries of stream
// were replayed from it.
func replayedOf(t *testing.T, c redis.UniversalClient, stream string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range c.XRange(context.Background(), stream, "-", "+").Val() {
		var env struct {
			From *broker.ReplayOrigin `json:"_replayed_from"`
		}
		if json.Unmarshal([]byte(fmt.Sprint(m.Values["data"])), &env) == nil && env.From != nil {
			out[env.From.DLQID]++
		}
	}
	return out
}

// Acceptance: a replay resumed from its plan file replays nothing twice:
// the dead letters an earlier apply replayed are reported as already
// replayed (exit 0), the rest are replayed, each lands once. A stale plan
// (its dead letters purged) exits 5 and appends nothing.
func TestDLQReplayResumesFromItsPlan(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	ctx := context.Background()
	const key = "o-bad"
	ids, datas := deadLetterNew(t, e.c, s.Orders, key, s.Projector, 3)
	stream := broker.ProteanLayout.Stream(s.Orders, key)
	plan := savePlan(t, e, "dlq", "replay", s.Orders, "--key", key)
	var p plannedDoc
	decode(t, fileText(t, plan), &p)
	if len(p.Items) != 3 || !strings.Contains(p.Items[0].Reason, "append to "+stream+" (after its newest entry") {
		t.Fatalf("plan %+v", p.Items)
	}

	// One was replayed on its own already (an apply interrupted after
	// its first item leaves the same state).
	e.run("dlq", "replay", s.Orders, "--id", ids[1], "--yes").wantCode(t, 0)

	r := e.run("apply", "-f", plan, "--yes", "-o", "json")
	r.wantCode(t, 0)
	var applied plannedDoc
	decode(t, r.stdout, &applied)
	results := []string{applied.Items[0].result(), applied.Items[1].result(), applied.Items[2].result()}
	if !slices.Equal(results, []string{"applied", "done", "applied"}) || !strings.Contains(applied.Items[1].Detail, "already replayed") {
		t.Fatalf("results %v: %+v", results, applied.Items)
	}
	r = e.run("apply", "-f", plan, "--yes")
	r.wantCode(t, 0)
	if strings.Count(r.stdout, "already replayed") != 3 {
		t.Fatalf("the third apply:\n%s", r.stdout)
	}
	got := replayedOf(t, e.c, stream)
	for _, id := range ids {
		if got[id] != 1 {
			t.Fatalf("replayed %v, want each of %v once", got, ids)
		}
	}
	// The replayed entry is the original, with its origin recorded.
	last := e.c.XRevRangeN(ctx, stream, "+", "-", 1).Val()[0]
	var env map[string]json.RawMessage
	decode(t, last.Values["data"].(string), &env)
	from := env["_replayed_from"]
	delete(env, "_replayed_from")
	b, _ := json.Marshal(env)
	if !jsonEqual(b, []byte(datas[2])) || !strings.Contains(string(from), `"dlq_stream":"shop::order:o-bad:dlq"`) || !strings.Contains(string(from), `"dlq_id":"`+ids[2]+`"`) {
		t.Fatalf("replayed entry %v, want %s with its origin", last.Values, datas[2])
	}
	if n := e.c.XLen(ctx, broker.ProteanLayout.DLQStream(s.Orders, key)).Val(); n != 0 {
		t.Fatalf("%d dead letters left", n)
	}

	// Stale: planned, then purged before the apply.
	more, _ := deadLetterNew(t, e.c, s.Orders, key, s.Projector, 2)
	plan = savePlan(t, e, "dlq", "replay", s.Orders, "--key", key)
	e.run("dlq", "purge", s.Orders, "--key", key, "--yes").wantCode(t, 0)
	before := e.digest()
	r = e.run("apply", "-f", plan, "--yes")
	if r.code != 5 || strings.Count(r.stdout, "is no longer in") != len(more) {
		t.Fatalf("a stale replay: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if e.digest() != before {
		t.Fatal("a stale replay changed something")
	}
}

// Where a replay sends a dead letter: C:K:dlq to C:K (and the key back
// into the index); Protean's C:dlq to the stream it records (C itself for
// an unpartitioned subscription, or a partition of C); one whose origin is
// not C's, or whose body was gone, is refused.
func TestDLQReplayDestinations(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	ctx := context.Background()
	f := testenv.Protean(t, e.c).Category(s.Orders)
	toCategory := f.DeadLetter(testenv.ProteanDeadLetter{OriginalID: "1-0", Group: "app.Unpartitioned"})
	toPartition := f.DeadLetter(testenv.ProteanDeadLetter{OriginalStream: broker.ProteanLayout.Stream(s.Orders, s.Healthy), OriginalID: "2-0", Group: s.Projector})
	elsewhere := f.DeadLetter(testenv.ProteanDeadLetter{OriginalStream: "billing::payment:p-1", OriginalID: "3-0", Group: s.Projector})
	ids, _ := deadLetterNew(t, e.c, s.Orders, "o-bad", s.Projector, 1)
	e.c.SRem(ctx, broker.ProteanLayout.IndexKey(s.Orders), "o-bad") // reaped since
	// A body gone before it was dead-lettered.
	b := redisbroker.New(e.c)
	gone := broker.ProteanLayout.Stream(s.Orders, s.Never)
	l, _, _ := b.AcquirePartitionLease(ctx, broker.ProteanLayout.LeaseKey(s.Projector, s.Never), broker.ProteanLayout.GenerationKey(s.Projector, s.Never), "n", time.Minute)
	msgs, _ := b.ReadPartitionFenced(ctx, l.Fence, gone, s.Projector, 1, broker.ReadNew)
	e.c.XDel(ctx, gone, msgs[0].ID)
	missing, err := b.DeadLetterPartitionFenced(ctx, l.Fence, gone, s.Projector, msgs[0].ID, broker.ProteanLayout.DLQStream(s.Orders, s.Never), "gone")
	if err != nil {
		t.Fatal(err)
	}

	r := e.run("dlq", "replay", s.Orders, "--yes", "-o", "json")
	r.wantCode(t, 7)
	var p struct {
		Items []struct {
			Target map[string]string `json:"target"`
			Params struct {
				ReplayTo  string `json:"replayTo"`
				ReplayKey string `json:"replayKey"`
			} `json:"params"`
			Allowed bool    `json:"allowed"`
			Reason  string  `json:"reason"`
			Result  *string `json:"result"`
		} `json:"items"`
	}
	decode(t, r.stdout, &p)
	// Ids are unique per stream only: items are named by both.
	byID := map[string]int{}
	for i, it := range p.Items {
		byID[it.Target["stream"]+" "+it.Target["id"]] = i
	}
	cat, bad, never := s.Orders+":dlq ", broker.ProteanLayout.DLQStream(s.Orders, "o-bad")+" ", broker.ProteanLayout.DLQStream(s.Orders, s.Never)+" "
	want := map[string]struct{ to, key, result, reason string }{
		cat + toCategory:  {s.Orders, "", "applied", ""},
		cat + toPartition: {broker.ProteanLayout.Stream(s.Orders, s.Healthy), s.Healthy, "applied", ""},
		bad + ids[0]:      {broker.ProteanLayout.Stream(s.Orders, "o-bad"), "o-bad", "applied", ""},
		cat + elsewhere:   {"", "", "refused", "neither shop::order nor one of its partitions"},
		never + missing:   {"", "", "refused", "nothing to replay"},
	}
	if len(p.Items) != len(want) {
		t.Fatalf("items %+v", p.Items)
	}
	for id, w := range want {
		it := p.Items[byID[id]]
		if it.Params.ReplayTo != w.to || it.Params.ReplayKey != w.key || it.Result == nil || *it.Result != w.result || !strings.Contains(it.Reason, w.reason) {
			t.Errorf("dead letter %s: %+v, want %+v", id, it, w)
		}
	}
	if got := replayedOf(t, e.c, s.Orders); got[toCategory] != 1 || len(got) != 1 {
		t.Errorf("the category stream got %v", got)
	}
	if !e.c.SIsMember(ctx, broker.ProteanLayout.IndexKey(s.Orders), "o-bad").Val() {
		t.Error("the replay did not record o-bad in the index")
	}
	if e.c.SIsMember(ctx, broker.ProteanLayout.IndexKey(s.Orders), s.Orders).Val() {
		t.Error("the category's own stream was recorded as a partition")
	}
	left := e.dlqList()
	if got := itemIDs(left); !slices.Equal(got, []string{elsewhere, missing}) {
		t.Errorf("left %v, want the refused ones", got)
	}
}

// The ACL profiles cover the dead-letter commands: readonly lists, shows
// and plans them but cannot replay or purge (permission denied, exit 3,
// nothing changed); the operator does both.
func TestDLQUnderTheACLProfiles(t *testing.T) {
	e := newACLEnv(t)
	s := e.s
	deadLetterNew(t, e.c, s.Orders, "o-bad", s.Projector, 2)
	for _, args := range [][]string{
		{"dlq", "ls", s.Orders},
		{"dlq", "replay", s.Orders, "--dry-run"},
		{"dlq", "purge", s.Orders, "--dry-run"},
	} {
		e.runAs(acl.ReadOnly, args...).wantCode(t, 0)
	}
	before := e.digest()
	for _, verb := range []string{"replay", "purge"} {
		r := e.runAs(acl.ReadOnly, "dlq", verb, s.Orders, "--yes")
		if r.code != clierr.ExitUnavailable || !strings.Contains(r.stderr, "permission denied") {
			t.Fatalf("readonly %s: exit %d %s", verb, r.code, r.stderr)
		}
	}
	if e.digest() != before {
		t.Fatal("a refused replay or purge changed something")
	}
	ids := e.c.XRange(context.Background(), broker.ProteanLayout.DLQStream(s.Orders, "o-bad"), "-", "+").Val()
	e.runAs(acl.Operator, "dlq", "replay", s.Orders, "--id", ids[0].ID, "--yes").wantCode(t, 0)
	e.runAs(acl.Operator, "dlq", "purge", s.Orders, "--yes").wantCode(t, 0)
	if n := e.c.XLen(context.Background(), broker.ProteanLayout.DLQStream(s.Orders, "o-bad")).Val(); n != 0 {
		t.Fatalf("%d dead letters left", n)
	}
}
