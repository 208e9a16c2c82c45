//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/acl"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// aclHandlerScript appends "key seq" to $RECORD for every event, and fails
// (an aggregate failure) on an envelope whose data says "fail":true.
const aclHandlerScript = `#!/bin/sh
read -r envelope || true
case "$envelope" in *'"fail":true'*) echo "poison" >&2; exit 1;; esac
seq=${envelope#*\"seq\":}
seq=${seq%%[!0-9]*}
echo "$PROTCTL_PARTITION $seq" >> "$RECORD"
`

// TestACLNodeRoleRunsANode runs `protctl run node` in-process as the node
// user (password from the config's passwordFile) on a server where the
// default user is off: a publisher under the node user appends events,
// the node consumes and acks them, parks the poison one; the readonly
// user sees it parked, the operator user skips it, the node acts on the
// request (a Pub/Sub message) and resolves it. No log line, output or
// error of any of them holds a password.
//
// It runs twice: with the broad rules, and with rules narrowed to the
// node's category and group (--category, --group).
func TestACLNodeRoleRunsANode(t *testing.T) {
	t.Run("broad", func(t *testing.T) { aclNodeScenario(t) })
	t.Run("narrowed", func(t *testing.T) { aclNodeScenario(t, "--category", procCategory, "--group", procGroup) })
}

func aclNodeScenario(t *testing.T, rules ...string) {
	srv := testenv.StartRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	users, passwords := map[acl.Role]string{}, map[acl.Role]string{}
	for _, role := range acl.Roles() {
		users[role], passwords[role] = createACLUser(t, admin, role, rules...)
	}
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "node.password")
	writeFile(t, pwFile, passwords[acl.Node]+"\n")
	script := filepath.Join(dir, "handler.sh")
	if err := os.WriteFile(script, []byte(aclHandlerScript), 0o755); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(dir, "record.txt")
	cfg := fmt.Sprintf(`service: %s
node: node-acl
redis: {url: "%s", username: "%s", passwordFile: "%s"}
admin: {listen: "127.0.0.1:0"}
lease: {ttl: %s, renewEvery: %s}
drain: {timeout: 10s}
subscriptions:
  - name: %s
    redis: {categories: ["%s"]}
    retry: {attempts: 2, backoff: 20ms}
    handler:
      exec:
        command: ["%s"]
        timeout: 30s
        env: {RECORD: "%s"}
`, procService, srv.URL(), users[acl.Node], pwFile, procTTL, procRenew, procGroup, procCategory, script, record)
	path := filepath.Join(dir, "node.yaml")
	writeFile(t, path, cfg)

	// The default user can do nothing from here on: every client below
	// is one of the three users.
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: users[acl.Operator], Password: passwords[acl.Operator]})
		defer c.Close()
		// testenv's cleanup talks to the server as the default user.
		_ = c.Do(context.Background(), "ACL", "SETUSER", "default", "on").Err()
	})

	logs := &procOutput{}
	stop := startACLNode(t, path, logs)

	// A publisher under the node user: 3 keys x 3 events, and a poison
	// event then a good one on o-poison.
	nodeClient := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: users[acl.Node], Password: passwords[acl.Node]})
	defer nodeClient.Close()
	pub, err := partitioned.NewPublisher(redisbroker.New(nodeClient))
	if err != nil {
		t.Fatal(err)
	}
	publish := func(key, env string) {
		t.Helper()
		if _, err := pub.Publish(ctx, procCategory, key, []byte(env)); err != nil {
			t.Fatalf("publish as the node user: %v", err)
		}
	}
	for seq := 1; seq <= 3; seq++ {
		for _, k := range []string{"o-1", "o-2", "o-3"} {
			publish(k, fmt.Sprintf(`{"data":{"key":"%s","seq":%d},"metadata":{"headers":{"id":"%s-%d","type":"T"}}}`, k, seq, k, seq))
		}
	}
	publish("o-poison", `{"data":{"key":"o-poison","seq":1,"fail":true},"metadata":{"headers":{"id":"p-1","type":"T"}}}`)
	publish("o-poison", `{"data":{"key":"o-poison","seq":2},"metadata":{"headers":{"id":"p-2","type":"T"}}}`)

	recorded := func() string {
		b, _ := os.ReadFile(record)
		return string(b)
	}
	testenv.Eventually(t, 60*time.Second, "9 events handled", func() (bool, string) {
		n := strings.Count(recorded(), "\n")
		return n >= 9, fmt.Sprintf("%d handled", n)
	})

	// The readonly user sees the parked aggregate.
	ro := func(args ...string) result {
		t.Helper()
		cl := newCLI(t)
		cl.env["PROTCTL_REDIS"] = srv.URL()
		cl.env["PROTCTL_REDIS_USERNAME"] = users[acl.ReadOnly]
		cl.env["PROTCTL_REDIS_PASSWORD"] = passwords[acl.ReadOnly]
		r := cl.run(append(args, "-vv")...)
		noPassword(t, passwords, r.stdout+r.stderr)
		return r
	}
	var parked struct {
		Items []ledger.Parked `json:"items"`
	}
	testenv.Eventually(t, 60*time.Second, "o-poison parked", func() (bool, string) {
		r := ro("parked", "ls", "-o", "json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &parked) == nil &&
			len(parked.Items) == 1 && parked.Items[0].Aggregate == "o-poison", fmt.Sprintf("parked ls exit %d: %s%s", r.code, r.stdout, r.stderr)
	})
	ro("nodes", "ls", "--service", procService, "-o", "json").wantCode(t, 0)
	ro("partitions", "ls", procCategory, "-o", "json").wantCode(t, 0)

	// The operator skips it; the node resolves the request.
	op := newCLI(t)
	op.env["PROTCTL_REDIS"] = srv.URL()
	op.env["PROTCTL_REDIS_USERNAME"] = users[acl.Operator]
	op.env["PROTCTL_REDIS_PASSWORD"] = passwords[acl.Operator]
	r := op.run("parked", "skip", procGroup, "o-poison", "--reason", "poison", "--yes", "-vv")
	noPassword(t, passwords, r.stdout+r.stderr)
	r.wantCode(t, 0)
	testenv.Eventually(t, 60*time.Second, "o-poison resolved and its next event handled", func() (bool, string) {
		r := ro("parked", "ls", "-o", "json")
		handled := recorded()
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &parked) == nil &&
				len(parked.Items) == 0 && strings.Contains(handled, "o-poison 2\n"),
			fmt.Sprintf("parked ls exit %d: %s%s; handled:\n%s", r.code, r.stdout, r.stderr, handled)
	})

	// Everything was acked.
	for _, k := range []string{"o-1", "o-2", "o-3", "o-poison"} {
		stream := broker.ProteanLayout.Stream(procCategory, k)
		testenv.Eventually(t, 30*time.Second, stream+" acked", func() (bool, string) {
			p, err := nodeClient.XPending(ctx, stream, procGroup).Result()
			return err == nil && p.Count == 0, fmt.Sprintf("pending %+v, err %v", p, err)
		})
	}
	if err := stop(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	noPassword(t, passwords, logs.String())
	if r := refusals(logs.String()); len(r) > 0 {
		t.Fatalf("the node was refused something:\n%s\n\nwhole log:\n%s", strings.Join(r, "\n"), logs.String())
	}
}

// startACLNode runs runNode in-process with debug logs into logs, and
// returns a function that drains it.
func startACLNode(t *testing.T, config string, logs *procOutput) (stop func() error) {
	t.Helper()
	_, stop = startRunNodeOpts(t, &runNodeOptions{
		Out: logs, ErrOut: logs, Getenv: func(string) string { return "" },
		ConfigPath: config, LogFormat: "text", LogLevel: slog.LevelDebug,
	}, logs)
	return stop
}
