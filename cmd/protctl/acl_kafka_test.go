//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/acl"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// TestACLReadOnlyTopics: topics ls and show read the Kafka lease groups
// from Redis as the readonly user, with the default user's result.
func TestACLReadOnlyTopics(t *testing.T) {
	cl := topicsCLI(t)
	opt, err := redis.ParseURL(cl.env["PROTCTL_REDIS"])
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(opt)
	defer admin.Close()
	user, pw := createACLUser(t, admin, acl.ReadOnly)
	for _, args := range [][]string{
		{"topics", "ls", "--service", "shop", "-o", "json"},
		{"topics", "show", "orders", "--service", "shop", "-o", "json"},
	} {
		want := cl.run(args...)
		want.wantCode(t, 0)
		ro := *cl
		ro.env = map[string]string{}
		for k, v := range cl.env {
			ro.env[k] = v
		}
		ro.env["PROTCTL_REDIS_USERNAME"], ro.env["PROTCTL_REDIS_PASSWORD"] = user, pw
		got := ro.run(append(args, "-vv")...)
		got.wantCode(t, 0)
		if strings.Contains(got.stdout+got.stderr, pw) {
			t.Fatal("the password was printed")
		}
		if g, w := normalizeJSON(t, got.stdout), normalizeJSON(t, want.stdout); g != w {
			t.Fatalf("%s as readonly:\n%s\nas the default user:\n%s", strings.Join(args, " "), g, w)
		}
	}
}

// TestACLNodeRoleRunsAKafkaSubscription: a node whose Redis user is the
// node role's runs a Kafka topic subscription: it leases the partitions,
// hands every record to the handler, parks the aggregate the handler
// refuses (the ledger), saves the checkpoints, and hands the leases back.
func TestACLNodeRoleRunsAKafkaSubscription(t *testing.T) {
	srv := testenv.StartRedis(t)
	admin := srv.Client(t)
	kafka := testenv.StartKafka(t, 2, "orders")
	user, pw := createACLUser(t, admin, acl.Node)
	roUser, roPW := createACLUser(t, admin, acl.ReadOnly)
	passwords := map[acl.Role]string{acl.Node: pw, acl.ReadOnly: roPW}

	var (
		mu   sync.Mutex
		seen int
	)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env struct {
			Data struct {
				Key string `json:"key"`
			} `json:"data"`
		}
		_ = json.NewDecoder(r.Body).Decode(&env)
		if env.Data.Key == "bad" {
			w.WriteHeader(http.StatusUnprocessableEntity) // an aggregate failure
			return
		}
		mu.Lock()
		seen++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer hs.Close()

	dir := t.TempDir()
	pwFile := filepath.Join(dir, "node.password")
	writeFile(t, pwFile, pw+"\n")
	path := filepath.Join(dir, "node.yaml")
	writeFile(t, path, fmt.Sprintf(`service: shop
node: node-1
redis: {url: "%s", username: "%s", passwordFile: "%s"}
kafka: {brokers: ["%s"]}
admin: {listen: "127.0.0.1:0"}
lease: {ttl: 2s, renewEvery: 400ms}
subscriptions:
  - name: ledger-sync
    kafka: {topic: orders}
    retry: {attempts: 2, backoff: 20ms}
    handler:
      http: {url: "%s/events"}
`, srv.URL(), user, pwFile, kafka.Brokers[0], hs.URL))
	logs := &procOutput{}
	stop := startACLNode(t, path, logs)

	kc := kafka.Client(t)
	var records []*kgo.Record
	for seq := 1; seq <= 5; seq++ {
		for i, k := range []string{"a", "b", "c", "d"} {
			v := fmt.Sprintf(`{"data":{"key":"%s","seq":%d},"metadata":{"headers":{"id":"%s-%d"}}}`, k, seq, k, seq)
			records = append(records, &kgo.Record{Topic: "orders", Partition: int32(i % 2), Key: []byte(k), Value: []byte(v)})
		}
	}
	records = append(records, &kgo.Record{Topic: "orders", Partition: 0, Key: []byte("bad"),
		Value: []byte(`{"data":{"key":"bad","seq":1},"metadata":{"headers":{"id":"bad-1"}}}`)})
	kafka.Produce(t, kc, records...)
	testenv.Eventually(t, time.Minute, "every good record handled", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return seen >= 20, fmt.Sprintf("%d of 20 handled", seen)
	})
	var parked struct {
		Items []ledger.Parked `json:"items"`
	}
	testenv.Eventually(t, time.Minute, "bad parked, seen by the readonly user", func() (bool, string) {
		cl := newCLI(t)
		cl.env["PROTCTL_REDIS"] = srv.URL()
		cl.env["PROTCTL_REDIS_USERNAME"], cl.env["PROTCTL_REDIS_PASSWORD"] = roUser, roPW
		r := cl.run("parked", "ls", "-o", "json", "-vv")
		noPassword(t, passwords, r.stdout+r.stderr)
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &parked) == nil && len(parked.Items) == 1 && parked.Items[0].Aggregate == "bad",
			fmt.Sprintf("parked ls exit %d: %s%s", r.code, r.stdout, r.stderr)
	})
	if err := stop(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	next, err := redisstore.New(admin).LoadAll(context.Background(), redisstore.TopicLeaseGroup("shop", "orders").String(), "ledger-sync")
	if err != nil {
		t.Fatal(err)
	}
	if next[0] != 11 || next[1] != 10 {
		t.Fatalf("checkpoints %v, want partition 0 at 11 and 1 at 10 (every record)", next)
	}
	noPassword(t, passwords, logs.String())
	if r := refusals(logs.String()); len(r) > 0 {
		t.Fatalf("the node was refused something:\n%s\n\nwhole log:\n%s", strings.Join(r, "\n"), logs.String())
	}
}
