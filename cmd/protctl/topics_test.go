package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// topicsCLI lays down service "shop", topic "orders" (2 partitions) and
// returns a CLI pointed at the Redis and Kafka holding it:
//
//	p0: 4 records, lease node-a:7 held, ledger at 1 (lag 3)
//	p1: 2 records, generation 3, lease released (no key, nothing waits), ledger at 2 (lag 0)
func topicsCLI(t *testing.T) *cli {
	t.Helper()
	k := testenv.StartKafka(t, 2, "orders")
	srv := seedTopics(t, k, k.Client(t))
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = srv.URL()
	cl.env["PROTCTL_KAFKA"] = strings.Join(k.Brokers, ",")
	return cl
}

// seedTopics lays down topicsCLI's state on k (a 2-partition "orders"
// topic; kc may log in over TLS and SASL) and a new Redis, and returns the
// Redis.
func seedTopics(t *testing.T, k *testenv.Kafka, kc *kgo.Client) *testenv.Redis {
	t.Helper()
	ctx := context.Background()
	k.Produce(t, kc,
		&kgo.Record{Topic: "orders", Partition: 0, Value: []byte("a")},
		&kgo.Record{Topic: "orders", Partition: 0, Value: []byte("b")},
		&kgo.Record{Topic: "orders", Partition: 0, Value: []byte("c")},
		&kgo.Record{Topic: "orders", Partition: 0, Value: []byte("d")},
		&kgo.Record{Topic: "orders", Partition: 1, Value: []byte("e")},
		&kgo.Record{Topic: "orders", Partition: 1, Value: []byte("f")},
	)
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
	return srv
}

type topicsJSON struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Items      []inspect.Topic `json:"items"`
}

func checkOrders(t *testing.T, tp inspect.Topic) {
	t.Helper()
	if tp.Topic != "orders" || tp.LeaseGroup != "shop|topic:orders" || len(tp.Partitions) != 2 {
		t.Fatalf("topic %+v", tp)
	}
	p0, p1 := tp.Partitions[0], tp.Partitions[1]
	if p0.Owner == nil || *p0.Owner != "node-a" || p0.Generation == nil || *p0.Generation != 7 || p0.State != inspect.LeaseHeld || p0.HeadOffset != "4" {
		t.Errorf("p0 %+v", p0)
	}
	if s := p0.Subscriptions; len(s) != 1 || s[0].Name != "ledger" || s[0].Checkpoint == nil || *s[0].Checkpoint != "1" || s[0].Lag == nil || *s[0].Lag != 3 {
		t.Errorf("p0 subscriptions %+v", s)
	}
	if p1.Owner != nil || p1.Generation == nil || *p1.Generation != 3 || p1.State != inspect.LeaseReleased || p1.HeadOffset != "2" {
		t.Errorf("p1 %+v", p1)
	}
	if s := p1.Subscriptions; len(s) != 1 || s[0].Checkpoint == nil || *s[0].Checkpoint != "2" || s[0].Lag == nil || *s[0].Lag != 0 {
		t.Errorf("p1 subscriptions %+v", s)
	}
}

func TestTopicsListJSON(t *testing.T) {
	cl := topicsCLI(t)
	for _, args := range [][]string{
		{"topics", "ls", "--service", "shop", "-o", "json"},
		{"topics", "ls", "--service", "shop", "orders", "-o", "json"},
		{"topics", "ls", "--service", "shop", "orders", "--subscription", "ledger", "-o", "json"},
	} {
		t.Run(strings.Join(args[3:], " "), func(t *testing.T) {
			r := cl.run(args...)
			r.wantCode(t, 0)
			var doc topicsJSON
			if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
				t.Fatalf("%v\n%s", err, r.stdout)
			}
			if doc.APIVersion != "protctl.dev/v1" || doc.Kind != "TopicList" || len(doc.Items) != 1 {
				t.Fatalf("document %s", r.stdout)
			}
			checkOrders(t, doc.Items[0])
			for _, field := range []string{`"headOffset":"4"`, `"checkpoint":"1"`, `"earliestOffset":"0"`, `"ttlMs":`, `"leaseGroup":"shop|topic:orders"`} {
				if !strings.Contains(strings.ReplaceAll(r.stdout, `": `, `":`), field) {
					t.Errorf("JSON lacks %s", field)
				}
			}
		})
	}
}

func TestTopicsShowJSONAndJSONL(t *testing.T) {
	cl := topicsCLI(t)
	r := cl.run("topics", "show", "orders", "--service", "shop", "-o", "json")
	r.wantCode(t, 0)
	var tp struct {
		Kind string `json:"kind"`
		inspect.Topic
	}
	if err := json.Unmarshal([]byte(r.stdout), &tp); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if tp.Kind != "Topic" {
		t.Fatalf("kind %q", tp.Kind)
	}
	checkOrders(t, tp.Topic)

	r = cl.run("topics", "ls", "--service", "shop", "-o", "jsonl")
	r.wantCode(t, 0)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], `{"service":"shop","topic":"orders"`) {
		t.Fatalf("jsonl %q", r.stdout)
	}
}

func TestTopicsTableWithoutTTY(t *testing.T) {
	cl := topicsCLI(t)
	r := cl.run("topics", "ls", "--service", "shop")
	r.wantCode(t, 0)
	if hasANSI(r.stdout) {
		t.Fatalf("ANSI without a TTY:\n%s", r.stdout)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and 2 rows:\n%s", r.stdout)
	}
	for i, want := range [][]string{
		{"TOPIC", "PARTITION", "STATE", "OWNER", "GEN", "TTL", "HEAD", "SUBSCRIPTION", "CHECKPOINT", "LAG", "STATUS", "PAUSED"},
		{"orders", "0", "held", "node-a", "7", "", "4", "ledger", "1", "3", "OK", "-"},
		{"orders", "1", "released", "-", "3", "-", "2", "ledger", "2", "0", "IDLE", "-"},
	} {
		got := strings.Fields(lines[i])
		if len(got) != len(want) {
			t.Fatalf("line %d %q, want %d fields", i, lines[i], len(want))
		}
		for j := range want {
			if want[j] != "" && got[j] != want[j] {
				t.Errorf("line %d field %d = %q, want %q (%q)", i, j, got[j], want[j], lines[i])
			}
		}
	}

	r = cl.run("topics", "ls", "--service", "shop", "-o", "wide")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "EARLIEST") || !strings.Contains(r.stdout, "node-a:7") {
		t.Fatalf("wide:\n%s", r.stdout)
	}

	r = cl.run("topics", "show", "orders", "--service", "shop")
	r.wantCode(t, 0)
	for _, want := range []string{"Lease group:", "shop|topic:orders", "Subscriptions:", "ledger", "PARTITION", "held", "released"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	if hasANSI(r.stdout) {
		t.Fatalf("ANSI without a TTY:\n%s", r.stdout)
	}
}

func TestTopicsUnknownTopicExits4(t *testing.T) {
	cl := topicsCLI(t)
	r := cl.run("topics", "show", "nope", "--service", "shop", "-o", "json")
	r.wantCode(t, 4)
	if !strings.Contains(r.stderr, `"code":"NOT_FOUND"`) || r.stdout != "" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	cl.run("topics", "ls", "--service", "shop", "orders", "nope").wantCode(t, 4)
}

func TestTopicsUnreachableExits3(t *testing.T) {
	cl := topicsCLI(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dead := "127.0.0.1:" + strconv.Itoa(port)

	kafka := newCLI(t)
	kafka.env = cl.env
	kafka.env["PROTCTL_KAFKA"] = dead
	r := kafka.run("topics", "show", "orders", "--service", "shop", "--timeout", "1s", "-o", "json")
	r.wantCode(t, 3)
	if !strings.Contains(r.stderr, `"code":"UNAVAILABLE"`) {
		t.Fatalf("stderr %q", r.stderr)
	}

	cl2 := topicsCLI(t)
	cl2.env["PROTCTL_REDIS"] = "redis://" + dead + "/0"
	cl2.run("topics", "show", "orders", "--service", "shop", "--subscription", "ledger", "--timeout", "1s").wantCode(t, 3)
}

// TestTopicsListWithoutTopicsAsksKafka: topics ls of a service Redis has
// no topic of reads no topic, yet an unreachable Kafka still exits 3
// rather than list nothing; a reachable one lists nothing with exit 0.
func TestTopicsListWithoutTopicsAsksKafka(t *testing.T) {
	srv := testenv.StartRedis(t)
	if err := srv.Client(t).ZAdd(context.Background(), redisstore.MembersKey("demo"), redis.Z{Score: 1, Member: "n1"}).Err(); err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	k := testenv.StartKafka(t, 1, "orders")
	for _, c := range []struct {
		name, kafka string
		code        int
	}{
		{"unreachable", "127.0.0.1:" + strconv.Itoa(port), 3},
		{"reachable", strings.Join(k.Brokers, ","), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newCLI(t)
			cl.env["PROTCTL_REDIS"] = srv.URL()
			cl.env["PROTCTL_KAFKA"] = c.kafka
			r := cl.run("topics", "ls", "--service", "demo", "--timeout", "1s", "-o", "json")
			r.wantCode(t, c.code)
			if c.code == 3 && !strings.Contains(r.stderr, `"code":"UNAVAILABLE"`) {
				t.Fatalf("stderr %q", r.stderr)
			}
			if c.code == 0 && !strings.Contains(r.stdout, `"items": []`) {
				t.Fatalf("stdout %s", r.stdout)
			}
		})
	}
}

func TestTopicsUsage(t *testing.T) {
	cl := newCLI(t)
	cl.run("topics", "ls").wantCode(t, 0)                                  // no --service: lists the services
	cl.run("topics", "show", "--service", "shop").wantCode(t, 2)           // no TOPIC
	cl.run("topics", "show", "orders", "--service", "shop").wantCode(t, 2) // no Kafka brokers
}

// A Kafka subscription's operator pauses show in topics ls/show: the
// entries in JSON (pauses[], partitions[].subscriptions[].paused for a
// whole-subscription pause) and PAUSED in the tables.
func TestTopicsShowPaused(t *testing.T) {
	cl := topicsCLI(t)
	cl.run("pause", "ledger", "o-1", "--service", "shop", "--topic", "orders", "--reason", "bad o-1", "--yes").wantCode(t, 0)
	r := cl.run("topics", "show", "orders", "--service", "shop", "-o", "json")
	r.wantCode(t, 0)
	var tp inspect.Topic
	if err := json.Unmarshal([]byte(r.stdout), &tp); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(tp.Pauses) != 1 || tp.Pauses[0].Subscription != "ledger" || tp.Pauses[0].Selector != "key:o-1" || tp.Pauses[0].Reason != "bad o-1" {
		t.Fatalf("pauses %+v\n%s", tp.Pauses, r.stdout)
	}
	if tp.Partitions[0].Subscriptions[0].Paused {
		t.Fatalf("a key pause marked the whole subscription paused:\n%s", r.stdout)
	}
	r = cl.run("topics", "ls", "--service", "shop")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "1 key") {
		t.Fatalf("ls does not count the paused key:\n%s", r.stdout)
	}

	cl.run("pause", "ledger", "--all", "--service", "shop", "--topic", "orders", "--yes").wantCode(t, 0)
	r = cl.run("topics", "ls", "--service", "shop", "-o", "json")
	r.wantCode(t, 0)
	if !strings.Contains(strings.ReplaceAll(r.stdout, `": `, `":`), `"paused":true`) {
		t.Fatalf("JSON lacks paused:true after --all:\n%s", r.stdout)
	}
	r = cl.run("topics", "show", "orders", "--service", "shop")
	r.wantCode(t, 0)
	for _, want := range []string{"PAUSED ledger all", "PAUSED ledger key:o-1", "bad o-1", "PAUSED"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestCheckListsKafkaPausesAsPaused (issue 23): `check --fail-on-status
// PAUSED` lists a Kafka topic subscription's pause entries (an aggregate,
// then the whole subscription) as PAUSED offenders, in the table and in
// JSON, as it lists paused Redis partitions; another service's check
// does not see them.
func TestCheckListsKafkaPausesAsPaused(t *testing.T) {
	cl := topicsCLI(t)
	cl.run("check", "--fail-on-status", "PAUSED", "--service", "shop").wantCode(t, 0)
	cl.run("pause", "ledger", "o-1", "--service", "shop", "--topic", "orders", "--reason", "bad o-1", "--yes").wantCode(t, 0)
	r := cl.run("check", "--fail-on-status", "PAUSED", "--service", "shop", "-o", "json")
	r.wantCode(t, clierr.ExitCheckFailed)
	var doc checkDoc
	decode(t, r.stdout, &doc)
	if len(doc.Checks) != 1 || doc.Checks[0].Name != "status" || doc.Checks[0].Value == nil || *doc.Checks[0].Value != 1 ||
		len(doc.Checks[0].Offenders) != 1 || !strings.HasPrefix(doc.Checks[0].Offenders[0], "shop topic orders ledger key:o-1: PAUSED (") ||
		!strings.Contains(doc.Checks[0].Offenders[0], "bad o-1") {
		t.Fatalf("check -o json:\n%s", r.stdout)
	}
	cl.run("pause", "ledger", "--all", "--service", "shop", "--topic", "orders", "--yes").wantCode(t, 0)
	r = cl.run("check", "--fail-on-status", "PAUSED", "--service", "shop")
	r.wantCode(t, clierr.ExitCheckFailed)
	for _, want := range []string{"shop topic orders ledger all: PAUSED", "shop topic orders ledger key:o-1: PAUSED"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("check lacks %q:\n%s", want, r.stdout)
		}
	}
	// The default statuses do not fail on a pause (PAUSED is healthy).
	cl.run("check", "--service", "shop", "--fail-on-status", "HALTED,ORPHANED,STALLED").wantCode(t, 0)
}
