package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// TestUnknownNamesAreNotFound walks every command that takes a category,
// stream, group, partition key or subscription with a name nothing in
// Redis knows: each exits 4 (NOT_FOUND, as `partitions ls nosuch::cat`
// always did), its message names the unknown thing, and nothing changed.
// Before, a trim dry run, an fsck, a release of an unknown group and a
// reap of an unknown category or key exited 0 as if they had worked.
func TestUnknownNamesAreNotFound(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	e.park()
	e.heartbeat()
	// Service shop's Kafka topic orders: its lease group and the
	// checkpoints of subscription ledger, for the topics commands.
	k := testenv.StartKafka(t, 1, "orders")
	seedTopicLeaseGroup(t, e.c)
	const cat, group, sub, svc, node = "nosuch::cat", "nosuch.Group", "nosuch.Sub", "nosuch-svc", "nosuch-node"
	cases := []struct {
		name    string
		args    []string
		unknown string
	}{
		{"partitions ls", []string{"partitions", "ls", cat}, cat},
		{"partitions ls --group", []string{"partitions", "ls", s.Orders, "--group", group}, group},
		{"partitions show: category", []string{"partitions", "show", cat, s.Healthy}, cat},
		{"partitions show: key", []string{"partitions", "show", s.Orders, "o-nosuch"}, "o-nosuch"},
		{"partitions fsck", []string{"partitions", "fsck", cat}, cat},
		{"partitions reap: category", []string{"partitions", "reap", cat, "o-1", "--yes"}, cat},
		{"partitions reap --all-cold: category", []string{"partitions", "reap", cat, "--all-cold", "--yes"}, cat},
		{"partitions reap: key", []string{"partitions", "reap", s.Orders, "o-nosuch", "--yes"}, "o-nosuch"},
		{"partitions reap --dry-run: key", []string{"partitions", "reap", s.Orders, "o-nosuch", "--dry-run"}, "o-nosuch"},
		{"partitions release: group", []string{"partitions", "release", s.Orders, s.Halted, "--group", group, "--force", "--yes"}, group},
		{"partitions release: category", []string{"partitions", "release", cat, s.Cold, "--group", s.Projector, "--force", "--yes"}, cat},
		{"partitions skip-head: group", []string{"partitions", "skip-head", s.Orders, s.Halted, "--group", group, "--yes"}, group},
		{"partitions skip-head: category", []string{"partitions", "skip-head", cat, s.Halted, "--group", s.Projector, "--yes"}, cat},
		{"streams trim --dry-run", []string{"streams", "trim", cat + ":x", "--maxlen", "10", "--dry-run"}, cat + ":x"},
		{"streams trim", []string{"streams", "trim", cat + ":x", "--maxlen", "10", "--yes"}, cat + ":x"},
		{"leases ls --category", []string{"leases", "ls", "--category", cat}, cat},
		{"check --category", []string{"check", "--category", cat}, cat},
		{"parked show", []string{"parked", "show", sub, s.Halted}, sub},
		{"parked retry", []string{"parked", "retry", sub, s.Halted, "--yes"}, sub},
		{"parked skip", []string{"parked", "skip", sub, s.Halted, "--reason", "x", "--yes"}, sub},
		// The filters of every list and show.
		{"partitions ls --owner", []string{"partitions", "ls", s.Orders, "--owner", node}, node},
		{"partitions prune-consumers: category", []string{"partitions", "prune-consumers", cat, "--yes"}, cat},
		{"partitions prune-consumers: key", []string{"partitions", "prune-consumers", s.Orders, "o-nosuch", "--yes"}, "o-nosuch"},
		{"partitions prune-consumers --group", []string{"partitions", "prune-consumers", s.Orders, "--group", group, "--dry-run"}, group},
		{"leases ls --group", []string{"leases", "ls", "--group", group}, group},
		{"leases ls --category --group", []string{"leases", "ls", "--category", s.Orders, "--group", group}, group},
		{"parked ls --subscription", []string{"parked", "ls", "--subscription", sub}, sub},
		{"parked retry --all --subscription", []string{"parked", "retry", "--all", "--subscription", sub, "--yes"}, sub},
		{"parked skip --all --subscription", []string{"parked", "skip", "--all", "--subscription", sub, "--reason", "x", "--yes"}, sub},
		{"nodes ls --service", []string{"nodes", "ls", "--service", svc}, svc},
		{"check --service", []string{"check", "--no-backing-off", "--service", svc}, svc},
		{"topics ls --service", []string{"topics", "ls", "--service", svc}, svc},
		{"topics show --service", []string{"topics", "show", "orders", "--service", svc}, svc},
		{"topics ls --subscription", []string{"topics", "ls", "--service", "shop", "--subscription", sub}, sub},
		{"topics show --subscription", []string{"topics", "show", "orders", "--service", "shop", "--subscription", sub}, sub},
		{"tui --category", []string{"tui", "--category", cat}, cat},
		{"tui --service", []string{"tui", "--service", svc}, svc},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.digest()
			for _, format := range []string{"table", "json"} {
				// The dashboard runs only on a terminal; were it to start
				// on an unknown name, q quits it (exit 0, a failure here).
				cl := e.cli(c.args[0] == "tui")
				if c.args[0] == "tui" {
					cl.configure = func(s *output.IOStreams) { typeWhenShown(s, "q", "protctl") }
				}
				cl.env["PROTCTL_KAFKA"] = strings.Join(k.Brokers, ",")
				r := cl.run(append(c.args, "-o", format)...)
				r.wantCode(t, clierr.ExitNotFound)
				if !strings.Contains(r.stderr, c.unknown) {
					t.Errorf("-o %s: the error does not name %q:\n%s", format, c.unknown, r.stderr)
				}
				if format == "json" && !strings.Contains(r.stderr, `"code":"NOT_FOUND"`) {
					t.Errorf("-o json: stderr %q lacks NOT_FOUND", r.stderr)
				}
			}
			if e.digest() != before {
				t.Fatal("a command on an unknown name changed Redis")
			}
		})
	}

	// A name Redis records, with nothing to show now, is no typo: the
	// filters above still list nothing and exit 0. Service billing has
	// only a Kafka lease group's generation counter (no live node);
	// node-idle is a live node of shop holding no lease; subscription
	// ledger only saved Kafka checkpoints (parked ls lists it empty, and a
	// bulk retry or skip of it is an empty plan).
	ctx := context.Background()
	if err := e.c.Set(ctx, redisstore.TopicLeaseGroup("billing", "payments").GenerationKey(0), "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := redisstore.New(e.c).Heartbeat(ctx, runtime.NodeStatus{Service: "shop", Node: "node-idle", JoinState: runtime.JoinJoined}, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"nodes", "ls", "--service", "billing", "-o", "json"},
		{"check", "--no-backing-off", "--service", "billing"},
		{"topics", "ls", "--service", "billing"},
		{"parked", "ls", "--subscription", "ledger"},
		{"parked", "retry", "--all", "--subscription", "ledger", "--yes"},
		{"parked", "skip", "--all", "--subscription", "ledger", "--reason", "x", "--yes"},
		{"partitions", "ls", s.Orders, "--owner", "node-idle"},
		{"leases", "ls", "--group", s.Projector, "--state", "free"},
		{"leases", "ls", "--category", s.Payments, "--group", s.Ledger},
		{"partitions", "prune-consumers", s.Payments, "--group", s.Audit, "--dry-run"},
	} {
		cl := e.cli(false)
		cl.env["PROTCTL_KAFKA"] = strings.Join(k.Brokers, ",")
		cl.run(args...).wantCode(t, 0)
	}
}

// seedTopicLeaseGroup writes service shop's lease group of Kafka topic
// orders to c: partition 0 leased by node-a (generation 2) with
// subscription ledger's checkpoint at 1.
func seedTopicLeaseGroup(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	g := redisstore.TopicLeaseGroup("shop", "orders")
	f := broker.Fence{LeaseKey: g.LeaseKey(0), Token: "node-a:2"}
	if err := c.Set(ctx, f.LeaseKey, f.Token, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, g.GenerationKey(0), "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := redisstore.New(c).Save(ctx, f, g.String(), "ledger", 0, 1); err != nil {
		t.Fatal(err)
	}
}

// TestWrongTypeIsADataErrorEverywhere puts a key of the wrong type in
// each place a command reads (the index, the group registry, a main and
// a backfill lane, a lease, a generation counter, a dead-letter stream,
// the audit log) and runs every command that reads it: each exits 9
// (WRONG_TYPE), its message names the key, the type it holds and the type
// expected, and nothing changed. Before, the same keys read as missing
// ("main:missing", an orphan), were skipped or counted as nothing, showed
// LENGTH 0, or exited 1 (INTERNAL).
func TestWrongTypeIsADataErrorEverywhere(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	l := broker.ProteanLayout
	parked := e.park()
	e.heartbeat()
	k := testenv.StartKafka(t, 1, "orders")
	seedTopicLeaseGroup(t, e.c)
	tg := redisstore.TopicLeaseGroup("shop", "orders")
	record := redisstore.RecordKey(l.LeaseKey(s.Projector, s.Halted), parked.Subscription, parked.Aggregate)
	parkedReads := [][]string{
		{"parked", "ls"},
		{"parked", "ls", "--subscription", s.Projector},
		{"parked", "show", s.Projector, s.Halted},
		{"parked", "retry", s.Projector, s.Halted, "--yes"},
		{"parked", "retry", "--all", "--yes"},
		{"parked", "skip", s.Projector, s.Halted, "--reason", "x", "--yes"},
		{"check", "--max-parked", "0"},
	}
	env := `{"data":{"amount":5},"metadata":{"headers":{"id":"e-1","type":"OrderPlaced"}}}`
	main := l.Stream(s.Orders, s.Healthy)
	places := []struct {
		name      string
		key       string
		got, want string
		cmds      [][]string
	}{
		{"index", l.IndexKey(s.Orders), "string", "set", [][]string{
			{"partitions", "ls", s.Orders},
			{"partitions", "ls"},
			{"partitions", "show", s.Orders, s.Healthy},
			{"partitions", "fsck", s.Orders},
			{"partitions", "reap", s.Orders, s.Cold, "--yes"},
			{"partitions", "reap", s.Orders, "--all-cold", "--yes"},
			{"leases", "ls", "--category", s.Orders},
			{"check", "--category", s.Orders},
			{"publish", s.Orders, "o-new", "--data", env, "--yes"},
		}},
		{"group registry", l.GroupsKey(s.Orders), "string", "set", [][]string{
			{"partitions", "ls", s.Orders},
			{"partitions", "show", s.Orders, s.Healthy},
			{"partitions", "reap", s.Orders, s.Cold, "--yes"},
			{"streams", "trim", main, "--maxlen", "1", "--dry-run"},
		}},
		{"main lane", main, "string", "stream", [][]string{
			{"partitions", "ls", s.Orders},
			{"partitions", "ls", s.Orders, "-o", "json"},
			{"partitions", "ls", s.Orders, "--sort-by", "lag"},
			{"partitions", "show", s.Orders, s.Healthy},
			{"partitions", "fsck", s.Orders},
			{"partitions", "reap", s.Orders, s.Healthy, "--min-idle", "0s", "--force", "--yes"},
			{"partitions", "reap", s.Orders, "--all-cold", "--min-idle", "0s", "--yes"},
			{"partitions", "skip-head", s.Orders, s.Healthy, "--group", s.Projector, "--yes"},
			{"streams", "trim", main, "--maxlen", "1", "--yes"},
			{"streams", "trim", main, "--maxlen", "1", "--dry-run"},
			{"publish", s.Orders, s.Healthy, "--data", env, "--yes"},
			{"check", "--category", s.Orders},
		}},
		{"backfill lane", l.LaneStream(s.Orders, s.Backfill, broker.DefaultBackfillSuffix), "string", "stream", [][]string{
			{"partitions", "ls", s.Orders},
			{"partitions", "show", s.Orders, s.Backfill},
			{"partitions", "fsck", s.Orders},
			{"publish", s.Orders, s.Backfill, "--backfill", "--data", env, "--yes"},
		}},
		{"lease", l.LeaseKey(s.Projector, s.Halted), "hash", "string", [][]string{
			{"leases", "ls"},
			{"leases", "ls", "--category", s.Orders},
			{"partitions", "ls", s.Orders},
			{"partitions", "ls", s.Orders, "-o", "json"},
			{"partitions", "ls", s.Orders, "--sort-by", "ttl"},
			{"check", "--category", s.Orders},
			{"partitions", "reap", s.Orders, s.Halted, "--force", "--yes"},
			{"partitions", "show", s.Orders, s.Halted},
			{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force", "--yes"},
			{"partitions", "skip-head", s.Orders, s.Halted, "--group", s.Projector, "--yes"},
		}},
		{"generation counter", l.GenerationKey(s.Projector, s.Lagging), "hash", "string", [][]string{
			{"leases", "ls"},
			{"leases", "ls", "--category", s.Orders},
			{"partitions", "ls", s.Orders},
			{"partitions", "ls", s.Orders, "-o", "json"},
			{"check", "--category", s.Orders},
			{"partitions", "show", s.Orders, s.Lagging},
			{"partitions", "release", s.Orders, s.Lagging, "--group", s.Projector, "--force", "--yes"},
		}},
		{"dead-letter stream", l.DLQStream(s.Orders, s.Halted), "string", "stream", [][]string{
			{"partitions", "show", s.Orders, s.Halted},
			{"partitions", "skip-head", s.Orders, s.Halted, "--group", s.Projector, "--yes"},
		}},
		{"Kafka lease", tg.LeaseKey(0), "hash", "string", [][]string{
			{"topics", "ls", "--service", "shop"},
			{"topics", "show", "orders", "--service", "shop"},
		}},
		{"Kafka generation counter", tg.GenerationKey(0), "hash", "string", [][]string{
			{"topics", "ls", "--service", "shop"},
			{"topics", "show", "orders", "--service", "shop", "-o", "json"},
		}},
		{"Kafka checkpoints", tg.CheckpointsKey("ledger"), "string", "hash", [][]string{
			{"topics", "ls", "--service", "shop"},
			{"topics", "show", "orders", "--service", "shop", "--subscription", "ledger"},
		}},
		{"node status record", redisstore.NodeKey("shop", "node-a"), "hash", "string", [][]string{
			{"nodes", "ls", "--service", "shop"},
			{"check", "--no-backing-off", "--service", "shop"},
		}},
		{"node held record", redisstore.HeldKey("shop", "node-a"), "hash", "string", [][]string{
			{"nodes", "ls", "--service", "shop"},
			{"nodes", "ls", "--service", "shop", "-o", "json"},
		}},
		{"membership", redisstore.MembersKey("shop"), "string", "zset", [][]string{
			{"nodes", "ls", "--service", "shop"},
			{"nodes", "ls", "--service", "shop", "-o", "json"},
			{"check", "--no-backing-off", "--service", "shop"},
		}},
		{"ledger index", redisstore.ParkedEntriesKey(s.Projector), "string", "hash", parkedReads},
		{"ledger index before 0007", redisstore.ParkedIndexKey(s.Projector), "string", "hash", parkedReads},
		{"ledger subscriptions", redisstore.ParkedSubscriptionsKey, "string", "set", [][]string{
			{"parked", "ls"},
			{"parked", "retry", "--all", "--yes"},
			{"check", "--max-parked", "0"},
		}},
		{"parked record", record, "hash", "string", parkedReads},
		{"audit log", audit.Key, "string", "stream", [][]string{
			{"audit", "ls"},
			{"audit", "ls", "-o", "json"},
			// Every mutator appends to it: each refuses before it changes
			// anything (TestAuditLogOfTheWrongTypeStopsEveryMutator).
			{"partitions", "release", s.Orders, s.Halted, "--group", s.Projector, "--force", "--yes"},
			{"partitions", "reap", s.Orders, s.Cold, "--yes"},
			{"streams", "trim", main, "--maxlen", "1", "--yes"},
			{"parked", "retry", s.Projector, s.Halted, "--yes"},
		}},
	}
	for _, p := range places {
		t.Run(p.name, func(t *testing.T) {
			restore := putWrongType(t, e.c, p.key, p.got)
			defer restore()
			want := fmt.Sprintf("%q holds a %s, want a %s", p.key, p.got, p.want)
			for _, args := range p.cmds {
				before := e.digest()
				cl := e.cli(false)
				cl.env["PROTCTL_KAFKA"] = strings.Join(k.Brokers, ",")
				r := cl.run(args...)
				// -o json escapes the quotes of the message.
				if r.code != clierr.ExitWrongType || !strings.Contains(strings.ReplaceAll(r.stderr, `\"`, `"`), want) {
					t.Errorf("%s: exit %d, want %d with %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, clierr.ExitWrongType, want, r.stdout, r.stderr)
				}
				if e.digest() != before {
					t.Errorf("%s changed Redis", strings.Join(args, " "))
				}
			}
		})
	}

	t.Run("ls shows the partition as unread, not empty", func(t *testing.T) {
		defer putWrongType(t, e.c, main, "string")()
		r := e.run("partitions", "ls", s.Orders)
		for _, line := range strings.Split(r.stdout, "\n") {
			if strings.Contains(line, s.Healthy) && !strings.Contains(line, " ? ") {
				t.Errorf("the row of %s does not show its length as unknown: %q", s.Healthy, line)
			}
		}
	})
	t.Run("fsck counts it", func(t *testing.T) {
		defer putWrongType(t, e.c, main, "string")()
		r := e.run("partitions", "fsck", s.Orders, "-o", "json")
		r.wantCode(t, clierr.ExitWrongType)
		var rep struct {
			Orphans []struct {
				Kind, Key, Stream, Type string
			} `json:"orphans"`
		}
		decode(t, r.stdout, &rep)
		found := false
		for _, o := range rep.Orphans {
			found = found || (o.Kind == "wrong-type" && o.Key == s.Healthy && o.Stream == main && o.Type == "string")
		}
		if !found {
			t.Fatalf("fsck does not count %s as wrong-type: %+v", main, rep.Orphans)
		}
	})
}

// putWrongType replaces key with a value of type typ ("string" or
// "hash") and returns what puts the original back.
func putWrongType(t *testing.T, c redis.UniversalClient, key, typ string) func() {
	t.Helper()
	ctx := context.Background()
	dump, err := c.Dump(ctx, key).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	ttl, _ := c.PTTL(ctx, key).Result()
	c.Del(ctx, key)
	switch typ {
	case "string":
		err = c.Set(ctx, key, "not the right type", 0).Err()
	case "hash":
		err = c.HSet(ctx, key, "f", "v").Err()
	}
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		c.Del(ctx, key)
		if dump == "" {
			return
		}
		if ttl < 0 {
			ttl = 0
		}
		if err := c.Restore(ctx, key, ttl, dump).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReapedCategoryHasNoLivePartitions: once every partition of a
// category is reaped, its index is gone (Redis deletes an empty set), but
// the category is known while its group registry, a dead-letter stream or
// any C:* key remains: `partitions ls C` says it has no live partitions
// and exits 0, where it said "not found" (exit 4). A name nothing knows
// still exits 4.
func TestReapedCategoryHasNoLivePartitions(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	ctx := context.Background()
	l := broker.ProteanLayout
	// Payments reaped to the last partition: no index, no lanes; the
	// dead-letter stream of one and the generation counters remain.
	for _, k := range []string{l.IndexKey(s.Payments), l.Stream(s.Payments, s.Pay1), l.Stream(s.Payments, s.Orphan)} {
		if err := e.c.Del(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.c.XAdd(ctx, &redis.XAddArgs{Stream: l.DLQStream(s.Payments, s.Pay1), Values: []any{"data", "{}"}}).Err(); err != nil {
		t.Fatal(err)
	}
	r := e.run("partitions", "ls", s.Payments)
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "has no live partitions") || !strings.Contains(r.stdout, s.Payments) {
		t.Fatalf("ls of a reaped category says:\n%s\n%s", r.stdout, r.stderr)
	}
	r = e.run("partitions", "ls", s.Payments, "-o", "json")
	r.wantCode(t, 0)
	var doc struct {
		Items []any `json:"items"`
	}
	decode(t, r.stdout, &doc)
	if doc.Items == nil || len(doc.Items) != 0 {
		t.Fatalf("-o json items %v, want []", doc.Items)
	}
	e.run("partitions", "fsck", s.Payments).wantCode(t, 0)

	// Only the registry left (what protctl's runtime leaves).
	if err := e.c.Del(ctx, l.DLQStream(s.Payments, s.Pay1)).Err(); err != nil {
		t.Fatal(err)
	}
	e.run("partitions", "ls", s.Payments).wantCode(t, clierr.ExitNotFound)
	if err := e.c.SAdd(ctx, l.GroupsKey(s.Payments), s.Ledger).Err(); err != nil {
		t.Fatal(err)
	}
	e.run("partitions", "ls", s.Payments).wantCode(t, 0)
}

// TestErrorsNameTheSettingToFix: an unreachable Redis is reported with
// the address tried, where it came from and the settings that choose it,
// never as the library's chain ("inspect: scan: broker: unavailable:
// ..."); package prefixes are dropped from every message; a refusal says
// --force.
func TestErrorsNameTheSettingToFix(t *testing.T) {
	closed := closedPort(t)
	prefixes := []string{"inspect:", "broker:", "redisbroker:", "redisstore:", "runtime:", "repair:"}
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"flag", nil, []string{"partitions", "ls", "--redis", closed}, []string{"cannot reach Redis at " + closed, "from --redis", "--redis, PROTCTL_REDIS or the context's redis.url", "connection refused"}},
		{"environment", map[string]string{"PROTCTL_REDIS": closed}, []string{"leases", "ls"}, []string{"cannot reach Redis at " + closed, "from PROTCTL_REDIS", "redis.url"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newCLI(t)
			for k, v := range c.env {
				cl.env[k] = v
			}
			for _, format := range []string{"table", "json"} {
				r := cl.run(append(c.args, "-o", format, "--timeout", "5s")...)
				r.wantCode(t, clierr.ExitUnavailable)
				for _, w := range c.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("-o %s: %q lacks %q", format, r.stderr, w)
					}
				}
				for _, p := range prefixes {
					if strings.Contains(r.stderr, p) {
						t.Errorf("-o %s: %q shows the package prefix %q", format, r.stderr, p)
					}
				}
			}
		})
	}

	t.Run("a context's Redis", func(t *testing.T) {
		cl, _ := cliWithConfig(t, "currentContext: prod\ncontexts:\n  - name: prod\n    redis: {url: \""+closed+"\"}\n")
		r := cl.run("partitions", "ls", "--timeout", "5s")
		r.wantCode(t, clierr.ExitUnavailable)
		if !strings.Contains(r.stderr, `from context "prod", redis.url`) {
			t.Errorf("%q does not name the context", r.stderr)
		}
	})

	e := newOpsEnv(t)
	for _, args := range [][]string{
		{"partitions", "release", e.s.Orders, e.s.Halted, "--group", e.s.Projector, "--yes"},
		{"partitions", "reap", e.s.Orders, e.s.Healthy, "--min-idle", "0s", "--yes"},
	} {
		r := e.run(args...)
		r.wantCode(t, clierr.ExitRefused)
		if !strings.Contains(r.stdout, "use --force") || strings.Contains(r.stdout, "use force") {
			t.Errorf("%s: the refusal does not say --force:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
	defer putWrongType(t, e.c, broker.ProteanLayout.Stream(e.s.Orders, e.s.Healthy), "string")()
	r := e.run("partitions", "show", e.s.Orders, e.s.Healthy)
	for _, p := range prefixes {
		if strings.Contains(r.stderr, p) {
			t.Errorf("%q shows the package prefix %q", r.stderr, p)
		}
	}
}

// TestProteanHaltedPartitionHelp: the help says what Protean v0.17 does
// with a poison head (3 deliveries, then it halts the partition and keeps
// renewing the lease), not that it redelivers it forever.
func TestProteanHaltedPartitionHelp(t *testing.T) {
	for _, args := range [][]string{{"partitions", "--help"}, {"partitions", "skip-head", "--help"}} {
		r := newCLI(t).run(args...)
		r.wantCode(t, 0)
		out := strings.Join(strings.Fields(r.stdout), " ")
		if strings.Contains(out, "forever") || !strings.Contains(out, "3 times") || !strings.Contains(out, "renewing") {
			t.Errorf("%s says:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
}
